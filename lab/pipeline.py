"""The lab's synthesis pipeline: text -> ids -> acoustic model -> streamed audio -> timings.

A Pipeline is built once from a PipelineConfig (loading weights is the slow part) and then
serves many requests. Every request returns the audio together with what it cost, so the app,
the CLI, the notebooks and the benchmarks all read the same numbers.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from lab.config import PipelineConfig
from lab.device import resolve_device
from lab.metrics.events import events
from lab.metrics.timers import StageTimer
from lab.models.piper_backend import PiperBackend
from lab.quant.precision import weight_bytes

SENTENCE_GAP_S = 0.12
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


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def load_backend(config: PipelineConfig, device: torch.device):
    """The family's backend: it turns text into units (sentences) and units into audio."""
    if config.family == "orpheus":
        from lab.models.orpheus_backend import OrpheusBackend

        return OrpheusBackend(config, device)
    return PiperBackend.load(config, device)


def _timing(timer: StageTimer) -> tuple[dict[str, float], float]:
    """Stage totals and elapsed time, read once: on CUDA each read synchronizes."""
    return timer.results(), timer.since_start()


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
    """

    def __init__(self, config: PipelineConfig | None = None) -> None:
        self.config = config or PipelineConfig()
        self.device = resolve_device(self.config.device)
        started = time.perf_counter()
        self.backend = load_backend(self.config, self.device)
        loaded = time.perf_counter()
        self.backend.warm_up(WARMUP_TEXTS)
        self.startup = {"load_ms": (loaded - started) * 1e3,
                        "warmup_ms": (time.perf_counter() - loaded) * 1e3}
        self.fallbacks = list(self.backend.fallbacks)
        self.sample_rate = self.backend.sample_rate

    def _seeds(self, n: int) -> list[int]:
        return [self.config.seed * 1000 + 2 * i for i in range(n)]

    def _gap(self) -> np.ndarray:
        return np.zeros(round(SENTENCE_GAP_S * self.sample_rate), dtype=np.float32)

    def _join(self, pieces: list[np.ndarray]) -> np.ndarray:
        out: list[np.ndarray] = []
        for i, piece in enumerate(pieces):
            out.extend([self._gap(), piece] if i else [piece])
        return np.concatenate(out).astype(np.float32)

    def _finish(self, text: str, audio: np.ndarray, timing: tuple[dict[str, float], float],
                ttfb_ms: float, warnings: list[str]) -> Synthesis:
        stages, total_ms = timing
        audio_s = len(audio) / self.sample_rate
        tokens = self.backend.tokens
        metrics = SynthesisMetrics(
            stages=stages, ttfb_ms=ttfb_ms, total_ms=total_ms, audio_seconds=audio_s,
            rtf=total_ms / 1000 / audio_s if audio_s else float("inf"),
            audio_seconds_per_second=audio_s / (total_ms / 1000) if total_ms else 0.0,
            peak_memory_mb=_peak_memory_mb(self.device),
            tokens_per_second=None if tokens is None else tokens / (total_ms / 1000))
        events.record("synthesis", ttfb_ms=ttfb_ms, total_ms=total_ms, rtf=metrics.rtf,
                      audio_seconds=audio_s, family=self.config.family, dtype=self.config.dtype,
                      device=self.device.type)
        return Synthesis(audio, self.sample_rate, text, metrics, list(self.fallbacks), warnings)

    @property
    def model(self) -> torch.nn.Module:
        return self.backend.model

    def memory_facts(self) -> dict[str, str]:
        """What the model holds in memory, in words a user can compare across configs."""
        facts = {"weights": f"{self.weight_bytes / 2**20:.1f} MiB"}
        cache = getattr(self.backend, "kv_cache", None)
        if cache is not None:
            facts["KV cache"] = cache.describe()
        return facts

    @property
    def weight_bytes(self) -> int:
        """Bytes of the model's weights as they sit on the device now (after casts or quant)."""
        return weight_bytes(self.model)

    def stream(self, text: str) -> Generator[AudioChunk, None, Synthesis]:
        """Yield audio as it is decoded, sentence by sentence and window by window.

        The generator's return value is the whole Synthesis with its metrics, for callers
        that want the numbers once the last chunk has played.
        """
        timer = StageTimer(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        units, warnings = self._timed_prepare(text, timer)
        chunks = []
        for chunk in self._stream(timer, units):
            chunks.append(chunk)
            yield chunk
        audio = np.concatenate([c.audio for c in chunks]).astype(np.float32)
        return self._finish(text, audio, _timing(timer), chunks[0].elapsed_ms, warnings)

    def _timed_prepare(self, text: str, timer: StageTimer) -> tuple[list, list[str]]:
        with timer.stage("text_to_tokens"):
            return self.backend.prepare(text)

    def _stream(self, timer: StageTimer, units: list) -> Iterator[AudioChunk]:
        index = 0
        for i, (unit, seed) in enumerate(zip(units, self._seeds(len(units)), strict=True)):
            if i:
                yield AudioChunk(self._gap(), index, timer.since_start(), self.sample_rate)
                index += 1
            for piece in self.backend.stream(unit, seed, timer):
                if len(piece):
                    yield AudioChunk(piece, index, timer.since_start(), self.sample_rate)
                    index += 1

    def synthesize(self, text: str) -> Synthesis:
        """Whole-utterance synthesis; streams internally when the config asks for streaming."""
        if not self.config.stream:
            return self.synthesize_batch([text])[0]
        stream = self.stream(text)
        while True:
            try:
                next(stream)
            except StopIteration as done:
                return done.value

    def synthesize_batch(self, texts: list[str]) -> list[Synthesis]:
        """Several texts at once, their sentences batched by the backend.

        Every sentence keeps the noise (or sampling seed) it would get alone, so each output
        equals synthesizing that text by itself. Timings are for the whole batch.
        """
        timer = StageTimer(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        prepared = [self._timed_prepare(t, timer) for t in texts]
        units, seeds, owner = [], [], []
        for n, (text_units, _) in enumerate(prepared):
            units += text_units
            seeds += self._seeds(len(text_units))
            owner += [n] * len(text_units)
        pieces = self.backend.synthesize(units, seeds, timer)
        ttfb = timer.since_start()
        per_text: list[list[np.ndarray]] = [[] for _ in texts]
        for n, piece in zip(owner, pieces, strict=True):
            per_text[n].append(piece)
        timing = _timing(timer)
        return [self._finish(t, self._join(a), timing, ttfb, warnings)
                for t, a, (_, warnings) in zip(texts, per_text, prepared, strict=True)]
