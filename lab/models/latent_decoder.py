"""The codec's learned decoder: codes -> latent frames, trained to undo what quantization lost.

Residual k-means picks each level's row greedily and decodes a group by summing rows, one group
at a time. Both leave error a trained decoder can take back: its own tables (started from the
k-means rows) learn what latent each code stands for once the other levels are known, and a
few convolutions over neighbouring frames smooth what one group cannot know of the next. The
codes do not change (encoding stays nearest-row k-means), so a language model trained on them
needs no retraining: only the sound of its codes improves.

The convolutions see `reach` frames either side, fewer than the streaming window's context, so
streamed chunks still join into the one-shot decode. A frame's place inside its group is an
input: the error of a jointly coded group depends on it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from lab.stream.codec_stream import CodecError

DECODER_FORMAT = "lab-latent-decoder-1"


@dataclass(frozen=True)
class DecoderShape:
    levels: int
    codebook_size: int
    group_frames: int
    channels: int = 192
    hidden: int = 256
    dilations: tuple[int, ...] = (1, 1, 2)

    @property
    def reach(self) -> int:
        """Frames of context either side that one output frame depends on."""
        return 1 + sum(self.dilations)


class _Block(nn.Module):
    def __init__(self, width: int, dilation: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(width, width, 3, padding=dilation, dilation=dilation)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.conv(x))


class LatentDecoder(nn.Module):
    """`forward(codes [B, G, levels]) -> latents [B, channels, G * group_frames]`."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.shape = shape
        dim = shape.group_frames * shape.channels
        self.tables = nn.Parameter(torch.zeros(shape.levels, shape.codebook_size, dim))
        self.inp = nn.Conv1d(shape.channels + shape.group_frames, shape.hidden, 3, padding=1)
        self.blocks = nn.Sequential(*(_Block(shape.hidden, d) for d in shape.dilations))
        self.out = nn.Conv1d(shape.hidden, shape.channels, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    @classmethod
    def from_codebooks(cls, codebooks: torch.Tensor, seed: int = 0, **kw) -> LatentDecoder:
        """A decoder that starts as the plain sum of k-means rows (its correction is zero),
        its convolutions drawn from `seed` so that a training run can be repeated."""
        levels, size, dim = codebooks.shape
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            decoder = cls(DecoderShape(levels, size, dim // 192, **kw))
        with torch.no_grad():
            decoder.tables.copy_(codebooks.float())
        return decoder

    def summed(self, codes: torch.Tensor) -> torch.Tensor:
        """The tables' rows summed over levels, as frames [B, channels, T]."""
        s = self.shape
        rows = sum(self.tables[level][codes[..., level]] for level in range(s.levels))
        b, g, _ = codes.shape
        return rows.reshape(b, g * s.group_frames, s.channels).transpose(1, 2)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        z = self.summed(codes)
        b, _, t = z.shape
        phase = torch.eye(self.shape.group_frames, dtype=z.dtype, device=z.device)
        phase = phase.repeat(1, t // self.shape.group_frames).expand(b, -1, -1)
        return z + self.out(self.blocks(self.inp(torch.cat([z, phase], dim=1))))


def save_decoder(decoder: LatentDecoder, path: Path) -> Path:
    """fp16 tensors with the shape in the header, like the LM's file."""
    tensors = {k: v.detach().to("cpu", torch.float16).contiguous()
               for k, v in decoder.state_dict().items()}
    save_file(tensors, str(path), metadata={"format": DECODER_FORMAT,
                                            "shape": json.dumps(asdict(decoder.shape))})
    return Path(path)


def load_decoder(path: Path, codebooks: torch.Tensor) -> LatentDecoder:
    """The decoder in eval mode; refused by name when unreadable or made for other codes."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k).float() for k in f.keys()}
        fields = json.loads(meta["shape"])
        shape = DecoderShape(**{**fields, "dilations": tuple(fields["dilations"])})
    except (SafetensorError, OSError, KeyError, TypeError, ValueError) as err:
        raise CodecError(f"{path} is not a latent decoder file ({type(err).__name__}: "
                         f"{err})") from err
    if tuple(codebooks.shape) != (shape.levels, shape.codebook_size,
                                  shape.group_frames * shape.channels):
        raise CodecError(f"{path} decodes {shape.levels} levels of {shape.codebook_size} codes "
                         f"over {shape.group_frames} frames; the codebooks are "
                         f"{tuple(codebooks.shape)}")
    decoder = LatentDecoder(shape)
    try:
        decoder.load_state_dict(tensors)
    except RuntimeError as err:
        raise CodecError(f"{path} does not hold a decoder of its stated shape: {err}") from err
    return decoder.eval().requires_grad_(False)
