"""The SNAC 24 kHz codec that turns Orpheus' audio tokens into waveform, streamed in windows.

SNAC codes a coarse frame (2048 samples, 85 ms) as a small tree: 1 code at level 0, 2 at
level 1 and 4 at level 2. Orpheus emits each frame as 7 tokens, the tree flattened depth-first:
(l0, l1a, l2a, l2b, l1b, l2c, l2d). Here a frame is that 7-code row.

Streaming decodes a fixed window of frames each time `hop` new frames are safe to emit: `left`
frames of context before them, `right` after. The decoder's convolutions see a few frames either
side, so with enough context the joined chunks match a one-shot decode; the work per chunk is
constant however long the utterance gets. All streams due at the same step decode in one
batched call, optionally on a side CUDA stream so the LM's next step overlaps it. On a GPU the
audio comes back by a non-blocking copy and is collected once it has landed, so the host never
waits on the codec.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from lab.quant.compile import compile_note, compiled

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


class CodecError(ValueError):
    """The codec's weights cannot be found, or the codes handed to it are malformed."""


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


def levels_from_frames(frames: torch.Tensor) -> list[torch.Tensor]:
    """[B, F, 7] frames -> SNAC's three code levels [B, F], [B, 2F], [B, 4F]."""
    if frames.dim() != 3 or frames.shape[-1] != FRAME_CODES:
        raise CodecError(f"frames must be [B, F, {FRAME_CODES}]; got {tuple(frames.shape)}")
    b = frames.shape[0]
    return [frames[..., list(cols)].reshape(b, -1) for cols in LEVEL_COLUMNS]


class SnacCodec:
    """A SNAC decoder on a device: `decode(frames[B, F, 7]) -> audio[B, F * 2048]`."""

    def __init__(self, model: nn.Module, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, noise: bool = True,
                 compile_mode: str = "none", is_dummy: bool = False) -> None:
        if not noise:
            strip_noise(model)
        fold_weight_norm(model)
        self.model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
        self.device, self.dtype, self.is_dummy = torch.device(device), dtype, is_dummy
        self.sample_rate = int(model.sampling_rate)
        self.frame_samples = int(model.hop_length) * int(model.vq_strides[0])
        self.codebook_size = int(model.codebook_size)
        self.fallbacks: list[str] = []
        # Dynamic from the start: the batch (streams due) and the window length vary, and
        # each specialisation would otherwise compile again mid-run.
        self._decode = compiled(self._eager, compile_mode, dynamic=True)
        self.compile_mode = compile_mode
        if note := compile_note(compile_mode, "the SNAC codec"):
            self.fallbacks.append(note)

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
                frames = frames.to(torch.long).pin_memory()
        levels = levels_from_frames(frames.to(self.device, torch.long, non_blocking=True))
        try:
            audio = self._decode(levels)
        except Exception as err:  # a compiler failure must not cost the audio: decode eagerly
            if self._decode == self._eager:
                raise
            self.fallbacks.append(f"SNAC torch.compile({self.compile_mode}) failed "
                                  f"({type(err).__name__}: {err}); decoding eagerly")
            self._decode = self._eager
            audio = self._eager(levels)
        return audio[:, 0].float()


@dataclass(frozen=True)
class StreamWindow:
    """Emit `hop` frames per chunk, decoded with `left` frames before and `right` after.

    `ORPHEUS_WINDOW` (1, 1, 2) is the reference Orpheus decoder's choice: a 4-frame window whose
    second frame (samples 2048:4096) is kept.
    """

    hop: int = 1
    left: int = 1
    right: int = 2

    def __post_init__(self) -> None:
        if self.hop < 1 or self.left < 0 or self.right < 0:
            raise CodecError(f"window needs hop >= 1 and left, right >= 0; got {self}")

    @property
    def frames(self) -> int:
        return self.left + self.hop + self.right


ORPHEUS_WINDOW = StreamWindow(hop=1, left=1, right=2)


@dataclass
class AudioChunk:
    """One stream's next piece of audio; `final` marks its last."""

    stream_id: str
    index: int
    audio: torch.Tensor
    final: bool = False


@dataclass
class _Stream:
    frames: list[torch.Tensor] = field(default_factory=list)
    n_frames: int = 0
    emitted: int = 0
    chunks: int = 0
    closed: bool = False

    def window(self, start: int, stop: int) -> torch.Tensor:
        if not self.frames:
            self.frames = [torch.zeros(0, FRAME_CODES, dtype=torch.long)]
        if len(self.frames) > 1:
            self.frames = [torch.cat(self.frames)]
        return self.frames[0][start:stop]


@dataclass(frozen=True)
class _Job:
    stream_id: str
    index: int
    start: int     # first decoded frame
    stop: int      # one past the last decoded frame
    first: int     # first emitted frame
    last: int      # one past the last emitted frame
    final: bool


class StreamingDecoder:
    """Per-stream frame buffers and the windowed, batched decode of everything due.

    Call `push` as frames arrive and `close` when a stream ends; `decode_due()` then returns at
    most one chunk per stream, from one codec call per distinct window length. The first chunk
    goes out as soon as `hop + right` frames exist (its left context is simply missing), so the
    first audio waits for right context only; from the `left`-th chunk on every window is
    `window.frames` long.
    """

    def __init__(self, codec: SnacCodec, window: StreamWindow = ORPHEUS_WINDOW,
                 side_stream: bool = False) -> None:
        self.codec, self.window = codec, window
        self.streams: dict[str, _Stream] = {}
        self._touched: set[str] = set()  # streams pushed or closed since the last launch
        use_side = side_stream and codec.device.type == "cuda"
        self._side = torch.cuda.Stream(device=codec.device) if use_side else None
        self._pending: list[tuple[list[_Job], torch.Tensor, torch.cuda.Event | None]] = []
        self._spans: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.decode_calls = 0
        self.decoded_windows = 0
        self.host_decode_ms = 0.0  # accumulated codec time; device time once read on a GPU

    @property
    def busy(self) -> bool:
        """Streams still open, or decodes launched but not yet collected."""
        return bool(self.streams or self._pending)

    def open(self, stream_id: str) -> None:
        if stream_id in self.streams:
            raise CodecError(f"stream {stream_id!r} is already open")
        self.streams[stream_id] = _Stream()

    def push(self, stream_id: str, frames: torch.Tensor) -> None:
        """Append [n, 7] code frames to an open stream."""
        if frames.dim() != 2 or frames.shape[-1] != FRAME_CODES:
            raise CodecError(f"push takes [n, {FRAME_CODES}] frames; got {tuple(frames.shape)}")
        stream = self._stream(stream_id)
        stream.frames.append(frames.to(torch.long).cpu())
        stream.n_frames += frames.shape[0]
        self._touched.add(stream_id)

    def close(self, stream_id: str) -> None:
        """No more frames will come: the next decode flushes what is left."""
        self._stream(stream_id).closed = True
        self._touched.add(stream_id)

    def _stream(self, stream_id: str) -> _Stream:
        if stream_id not in self.streams:
            raise CodecError(f"stream {stream_id!r} is not open")
        return self.streams[stream_id]

    def _job(self, sid: str, s: _Stream) -> _Job | None:
        w, n, done = self.window, s.n_frames, s.emitted
        flush = s.closed and (n <= w.frames or n - done <= w.frames - w.left)
        if flush:
            start = max(0, n - w.frames)
            return _Job(sid, s.chunks, start, n, done, n, True)
        if n < done + w.hop + w.right:
            return None
        start, stop = max(0, done - w.left), done + w.hop + w.right
        return _Job(sid, s.chunks, start, stop, done, done + w.hop, False)

    def due(self) -> list[_Job]:
        """One job per stream that can emit now. Only streams that changed since the last
        launch are checked: a stream's state moves only by push and close."""
        touched, self._touched = self._touched, set()
        jobs = [job for sid in sorted(touched) if sid in self.streams
                and (job := self._job(sid, self.streams[sid]))]
        self._touched.update(job.stream_id for job in jobs if not job.final)
        return jobs

    def decode_due(self) -> list[AudioChunk]:
        """Decode every due window now and return the chunks (blocking)."""
        self.launch()
        return self.collect(wait=True)

    def launch(self) -> None:
        """Start the batched decode of every due window (on the side stream when enabled)."""
        groups: dict[int, list[tuple[_Job, torch.Tensor]]] = {}
        for job in self.due():
            stream = self.streams[job.stream_id]
            groups.setdefault(job.stop - job.start, []).append(
                (job, stream.window(job.start, job.stop)))
            stream.emitted, stream.chunks = job.last, stream.chunks + 1
            if job.final:
                del self.streams[job.stream_id]
        for length, batch in groups.items():
            jobs = [job for job, _ in batch]
            if length == 0:
                self._pending.append((jobs, torch.zeros(len(jobs), 0), None))
                continue
            frames = torch.stack([f for _, f in batch])
            self.decode_calls += 1
            self.decoded_windows += len(jobs)
            self._pending.append((jobs, *self._decode(frames)))

    def _decode(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        if self.codec.device.type != "cuda":
            start = time.perf_counter()
            audio = self.codec.decode(frames)
            self.host_decode_ms += (time.perf_counter() - start) * 1e3
            return audio, None
        # The side stream need not wait for the LM: frames come from the host, weights are fixed.
        stream = self._side or torch.cuda.current_stream(self.codec.device)
        with torch.cuda.stream(stream):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record(stream)
            audio = self.codec.decode(frames)
            end.record(stream)
            self._spans.append((begin, end))
            host = torch.empty(audio.shape, dtype=audio.dtype, pin_memory=True)
            host.copy_(audio, non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
        return host, done

    def device_decode_ms(self) -> float:
        """Device time spent in codec decodes so far (host time on CPU); waits for them."""
        if self._spans:
            self._spans[-1][1].synchronize()
            self.host_decode_ms += sum(begin.elapsed_time(end) for begin, end in self._spans)
            self._spans = []
        return self.host_decode_ms

    def collect(self, wait: bool = False) -> list[AudioChunk]:
        """Chunks whose decode has finished (every launched one with `wait`)."""
        chunks, still = [], []
        for jobs, audio, done in self._pending:
            if done is not None and not wait and not done.query():
                still.append((jobs, audio, done))
                continue
            if done is not None:
                done.synchronize()
            chunks.extend(self._cut(jobs, audio.cpu()))
        self._pending = still
        return chunks

    def _cut(self, jobs: list[_Job], audio: torch.Tensor) -> list[AudioChunk]:
        n = self.codec.frame_samples
        return [AudioChunk(j.stream_id, j.index,
                           audio[i, (j.first - j.start) * n:(j.last - j.start) * n], j.final)
                for i, j in enumerate(jobs)]
