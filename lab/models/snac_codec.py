"""The SNAC 24 kHz codec that turns Orpheus' audio tokens into waveform, streamed in windows.

SNAC codes a coarse frame (2048 samples, 85 ms) as a small tree: 1 code at level 0, 2 at
level 1 and 4 at level 2. Orpheus emits each frame as 7 tokens, the tree flattened depth-first:
(l0, l1a, l2a, l2b, l1b, l2c, l2d). Here a frame is that 7-code row.

It streams through `lab.stream.codec_stream`, in windows of frames.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import torch
from torch import nn

from lab.models.snake import fuse_snake
from lab.quant.compile import EagerOnFailure, compile_note
from lab.stream.codec_graphs import BATCHES, CodecGraphs, codec_graphs
from lab.stream.codec_stream import CodecError, StreamWindow

SNAC_24KHZ = {
    "sampling_rate": 24000, "encoder_dim": 48, "encoder_rates": [2, 4, 8, 8],
    "decoder_dim": 1024, "decoder_rates": [8, 8, 4, 2], "attn_window_size": None,
    "codebook_size": 4096, "codebook_dim": 8, "vq_strides": [4, 2, 1], "noise": True,
    "depthwise": True,
}
HUB_ID = "hubertsiuzdak/snac_24khz"
FRAME_CODES = 7
# Column of each level's codes inside a 7-code frame (the depth-first flattening above).
LEVEL_COLUMNS = ((0,), (1, 4), (2, 3, 5, 6))


def build_snac(config: dict | None = None, *, seed: int = 0) -> nn.Module:
    """A SNAC with seeded random weights: right shapes and cost, meaningless sound."""
    from snac import SNAC

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return SNAC(**(config or SNAC_24KHZ)).eval()


def load_snac(source: str = HUB_ID) -> nn.Module:
    """Real SNAC weights from a local directory (config.json + pytorch_model.bin) or a hub id."""
    from snac import SNAC

    path = Path(source)
    if not path.is_dir() and (path.suffix or source.count("/") != 1):
        raise CodecError(f"{source!r} is neither a SNAC directory nor a hub id (owner/name)")
    if path.is_dir() and not (path / "config.json").is_file():
        raise CodecError(f"{source} has no config.json; expected a SNAC checkpoint directory")
    try:
        return SNAC.from_pretrained(source).eval()
    except Exception as err:
        raise CodecError(
            f"could not load SNAC from {source!r} ({type(err).__name__}: {err}). Without hub "
            "access pass a local directory holding config.json and pytorch_model.bin, or use "
            "dummy codec weights.") from err


def strip_noise(model: nn.Module) -> int:
    """Replace the decoder's noise injections with identities; returns how many there were.

    SNAC adds fresh Gaussian noise inside its decoder on every call. That is part of the trained
    sound, but it makes two decodes of the same codes differ, so comparisons (streamed vs
    one-shot, eager vs compiled) need it off.
    """
    from snac.layers import NoiseBlock

    count = 0
    for module in list(model.modules()):
        for name, child in module.named_children():
            if isinstance(child, NoiseBlock):
                setattr(module, name, nn.Identity())
                count += 1
    return count


def fold_weight_norm(model: nn.Module) -> None:
    """Bake each weight-normed convolution's weight once instead of on every call."""
    from torch.nn.utils import parametrize

    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


def _pinned(frames: torch.Tensor) -> torch.Tensor:
    """Host codes in pinned memory, for a copy that does not wait for queued device work.
    Filled into a fresh pinned tensor: `Tensor.pin_memory()` first asks the driver whether the
    tensor is pinned already, which cost the serving thread more than the copy itself (20
    against 16 us a call in the host table of `orpheus_streams_h100_profile128.txt`)."""
    pinned = torch.empty(frames.shape, dtype=torch.long, pin_memory=True)
    return pinned.copy_(frames)


def _check_frames(frames: torch.Tensor) -> torch.Tensor:
    if frames.dim() != 3 or frames.shape[-1] != FRAME_CODES:
        raise CodecError(f"frames must be [B, F, {FRAME_CODES}]; got {tuple(frames.shape)}")
    return frames


def levels_from_frames(frames: torch.Tensor, columns: list[torch.Tensor] | None = None
                       ) -> list[torch.Tensor]:
    """[B, F, 7] frames -> SNAC's three code levels [B, F], [B, 2F], [B, 4F].

    `columns` are `LEVEL_COLUMNS` as index tensors on the frames' device; pass them where the
    call is captured in a CUDA graph, which cannot copy fresh indices from the host.
    """
    _check_frames(frames)
    if columns is None:
        columns = [torch.tensor(cols, device=frames.device) for cols in LEVEL_COLUMNS]
    b = frames.shape[0]
    return [frames.index_select(2, cols).reshape(b, -1) for cols in columns]


class SnacCodec:
    """A SNAC decoder on a device: `decode(frames[B, F, 7]) -> audio[B, F * 2048]`."""

    def __init__(self, model: nn.Module, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, noise: bool = True,
                 compile_mode: str = "none", is_dummy: bool = False,
                 cuda_graphs: bool = False, max_batch: int = BATCHES[-1]) -> None:
        if not noise:
            strip_noise(model)
        fold_weight_norm(model)
        if compile_mode == "none":  # a compiled decoder fuses the snake itself
            fuse_snake(model)
        self.model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
        self.device, self.dtype, self.is_dummy = torch.device(device), dtype, is_dummy
        self.sample_rate = int(model.sampling_rate)
        self.frame_samples = int(model.hop_length) * int(model.vq_strides[0])
        self.codebook_size = int(model.codebook_size)
        self.frame_codes = FRAME_CODES
        self.fallbacks: list[str] = []
        # Dynamic from the start: the batch (streams due) and the window length vary, and
        # each specialisation would otherwise compile again mid-run.
        self._decode = EagerOnFailure(self._eager, compile_mode, "SNAC", self.fallbacks,
                                      dynamic=True)
        self.compile_mode = compile_mode
        if note := compile_note(compile_mode, "the SNAC codec"):
            self.fallbacks.append(note)
        self._columns = [torch.tensor(cols, device=self.device) for cols in LEVEL_COLUMNS]
        self.graphs: CodecGraphs | None = (
            codec_graphs(self._decode_codes, FRAME_CODES, self.device, max_batch, "SNAC",
                         self.fallbacks,
                         compiled=self._decode) if cuda_graphs else None)

    def capture(self, max_frames: int, common: Collection[int] | None = None) -> None:
        """Capture the decode of 1 to `max_frames` frames now (when CUDA graphs are on), those
        in `common` (every one when None) at every batch bucket and the rest at the smallest,
        so no stream pays for a capture; a failure lands in `fallbacks`."""
        if self.graphs is not None:
            self.graphs.capture_windows(max_frames, self.fallbacks, common)

    @classmethod
    def from_source(cls, source: str, **kwargs) -> SnacCodec:
        """'dummy' (seeded random weights, `seed` kwarg) or a local dir / hub id."""
        seed = kwargs.pop("seed", 0)
        if source == "dummy":
            return cls(build_snac(seed=seed), is_dummy=True, **kwargs)
        return cls(load_snac(source), **kwargs)

    def _eager(self, levels: list[torch.Tensor]) -> torch.Tensor:
        return self.model.decode(levels)

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor) -> torch.Tensor:
        """Waveform [B, F * frame_samples] (float32, on the codec's device) for frames [B, F, 7].

        Host frames are range-checked here, where it costs no device sync, then copied over.
        """
        frames = torch.as_tensor(frames)
        if frames.device.type == "cpu":
            if frames.numel() and (frames.min() < 0 or frames.max() >= self.codebook_size):
                raise CodecError(f"codes must lie in [0, {self.codebook_size}); got "
                                 f"{int(frames.min())}..{int(frames.max())}")
            if self.device.type == "cuda":
                frames = _pinned(frames)
        frames = _check_frames(frames.to(self.device, torch.long, non_blocking=True))
        return self._decode_codes(frames) if self.graphs is None else self.graphs(frames)

    def _decode_codes(self, frames: torch.Tensor) -> torch.Tensor:
        """The device side of `decode`, what a CUDA graph captures: no host tensors, no syncs
        (the level columns are gathered by indices already on the device)."""
        return self._decode(levels_from_frames(frames, self._columns))[:, 0].float()


# The reference Orpheus decoder's choice: a 4-frame window whose second frame is kept.
ORPHEUS_WINDOW = StreamWindow(hop=1, left=1, right=2)
