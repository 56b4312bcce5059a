"""The lab's synthesis pipeline: text -> ids -> acoustic model -> streamed audio -> timings.

A Pipeline is built once from a PipelineConfig (loading weights is the slow part) and then
serves many requests, from any number of threads: one worker thread owns the loaded model
(`lab.worker`), and each request carries its own meter. Every request returns the audio
together with what it cost, so the app, the CLI, the notebooks and the benchmarks all read the
same numbers.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lab.config import PipelineConfig
from lab.device import resolve_device
from lab.malloc import keep_freed_memory, release_kept_memory
from lab.metrics import memory
from lab.metrics.events import events
from lab.metrics.timers import RequestMeter, StageTimer
from lab.models.backend import EngineQueue
from lab.models.registry import family, load_backend
from lab.quant.precision import weight_bytes
from lab.stages import heard
from lab.turns import Shared
from lab.worker import LINGER_S, Sink, Worker, WorkerLoad

SENTENCE_GAP_S = 0.12
NO_AUDIO = ("the model produced no audio for this text (an autoregressive model can end its "
            "speech at once, as random weights often do)")
# A very short and a long sentence: a compiled model with dynamic shapes settles its guards
# only after it has seen lengths at both ends, so one warm-up text would leave a recompile for
# the first real request.
WARMUP_TEXTS = ("Hi.", "This longer sentence warms the model up for the lengths that real "
                "requests bring, so that nothing is compiled while a listener waits.")


@dataclass
class SynthesisMetrics:
    stages: dict[str, float]
    ttfb_ms: float
    total_ms: float
    audio_seconds: float
    rtf: float
    audio_seconds_per_second: float
    peak_memory_mb: float
    tokens_per_second: float | None = None
    step_ms: list[float] = field(default_factory=list)
    """Each decode step this request took part in, in order (autoregressive families)."""

    @property
    def ms_per_step(self) -> float | None:
        return sum(self.step_ms) / len(self.step_ms) if self.step_ms else None

    @property
    def step_quarters(self) -> tuple[float, float] | None:
        """Median step time over the first and the last quarter of the utterance: without a
        KV cache the second is larger, since every step recomputes a longer prefix. Medians,
        so a step stalled by another thread does not decide the comparison."""
        if not self.step_ms:
            return None
        n = max(1, len(self.step_ms) // 4)
        return statistics.median(self.step_ms[:n]), statistics.median(self.step_ms[-n:])


@dataclass
class Synthesis:
    audio: np.ndarray
    sample_rate: int
    text: str
    metrics: SynthesisMetrics
    fallbacks: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class AudioChunk:
    audio: np.ndarray
    index: int
    elapsed_ms: float
    sample_rate: int
    admission_ms: float | None = None
    """Of `elapsed_ms`, the request's wait for its engine to let it in
    (`RequestMeter.admission_ms`), once known; None for a family without an engine queue."""


def drain(stream: Generator[AudioChunk, None, Synthesis]) -> tuple[list[AudioChunk], Synthesis]:
    """Every chunk of a `Pipeline.stream`, and the Synthesis it returns at the end."""
    chunks = []
    while True:
        try:
            chunks.append(next(stream))
        except StopIteration as done:
            return chunks, done.value


def _timing(timer: StageTimer, mark: str | None = None) -> tuple[dict[str, float], float]:
    """Stage totals and the time to `mark` (or to now), read once: on CUDA a read waits for
    the device unless the timer has `settled`."""
    return timer.results(), timer.since_start(mark)


DONE = "done"
"""The mark a stream sets once its last chunk is out: its total time runs to there."""


def _settle(timer: StageTimer) -> Iterator[None]:
    """Mark the end of a stream, then pass the worker's turn until its timings can be read
    without waiting: its last span is usually the decode step still in flight, and waiting
    for it would stall every other stream on the worker for up to a step."""
    timer.mark(DONE)
    while not timer.settled():
        yield None


def describe_startup(startup: dict[str, float]) -> str:
    """The one-time costs of a pipeline in words, so nobody mistakes them for request time."""
    load_s, warmup_s = startup["load_ms"] / 1000, startup["warmup_ms"] / 1000
    return (f"model load {load_s:.2f} s, warm-up {warmup_s:.2f} s (includes any compile or "
            "graph capture; not counted in request timings)")


class Pipeline:
    """Built once per config (loading and warming up are the slow part), then serves requests.

    Construction loads the model and warms it up on `WARMUP_TEXTS`, so compile, graph capture
    and first-call kernel set-up are paid here and reported in `startup` (milliseconds), never
    inside the first request's timings; callers need no warm-up request of their own.
    A knob the family cannot honour is refused here, with the family's reason.
    """

    def __init__(self, config: PipelineConfig | None = None,
                 on_stage: Callable[[str], None] | None = None,
                 linger_s: float | None = LINGER_S) -> None:
        """`on_stage(message)` hears each startup stage as it begins, for a progress line.
        `linger_s` is how long the worker thread waits idle before it exits
        (`lab.worker.Worker`; None: it stays, for a process that runs nothing else)."""
        self.config = config or PipelineConfig()
        self.device = resolve_device(self.config.device)
        say = on_stage or (lambda _msg: None)
        if self.device.type == "cpu":
            keep_freed_memory()
            release_kept_memory()
        family(self.config.family).check(self.config)  # refused before anything is said
        self._worker = Worker(f"pipeline-{self.config.family}", self._run_batch, linger_s)
        say(f"loading {self.config.family} weights ({self.config.model}) onto {self.device}")
        started = time.perf_counter()
        self.backend = self._worker.call(
            heard(say, lambda: load_backend(self.config, self.device)))
        loaded = time.perf_counter()
        say("warming up (compile, graph capture, first-call kernels)")
        self._worker.call(heard(say, lambda: self.backend.warm_up(WARMUP_TEXTS)))
        self.startup = {"load_ms": (loaded - started) * 1e3,
                        "warmup_ms": (time.perf_counter() - loaded) * 1e3}
        self.sample_rate = self.backend.sample_rate
        self.family = self.backend.family

    @property
    def resolved(self) -> PipelineConfig:
        """The config as it really runs, after fallbacks (fp16 on a CPU is bf16, a quant mode
        that could not run is its fallback, a failed capture is eager): what labels show."""
        return self.config.replace(**self.backend.applied())

    @property
    def fallbacks(self) -> list[str]:
        """Every fallback fired so far, read live from each component of the backend."""
        return self.backend.fallbacks()

    def worker_load(self) -> WorkerLoad:
        """How busy the serving thread has been so far (`lab.worker.WorkerLoad`)."""
        return self._worker.load()

    def engine_queue(self) -> EngineQueue | None:
        """The family's engine admission, read live (`Backend.engine_queue`)."""
        return self.backend.engine_queue()

    def close(self) -> None:
        """Wait until the worker has finished the requests it holds (its thread then exits)."""
        self._worker.close()

    def _meter(self) -> RequestMeter:
        memory.reset_peak(self.device)
        return RequestMeter(StageTimer(self.device))

    def _seeds(self, n: int) -> list[int]:
        return [self.config.seed * 1000 + 2 * i for i in range(n)]

    def _gap(self) -> np.ndarray:
        return np.zeros(round(SENTENCE_GAP_S * self.sample_rate), dtype=np.float32)

    def _join(self, pieces: list[np.ndarray]) -> np.ndarray:
        out: list[np.ndarray] = []
        for i, piece in enumerate(pieces):
            out.extend([self._gap(), piece] if i else [piece])
        return np.concatenate(out).astype(np.float32)

    def _finish(self, text: str, audio: np.ndarray, meter: RequestMeter,
                timing: tuple[dict[str, float], float], ttfb_ms: float,
                warnings: list[str]) -> Synthesis:
        stages, total_ms = timing
        audio_s = len(audio) / self.sample_rate
        tokens = meter.tokens if self.family.autoregressive else None
        metrics = SynthesisMetrics(
            stages=stages, ttfb_ms=ttfb_ms, total_ms=total_ms, audio_seconds=audio_s,
            rtf=total_ms / 1000 / audio_s if audio_s else float("inf"),
            audio_seconds_per_second=audio_s / (total_ms / 1000) if total_ms else 0.0,
            peak_memory_mb=memory.peak_mb(self.device),
            tokens_per_second=None if tokens is None else tokens / (total_ms / 1000),
            step_ms=meter.step_ms)
        events.record("synthesis", source=events.source_of(self), ttfb_ms=ttfb_ms,
                      total_ms=total_ms, rtf=metrics.rtf,
                      audio_seconds=audio_s, family=self.config.family, dtype=self.config.dtype,
                      device=self.device.type)
        return Synthesis(audio, self.sample_rate, text, metrics, self.fallbacks, warnings)

    @property
    def model(self) -> torch.nn.Module:
        return self.backend.model

    def memory_facts(self) -> dict[str, str]:
        """What the model holds in memory, in words a user can compare across configs."""
        return {"weights": f"{self.weight_bytes / 2**20:.1f} MiB", **self.backend.memory_facts()}

    @property
    def weight_bytes(self) -> int:
        """Bytes of the model's weights as they sit on the device now (after casts or quant)."""
        return weight_bytes(self.model)

    def stream(self, text: str, cancel: threading.Event | None = None
               ) -> Generator[AudioChunk, None, Synthesis]:
        """Yield audio as it is decoded, sentence by sentence and window by window.

        The generator's return value is the whole Synthesis with its metrics, for callers
        that want the numbers once the last chunk has played. Its clock starts at the first
        `next()`, so time spent queued behind other requests counts. Closing it early
        cancels the request; so does setting `cancel` from any thread, after which the
        generator raises `lab.worker.Cancelled`.
        """
        meter = self._meter()
        return (yield from self._worker.stream(lambda: self._streamed(text, meter), cancel))

    async def astream(self, text: str, cancel: threading.Event | None = None
                      ) -> AsyncIterator[AudioChunk | Synthesis]:
        """`stream` for a caller on an event loop (the server): each chunk as it is decoded,
        then the whole Synthesis as the last item. No thread waits on the worker for it."""
        meter = self._meter()
        async for item in self._worker.astream(lambda: self._streamed(text, meter), cancel):
            yield item

    def submit(self, text: str, cancel: threading.Event, sink: Sink, key: Any) -> None:
        """`astream` for a reader elsewhere (a server in another process): each chunk, then
        the Synthesis in an `End`, reach `sink` under `key` at the end of the worker's round
        (`lab.worker.Worker.submit`)."""
        meter = self._meter()
        self._worker.submit(lambda: self._streamed(text, meter), cancel, sink, key)

    def _streamed(self, text: str, meter: RequestMeter) -> Generator[AudioChunk, None, Synthesis]:
        """The stream itself, run on the worker thread."""
        timer = meter.timer
        units, warnings = self._timed_prepare(text, timer)
        chunks = []
        for chunk in self._stream(meter, units):
            if isinstance(chunk, AudioChunk):
                chunks.append(chunk)
            yield chunk
        yield from _settle(timer)
        if not chunks:
            warnings.append(NO_AUDIO)
        audio = np.concatenate([c.audio for c in chunks] or [np.zeros(0, np.float32)])
        ttfb = chunks[0].elapsed_ms if chunks else timer.since_start(DONE)
        return self._finish(text, audio.astype(np.float32), meter, _timing(timer, DONE), ttfb,
                            warnings)

    def _timed_prepare(self, text: str, timer: StageTimer) -> tuple[list, list[str]]:
        with timer.stage("text_to_tokens"):
            return self.backend.prepare(text)

    def _stream(self, meter: RequestMeter, units: list) -> Iterator[AudioChunk | Shared]:
        timer, index = meter.timer, 0
        for i, (unit, seed) in enumerate(zip(units, self._seeds(len(units)), strict=True)):
            if i:
                yield AudioChunk(self._gap(), index, timer.host_ms(), self.sample_rate)
                index += 1
            pieces = self.backend.stream(unit, seed, meter)
            try:
                for piece in pieces:
                    if isinstance(piece, Shared):
                        yield piece  # the worker steps the shared engine, then returns
                    elif len(piece):
                        yield AudioChunk(piece, index, timer.host_ms(), self.sample_rate,
                                         meter.admission_ms)
                        index += 1
            finally:
                pieces.close()

    def synthesize(self, text: str) -> Synthesis:
        """Whole-utterance synthesis; streams internally when the config asks for streaming."""
        if not self.config.stream:
            return self.synthesize_batch([text])[0]
        return drain(self.stream(text))[1]

    def synthesize_batch(self, texts: list[str]) -> list[Synthesis]:
        """Several texts at once, their sentences batched by the backend.

        Every sentence keeps the noise (or sampling seed) it would get alone, so each output
        equals synthesizing that text by itself. Timings are for the whole batch, which may
        include other callers' texts waiting at the same moment (the worker merges them).
        """
        return self._worker.batch(texts, self._meter())

    def _run_batch(self, texts: list[str], meter: RequestMeter) -> list[Synthesis]:
        """One merged batch, run on the worker thread."""
        timer = meter.timer
        prepared = [self._timed_prepare(t, timer) for t in texts]
        units, seeds, owner = [], [], []
        for n, (text_units, _) in enumerate(prepared):
            units += text_units
            seeds += self._seeds(len(text_units))
            owner += [n] * len(text_units)
        pieces = self.backend.synthesize(units, seeds, meter)
        ttfb = timer.since_start()
        per_text: list[list[np.ndarray]] = [[] for _ in texts]
        for n, piece in zip(owner, pieces, strict=True):
            per_text[n].append(piece)
        timing = _timing(timer)
        return [self._finish(t, self._join(a), meter, timing, ttfb, warnings)
                for t, a, (_, warnings) in zip(texts, per_text, prepared, strict=True)]
