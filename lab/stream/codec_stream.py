"""Windowed, batched streaming decode for any codec whose frames are rows of integer codes.

A codec frame is a row of `codec.frame_codes` codes that decodes to `codec.frame_samples`
samples (SNAC: 7 codes per 2048 samples; the lab's voice codec: K codes per group of latent
frames). Streaming decodes a fixed window of frames each time `hop` new frames are safe to emit:
`left` frames of context before them, `right` after. The decoder's convolutions see a few frames
either side, so with enough context the joined chunks match a one-shot decode; the work per
chunk is constant however long the utterance gets. All streams due at the same step decode in
one batched call, optionally on a side CUDA stream so the LM's next step overlaps it. On a GPU
the audio comes back by a non-blocking copy and is collected once it has landed, so the host
never waits on the codec.
"""

from __future__ import annotations

import functools
import heapq
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch


class CodecError(ValueError):
    """The codec's weights cannot be found, or the codes handed to it are malformed."""


class Codec(Protocol):
    """What the streaming decoder needs of a codec."""

    device: torch.device
    frame_codes: int
    frame_samples: int
    sample_rate: int
    codebook_size: int

    def decode(self, frames: torch.Tensor) -> torch.Tensor:
        """Audio [B, F * frame_samples] for code frames [B, F, frame_codes]."""


# A stream that may grow its chunks waits for more frames only while its listener holds more
# than this much audio: enough to ride out a slow step (a prefill, a capture) and the side
# stream's decode before the next chunk lands.
GUARD_S = 0.25


@dataclass(frozen=True)
class StreamWindow:
    """Emit `hop` frames per chunk, decoded with `left` frames before and `right` after.

    With `max_hop` above `hop`, a stream whose listener has audio in hand takes bigger chunks
    (`hop` doubled, up to `max_hop`): each window re-decodes `left + right` frames of context,
    so at `hop=1` with 2 frames each side the codec decodes five frames for every one it emits,
    and at 8 frames per chunk less than two. The first chunk does not grow (it is `hop` frames,
    or `first`), so the time to first audio does not change. 0 keeps every chunk at `hop`.

    `first` (0: `hop`) is what the first chunk emits, still as soon as `hop + right` frames
    exist: up to `hop + right` frames, decoded with `hop + right - first` frames of right
    context. The time to first audio does not change; the listener starts with more audio in
    hand, so a slow step early in the stream does not run it dry, and the end of that first
    chunk is decoded with less context than the rest.

    `wait` (0: `hop + right`) is how many frames the first chunk waits for, between `hop` and
    `hop + right`. Fewer frames bring the first audio forward by a frame's tokens each (7 LM
    steps for SNAC), for less right context at the first chunk's end; `first` then lies in
    [hop, wait].

    `guard_s` is how much audio a listener must hold before its stream waits for a bigger
    chunk. A larger guard rides out longer slow steps; a smaller one lets chunks grow sooner,
    so under load, when streams hold little, the codec re-decodes less context and leaves the
    GPU to the LM's steps.

    `rush_s` > 0: a stream past its first chunk whose listener holds no more than `rush_s` of
    audio emits its next `hop` frames with one frame of right context fewer than `right`, as
    soon as they have that, instead of running dry while it waits for the last one. A frame's
    worth of LM steps sooner (7 for SNAC): the second chunk after a first of `hop + right`
    frames, which leaves no frame in hand, is the one a slow stretch of steps catches. Only a
    stream about to run dry pays for it, with less context at that chunk's end. 0: off.

    The defaults are the reference Orpheus decoder's choice: a 4-frame window whose second
    frame is kept.
    """

    hop: int = 1
    left: int = 1
    right: int = 2
    max_hop: int = 0
    first: int = 0
    wait: int = 0
    guard_s: float = GUARD_S
    rush_s: float = 0.0

    def __post_init__(self) -> None:
        if self.hop < 1 or self.left < 0 or self.right < 0:
            raise CodecError(f"window needs hop >= 1 and left, right >= 0; got {self}")
        if self.guard_s < 0:
            raise CodecError(f"guard_s={self.guard_s} is negative; the audio a listener holds "
                             f"before chunks grow is 0 s or more")
        if self.rush_s < 0 or (self.rush_s and not self.right):
            raise CodecError(f"rush_s={self.rush_s} needs to be 0 (off), or > 0 with right >= 1 "
                             f"(a rushed chunk has one frame of right context fewer); got "
                             f"right={self.right}")
        if self.max_hop and self.max_hop < self.hop:
            raise CodecError(f"max_hop={self.max_hop} is below hop={self.hop}; use 0 for "
                             f"chunks of hop frames only, or a value >= hop")
        if self.wait and not self.hop <= self.wait <= self.hop + self.right:
            raise CodecError(f"wait={self.wait} must lie in [hop, hop + right] = "
                             f"[{self.hop}, {self.hop + self.right}], or be 0 for hop + right")
        if self.first and not self.hop <= self.first <= self.ready:
            bound = "wait" if self.wait else "hop + right"
            raise CodecError(f"first={self.first} must lie in [hop, {bound}] = "
                             f"[{self.hop}, {self.ready}], or be 0 for hop")

    @property
    def ready(self) -> int:
        """Frames that must exist before the first chunk goes out."""
        return self.wait or self.hop + self.right

    @functools.cached_property
    def hops(self) -> tuple[int, ...]:
        """The chunk sizes a stream may take, smallest first: few sizes, so the streams due
        on one step still share decode calls."""
        largest, sizes = max(self.hop, self.max_hop), [self.hop]
        while sizes[-1] * 2 < largest:
            sizes.append(sizes[-1] * 2)
        return tuple(sizes) if sizes[-1] == largest else (*sizes, largest)

    @property
    def frames(self) -> int:
        """The longest window a chunk decodes."""
        return self.left + self.hops[-1] + self.right

    @functools.cached_property
    def lengths(self) -> frozenset[int]:
        """Every window length (frames decoded at once) a stream of at least `frames` frames
        asks for: its first chunk's, then its left context (all of it, or what the frames
        emitted so far give) plus a chunk size plus its right context (one frame fewer when
        rushed), and `frames` for its last. A shorter stream also ends on a window of its own
        length, so a codec that prepares its decode per length (CUDA graphs, each batch size
        about a second of cuDNN planning on a GPU) prepares these few at every batch size and
        the others at one."""
        opener = self.ready if self.first or self.wait else self.hop + self.right
        contexts = range(min(self.first or self.hop, self.left), self.left + 1)
        steady = {c + h + self.right for c in contexts for h in self.hops}
        rushed = {c + self.hop + self.right - 1 for c in contexts} if self.rush_s else set()
        return frozenset({opener, self.frames, *steady, *rushed})


@dataclass
class AudioChunk:
    """One stream's next piece of audio; `final` marks its last."""

    stream_id: str
    index: int
    audio: torch.Tensor
    final: bool = False


@dataclass
class _Stream:
    codes: np.ndarray | None = None  # the frames so far, at the head of a buffer that doubles
    n_frames: int = 0
    emitted: int = 0
    chunks: int = 0
    closed: bool = False
    started: float = 0.0  # clock time of the first chunk's launch
    played: float = 0.0  # seconds a listener has played, pausing whenever it ran dry
    seen: float = 0.0  # clock time `played` was brought up to

    def lead(self, now: float, frame_s: float) -> float:
        """Seconds of sent audio still ahead of playback (negative: its listener ran dry)."""
        return self.emitted * frame_s - (now - self.started)

    def play_until(self, now: float, frame_s: float) -> float:
        """Play the sent audio up to `now`; the seconds of it the listener still holds. Unlike
        `lead`, a listener that ran dry waits for the next chunk and plays on from there, as a
        player does, so an early stall is not a debt the stream carries for the rest of its
        life."""
        held = self.emitted * frame_s - self.played
        self.played += min(held, max(0.0, now - self.seen))
        self.seen = now
        return self.emitted * frame_s - self.played

    def add(self, codes: np.ndarray) -> None:
        """Append [n, width] frames. A frame or two arrives every step, for hundreds of
        streams: a buffer that doubles when full writes each in place, where joining small
        tensors cost the serving thread a few torch calls a frame and a window."""
        need = self.n_frames + len(codes)
        if self.codes is None or need > len(self.codes):
            grown = np.zeros((max(2 * need, 64), codes.shape[1]), dtype=np.int64)
            if self.codes is not None:
                grown[:self.n_frames] = self.codes[:self.n_frames]
            self.codes = grown
        self.codes[self.n_frames:need] = codes
        self.n_frames = need

    def window(self, start: int, stop: int, width: int) -> np.ndarray:
        """Frames [start, stop) of those pushed so far (a view: the batch copies it)."""
        if self.codes is None:
            return np.zeros((0, width), dtype=np.int64)
        return self.codes[start:min(stop, self.n_frames)]


@dataclass(frozen=True)
class _Job:
    stream_id: str
    index: int
    start: int     # first decoded frame
    stop: int      # one past the last decoded frame
    first: int     # first emitted frame
    last: int      # one past the last emitted frame
    final: bool


@dataclass
class _Launched:
    """One batched decode in flight: its jobs, the audio it fills (a pinned host buffer on a
    GPU), the event that marks it done (None where the decode already ran), and its launch
    time on the decoder's clock."""

    jobs: list[_Job]
    audio: torch.Tensor
    done: torch.cuda.Event | None
    at: float


class StreamingDecoder:
    """Per-stream frame buffers and the windowed, batched decode of everything due.

    Call `push` as frames arrive and `close` when a stream ends; `decode_due()` then returns at
    most one chunk per stream, from one codec call per distinct window length. The first chunk
    goes out as soon as `hop + right` frames exist, or the window's `wait` (its left context is
    simply missing), so the first audio waits for right context only; it emits `hop` frames, or
    the window's `first`.
    From the `left`-th chunk on every window is `left + hop + right` frames long.

    Where the window lets chunks grow (`max_hop`), a stream ready to emit waits for a bigger
    chunk while the audio already sent runs ahead of playback by more than the window's
    `guard_s`; playback is counted from the first chunk's launch on `clock`, which is earlier
    than any listener can start, so the estimate errs on the side of emitting. The same count
    decides when a stream short of right context rushes a chunk (`rush_s`).
    """

    def __init__(self, codec: Codec, window: StreamWindow | None = None,
                 side_stream: bool = False, *, clock=time.monotonic) -> None:
        self.codec, self.window = codec, window or StreamWindow()
        self.clock = clock
        self.frame_s = codec.frame_samples / codec.sample_rate
        self.streams: dict[str, _Stream] = {}
        self._touched: set[str] = set()  # streams pushed or closed since the last launch
        self._waking: list[tuple[float, str]] = []  # (when its lead falls to the guard, stream)
        use_side = side_stream and codec.device.type == "cuda"
        self._side = torch.cuda.Stream(device=codec.device) if use_side else None
        self.notes: list[str] = []
        if side_stream and not use_side:
            self.notes.append(f"a codec side stream needs a CUDA device; the codec is on "
                              f"{codec.device.type} and decodes between decode steps")
        self._pending: list[_Launched] = []
        self._spans: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.decode_calls = 0
        self.decoded_windows = 0
        self.host_decode_ms = 0.0  # accumulated codec time; device time once read on a GPU
        self.collected_windows = 0
        self.collect_lag_s = 0.0  # summed over collected windows: launch to audio handed out

    @property
    def busy(self) -> bool:
        """Streams still open, or decodes launched but not yet collected."""
        return bool(self.streams or self._pending)

    def open(self, stream_id: str) -> None:
        if stream_id in self.streams:
            raise CodecError(f"stream {stream_id!r} is already open")
        self.streams[stream_id] = _Stream()

    def push(self, stream_id: str, frames: torch.Tensor | list[list[int]]) -> None:
        """Append [n, 7] code frames (a tensor, or the lists a frame assembler gives) to an
        open stream."""
        width = self.codec.frame_codes
        codes = np.asarray(frames.cpu() if isinstance(frames, torch.Tensor) else frames,
                           dtype=np.int64)
        if codes.ndim != 2 or codes.shape[-1] != width:
            raise CodecError(f"push takes [n, {width}] frames; got {codes.shape}")
        self._stream(stream_id).add(codes)
        self._touched.add(stream_id)

    def close(self, stream_id: str) -> None:
        """No more frames will come: the next decode flushes what is left."""
        self._stream(stream_id).closed = True
        self._touched.add(stream_id)

    def _stream(self, stream_id: str) -> _Stream:
        if stream_id not in self.streams:
            raise CodecError(f"stream {stream_id!r} is not open")
        return self.streams[stream_id]

    def _job(self, sid: str, s: _Stream, now: float) -> _Job | None:
        w, n, done = self.window, s.n_frames, s.emitted
        flush = s.closed and (n <= w.frames or n - done <= w.frames - w.left)
        if flush:
            start = max(0, n - w.frames)
            return _Job(sid, s.chunks, start, n, done, n, True)
        if s.chunks == 0 and (w.first or w.wait):
            have = w.ready
            return _Job(sid, 0, 0, have, 0, w.first or w.hop, False) if n >= have else None
        take, right = self._take(s, self._ready(s), now), w.right
        if take is None:
            if not (self._rushable(s) and s.lead(now, self.frame_s) <= w.rush_s):
                return None
            take, right = w.hop, w.right - 1
        start, stop = max(0, done - w.left), done + take + right
        return _Job(sid, s.chunks, start, stop, done, done + take, False)

    def _ready(self, s: _Stream) -> int:
        """Frames not yet emitted that have their full right context."""
        return s.n_frames - s.emitted - self.window.right

    def _rushable(self, s: _Stream) -> bool:
        """Whether the stream, past its first chunk, holds `hop` frames with one frame of
        right context fewer than the window's, and not with all of it (`StreamWindow.rush_s`)."""
        w = self.window
        return bool(w.rush_s and s.chunks) and self._ready(s) == w.hop - 1

    def _take(self, s: _Stream, ready: int, now: float) -> int | None:
        """Frames the stream's next chunk emits, of the `ready` ones that have their right
        context; None to wait: too few, or its listener has audio in hand and a bigger chunk
        is still to come."""
        sizes = [h for h in self.window.hops if h <= ready]
        if not sizes:
            return None
        if s.chunks == 0 or sizes[-1] == self.window.hops[-1]:
            return sizes[-1] if s.chunks else sizes[0]
        return sizes[-1] if s.lead(now, self.frame_s) <= self.window.guard_s else None

    def min_buffered_s(self) -> float | None:
        """The least audio a listener holds among streams past their first chunk that still
        wait for frames (closed streams need no more decode steps); None when there is none.

        Until its second chunk a listener holds what the first chunk gave it, less the time
        the second takes to gather its frames and their right context: a dip set by the
        window, which comes on every new stream (21 LM steps after a 3-frame first chunk of
        SNAC's, under 40 ms of audio left from 10.3 ms a step). From the second chunk on, a
        listener's audio falls only while the engine makes frames slower than they play,
        which is what a caller holding admission needs to know."""
        now = self.clock()
        held = [s.play_until(now, self.frame_s) for s in self.streams.values()
                if s.chunks > 1 and not s.closed]
        return min(held, default=None)

    def due(self) -> list[_Job]:
        """One job per stream that can emit now. Only streams that changed since the last
        launch are checked (a stream's frames move only by push and close), those that
        emitted (they may hold another chunk), and those that chose to wait and whose lead
        over playback has now fallen to the guard."""
        touched, self._touched, now = self._touched, set(), self.clock()
        while self._waking and self._waking[0][0] <= now:
            touched.add(heapq.heappop(self._waking)[1])
        jobs = []
        for sid in sorted(touched):
            stream = self.streams.get(sid)
            if stream is None:
                continue
            job = self._job(sid, stream, now)
            if job is not None:
                jobs.append(job)
                if not job.final:
                    self._touched.add(sid)
            elif (lead := self._wakes_at_lead(stream)) is not None:
                wake = stream.started + stream.emitted * self.frame_s - lead
                heapq.heappush(self._waking, (wake, sid))
        return jobs

    def _wakes_at_lead(self, s: _Stream) -> float | None:
        """The lead at which a stream that emitted nothing should be looked at again, though
        no frame comes: the guard, if it holds a chunk's worth of frames it chose not to emit
        yet; the rush lead, if it holds a rushed chunk's; else None (it waits for frames)."""
        if self._ready(s) >= self.window.hop:
            return self.window.guard_s
        return self.window.rush_s if self._rushable(s) else None

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
                (job, stream.window(job.start, job.stop, self.codec.frame_codes)))
            now = self.clock()
            if stream.chunks == 0:
                stream.started = stream.seen = now
            stream.play_until(now, self.frame_s)  # on what was sent before this chunk
            stream.emitted, stream.chunks = job.last, stream.chunks + 1
            if job.final:
                del self.streams[job.stream_id]
        for length, batch in groups.items():
            jobs = [job for job, _ in batch]
            if length == 0:
                self._pending.append(_Launched(jobs, torch.zeros(len(jobs), 0), None,
                                               self.clock()))
                continue
            frames, at = torch.from_numpy(np.array([f for _, f in batch])), self.clock()
            self.decode_calls += 1
            self.decoded_windows += len(jobs)
            self._pending.append(_Launched(jobs, *self._decode(frames), at))

    def _decode(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        if self.codec.device.type != "cuda":
            start = time.perf_counter()
            audio = self.codec.decode(frames).float()
            self.host_decode_ms += (time.perf_counter() - start) * 1e3
            return audio, None
        # The side stream need not wait for the LM: frames come from the host, weights are fixed.
        stream = self._side or torch.cuda.current_stream(self.codec.device)
        with torch.cuda.stream(stream):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record(stream)
            audio = self.codec.decode(frames).float()  # on the device: the host only slices
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
        self._fold_spans()
        return self.host_decode_ms

    def _fold_spans(self) -> None:
        """Add the device time of the decodes that have finished and let their events go.
        A server decodes hundreds of windows a second and never asks for the total: kept, the
        events of every decode grew its memory, and the work of each full garbage collection,
        for as long as it ran. Decodes finish in launch order on one stream, so the finished
        ones lead the list."""
        done = 0
        for begin, end in self._spans:
            if not end.query():
                break
            self.host_decode_ms += begin.elapsed_time(end)
            done += 1
        del self._spans[:done]

    def collect(self, wait: bool = False) -> list[AudioChunk]:
        """Chunks whose decode has finished (every launched one with `wait`), each window's
        time from launch to here added to `collect_lag_s`: on a side stream nothing else
        sees a codec that falls behind, since the serving thread never waits for it."""
        self._fold_spans()
        chunks, still, handed = [], [], []
        for launched in self._pending:
            done = launched.done
            if done is not None and not wait and not done.query():
                still.append(launched)
                continue
            if done is not None:
                done.synchronize()
            chunks.extend(self._cut(launched.jobs, launched.audio.numpy()))
            handed.append(launched)
        self._pending = still
        now = self.clock()
        for launched in handed:
            self.collected_windows += len(launched.jobs)
            self.collect_lag_s += len(launched.jobs) * (now - launched.at)
        return chunks

    def _cut(self, jobs: list[_Job], audio: np.ndarray) -> list[AudioChunk]:
        """Each job's chunk as its own copy: a view would keep the whole batch's pinned
        buffer alive for as long as any listener holds its chunk, so the host allocator could
        seldom reuse one. With a hundred streams, allocating each decode's pinned buffer took
        6% of the serving thread's time in a profile; a copy frees the buffer at once. The
        copies are numpy's: a torch slice and clone per chunk cost the serving thread 5% of
        its time in a later profile of the server at 200 streams."""
        n = self.codec.frame_samples
        return [AudioChunk(j.stream_id, j.index, torch.from_numpy(
                    audio[i, (j.first - j.start) * n:(j.last - j.start) * n].copy()), j.final)
                for i, j in enumerate(jobs)]
