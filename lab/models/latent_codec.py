"""The lab's own codec: residual vector quantization of the default voice's latent frames,
decoded by that voice's own HiFi-GAN generator.

The Piper voice's flow hands its vocoder 192-channel latent frames, 256 samples each at
22.05 kHz. A group of `group_frames` such frames, flattened, is one vector; `levels` residual
codebooks of `codebook_size` entries each turn it into `levels` integer codes (each level codes
what the levels before it missed). Decoding turns codes back into latent frames (the sum of the
codebook rows, or a small trained `LatentDecoder` that starts from them) and runs the generator,
so the codec sounds like the voice wherever the latents are close. One group is the codec's
frame: `frame_samples = group_frames * 256` samples, `levels` codes.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lab.models.latent_decoder import LatentDecoder
from lab.models.snac_codec import CodecError
from lab.models.vits.generator import Generator
from lab.quant.compile import EagerOnFailure, compile_note
from lab.stream.codec_graphs import BATCHES, CodecGraphs, codec_graphs

HOP = 256
CHANNELS = 192


@dataclass(frozen=True)
class CodecShape:
    """How latent frames become codes; the token rate is `levels * frames_per_second /
    group_frames`."""

    group_frames: int = 4
    levels: int = 4
    codebook_size: int = 1024
    channels: int = CHANNELS

    @property
    def dim(self) -> int:
        return self.group_frames * self.channels

    def tokens_per_second(self, sample_rate: int = 22050) -> float:
        return self.levels * sample_rate / (HOP * self.group_frames)


def shape_of(codebooks: torch.Tensor) -> CodecShape:
    levels, size, dim = codebooks.shape
    if dim % CHANNELS:
        raise CodecError(f"codebook vectors of {dim} values are not whole {CHANNELS}-channel "
                         "frames")
    return CodecShape(dim // CHANNELS, levels, size)


def nearest(vectors: torch.Tensor, book: torch.Tensor,
            chunk: int = 65536) -> tuple[torch.Tensor, torch.Tensor]:
    """(index of the nearest row, squared distance to it) per vector, in chunks to bound
    memory: ||x||^2 - 2 x.c + ||c||^2 without forming the difference."""
    norms = (book * book).sum(-1)
    index, dist = [], []
    for part in vectors.split(chunk):
        d = (part * part).sum(-1, keepdim=True) - 2 * part @ book.T + norms
        best = d.min(dim=-1)
        index.append(best.indices)
        dist.append(best.values.clamp_min(0))
    return torch.cat(index), torch.cat(dist)


def quantize(vectors: torch.Tensor, codebooks: torch.Tensor) -> torch.Tensor:
    """Codes [N, levels] for vectors [N, dim]: at each level the nearest row to what is left."""
    residual = vectors.float()
    codes = []
    for book in codebooks.float():
        index = nearest(residual, book)[0]
        codes.append(index)
        residual = residual - book[index]
    return torch.stack(codes, dim=-1)


def dequantize(codes: torch.Tensor, codebooks: torch.Tensor) -> torch.Tensor:
    """Vectors [..., dim] for codes [..., levels]: the sum of each level's row."""
    out = codebooks[0][codes[..., 0]]
    for level in range(1, codebooks.shape[0]):
        out = out + codebooks[level][codes[..., level]]
    return out


def group_latents(latents: torch.Tensor, group_frames: int) -> torch.Tensor:
    """Latent frames [T, C] -> vectors [ceil(T / group), group * C]; a last partial group is
    filled with zero frames (the voice's own padding value)."""
    t, c = latents.shape
    groups = -(-t // group_frames)
    padded = latents.new_zeros(groups * group_frames, c)
    padded[:t] = latents
    return padded.reshape(groups, group_frames * c)


def save_codebooks(codebooks: torch.Tensor, path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"codebooks": codebooks.to(torch.float16).contiguous()}, str(path))


def load_codebooks(path: Path) -> torch.Tensor:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise CodecError(f"codebooks not found: {path}")
    try:
        books = load_file(str(path))["codebooks"].float()
    except (SafetensorError, KeyError, OSError) as err:
        raise CodecError(f"{path} is not a codebook file ({type(err).__name__}: {err})") from err
    if books.dim() != 3:
        raise CodecError(f"{path}: codebooks must be [levels, size, dim]; got "
                         f"{tuple(books.shape)}")
    shape_of(books)
    return books


class LatentCodec:
    """`decode(frames[B, G, levels]) -> audio[B, G * frame_samples]` through the voice's
    generator; `encode(latents[T, 192]) -> codes[G, levels]` for making training data.
    With a `decoder`, codes become latents through it instead of the sum of k-means rows.
    With `cuda_graphs` on a GPU, window decodes of up to `max_batch` streams replay from CUDA
    graphs (`lab.stream.codec_graphs`): the generator is some forty convolutions, whose
    launches would otherwise cost the host more than the GPU's work."""

    def __init__(self, codebooks: torch.Tensor, generator: Generator, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 compile_mode: str = "none", decoder: LatentDecoder | None = None,
                 cuda_graphs: bool = False, max_batch: int = BATCHES[-1]) -> None:
        self.shape = shape_of(codebooks)
        self.device, self.dtype = torch.device(device), dtype
        self.codebooks = codebooks.to(self.device, torch.float32)
        self.decoder = (None if decoder is None else
                        decoder.to(self.device, dtype).eval().requires_grad_(False))
        self.generator: nn.Module = generator.to(self.device, dtype).eval().requires_grad_(False)
        self.sample_rate = 22050
        self.frame_samples = self.shape.group_frames * HOP
        self.frame_codes = self.shape.levels
        self.codebook_size = self.shape.codebook_size
        self.is_dummy = False
        self.fallbacks: list[str] = []
        self.compile_mode = compile_mode
        self._decode = EagerOnFailure(self._eager, compile_mode, "codec", self.fallbacks,
                                      dynamic=True)
        if note := compile_note(compile_mode, "the voice codec's generator"):
            self.fallbacks.append(note)
        self.graphs: CodecGraphs | None = (
            codec_graphs(self._decode_codes, self.frame_codes, self.device, max_batch,
                         "The voice codec's", self.fallbacks,
                         compiled=self._decode) if cuda_graphs else None)

    def capture(self, max_frames: int, common: Collection[int] | None = None) -> None:
        """Capture the decode of 1 to `max_frames` frames now (when CUDA graphs are on), those
        in `common` (every one when None) at every batch bucket and the rest at the smallest,
        so no stream pays for a capture; a failure lands in `fallbacks`."""
        if self.graphs is not None:
            self.graphs.capture_windows(max_frames, self.fallbacks, common)

    @torch.inference_mode()
    def encode(self, latents: torch.Tensor) -> torch.Tensor:
        vectors = group_latents(latents.to(self.device, torch.float32), self.shape.group_frames)
        return quantize(vectors, self.codebooks)

    def latents(self, frames: torch.Tensor) -> torch.Tensor:
        """Codes [B, G, levels] -> latent frames [B, channels, G * group_frames]."""
        if self.decoder is not None:
            return self.decoder(frames)
        b, g, _ = frames.shape
        z = dequantize(frames, self.codebooks).reshape(b, g * self.shape.group_frames, -1)
        return z.transpose(1, 2).to(self.dtype)

    def _eager(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z, None)

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor) -> torch.Tensor:
        """Waveform [B, G * frame_samples] (float32, on the codec's device) for codes."""
        frames = torch.as_tensor(frames)
        if frames.dim() != 3 or frames.shape[-1] != self.frame_codes:
            raise CodecError(f"codes must be [B, G, {self.frame_codes}]; got "
                             f"{tuple(frames.shape)}")
        if frames.numel() and (frames.min() < 0 or frames.max() >= self.codebook_size):
            raise CodecError(f"codes must lie in [0, {self.codebook_size}); got "
                             f"{int(frames.min())}..{int(frames.max())}")
        codes = frames.to(self.device, torch.long)
        return self._decode_codes(codes) if self.graphs is None else self.graphs(codes)

    def _decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """The device side of `decode`, what a CUDA graph captures."""
        return self._decode(self.latents(codes)).float()
