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

from lab.config import ConfigError, PipelineConfig
from lab.frontend import prepare
from lab.metrics.events import events
from lab.metrics.timers import StageTimer
from lab.models.piper_backend import PiperBackend
from lab.models.piper_voice import load_voice
from lab.models.precision import prepare_model
from lab.quant.precision import weight_bytes

SENTENCE_GAP_S = 0.12


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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' but no CUDA GPU is visible here; use 'auto' or 'cpu'")
    return torch.device(name)


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


class Pipeline:
    def __init__(self, config: PipelineConfig | None = None) -> None:
        self.config = config or PipelineConfig()
        self.device = resolve_device(self.config.device)
        if self.config.family != "piper-vits":
            raise ConfigError(
                f"family {self.config.family!r} is served by lab.engine (see OrpheusPipeline); "
                "Pipeline runs 'piper-vits'")
        voice = load_voice(self.config.model)
        self.settings = voice.settings
        self.fallbacks = prepare_model(voice.model, self.config, self.device)
        self.backend = PiperBackend(voice, self.config, self.device)
        self.sample_rate = self.backend.sample_rate

    def _prepare(self, text: str):
        return prepare(text, self.settings.phoneme_id_map, self.settings.espeak_voice,
                       self.config.max_chars)

    def _seeds(self, n: int) -> list[int]:
        return [self.config.seed * 1000 + 2 * i for i in range(n)]

    def _gap(self) -> np.ndarray:
        return np.zeros(round(SENTENCE_GAP_S * self.sample_rate), dtype=np.float32)

    def _join(self, pieces: list[np.ndarray]) -> np.ndarray:
        out: list[np.ndarray] = []
        for i, piece in enumerate(pieces):
            out.extend([self._gap(), piece] if i else [piece])
        return np.concatenate(out).astype(np.float32)

    def _finish(self, text: str, audio: np.ndarray, timer: StageTimer, ttfb_ms: float,
                warnings: list[str]) -> Synthesis:
        total_ms = timer.since_start()
        audio_s = len(audio) / self.sample_rate
        metrics = SynthesisMetrics(
            stages=timer.results(), ttfb_ms=ttfb_ms, total_ms=total_ms, audio_seconds=audio_s,
            rtf=total_ms / 1000 / audio_s if audio_s else float("inf"),
            audio_seconds_per_second=audio_s / (total_ms / 1000) if total_ms else 0.0,
            peak_memory_mb=_peak_memory_mb(self.device))
        events.record("synthesis", ttfb_ms=ttfb_ms, total_ms=total_ms, rtf=metrics.rtf,
                      audio_seconds=audio_s, family=self.config.family, dtype=self.config.dtype,
                      device=self.device.type)
        return Synthesis(audio, self.sample_rate, text, metrics, list(self.fallbacks), warnings)

    @property
    def model(self) -> torch.nn.Module:
        return self.backend.model

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
        prepared = self._timed_prepare(text, timer)
        chunks = []
        for chunk in self._stream(text, timer, prepared):
            chunks.append(chunk)
            yield chunk
        audio = np.concatenate([c.audio for c in chunks]).astype(np.float32)
        return self._finish(text, audio, timer, chunks[0].elapsed_ms, prepared.warnings)

    def _timed_prepare(self, text: str, timer: StageTimer):
        with timer.stage("text_to_tokens"):
            return self._prepare(text)

    def _stream(self, text: str, timer: StageTimer, prepared) -> Iterator[AudioChunk]:
        index = 0
        seeds = self._seeds(len(prepared.sentences))
        for i, (sentence, seed) in enumerate(zip(prepared.sentences, seeds, strict=True)):
            if i:
                yield AudioChunk(self._gap(), index, timer.since_start(), self.sample_rate)
                index += 1
            for piece in self.backend.stream(sentence.ids, seed, timer):
                if len(piece):
                    yield AudioChunk(piece, index, timer.since_start(), self.sample_rate)
                    index += 1

    def synthesize(self, text: str) -> Synthesis:
        """Whole-utterance synthesis; streams internally when the config asks for streaming."""
        timer = StageTimer(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        prepared = self._timed_prepare(text, timer)
        if self.config.stream:
            chunks = list(self._stream(text, timer, prepared))
            audio = np.concatenate([c.audio for c in chunks]).astype(np.float32)
            ttfb = chunks[0].elapsed_ms
        else:
            pieces = self._batched([s.ids for s in prepared.sentences], timer)
            audio = self._join(pieces)
            ttfb = timer.since_start()
        return self._finish(text, audio, timer, ttfb, prepared.warnings)

    def _batched(self, ids: list[list[int]], timer: StageTimer,
                 seeds: list[int] | None = None) -> list[np.ndarray]:
        seeds = self._seeds(len(ids)) if seeds is None else seeds
        size = self.config.batch_size
        out: list[np.ndarray] = []
        for start in range(0, len(ids), size):
            out += self.backend.synthesize(ids[start : start + size], seeds[start : start + size],
                                           timer)
        return out

    def synthesize_batch(self, texts: list[str]) -> list[Synthesis]:
        """Several texts at once, padded into batches of `batch_size` sentences.

        Every sentence keeps the noise it would get alone, so each output equals synthesizing
        that text by itself. Timings are for the whole batch, shared by its members.
        """
        timer = StageTimer(self.device)
        started = time.perf_counter()
        prepared = [self._timed_prepare(t, timer) for t in texts]
        ids, seeds, owner = [], [], []
        for n, p in enumerate(prepared):
            ids += [s.ids for s in p.sentences]
            seeds += self._seeds(len(p.sentences))
            owner += [n] * len(p.sentences)
        pieces = self._batched(ids, timer, seeds)
        ttfb = (time.perf_counter() - started) * 1000
        per_text: list[list[np.ndarray]] = [[] for _ in texts]
        for n, piece in zip(owner, pieces, strict=True):
            per_text[n].append(piece)
        return [self._finish(t, self._join(a), timer, ttfb, p.warnings)
                for t, a, p in zip(texts, per_text, prepared, strict=True)]
