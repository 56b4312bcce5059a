"""Run a set of texts through a pipeline at several batch sizes and summarise speed.

The runner times each call itself rather than trusting per-request figures: in a batch every
request waits for the whole group, so the group's wall time is the latency a caller sees. Time
to first byte and peak memory only the pipeline can know, so those come from each result's
metrics.

A streaming config is measured streaming: at batch size 1 each text goes through
`synthesize`, which streams, so time to first byte is the first chunk and the decode interval
acts. Streaming renders one text at a time, so larger batch sizes run one-shot batches, and
both the row's label and its notes say so.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from lab.config import PipelineConfig, to_dict
from lab.metrics.events import events


class BenchError(ValueError):
    """A benchmark was asked for with inputs it cannot run."""


class BatchSynthesizer(Protocol):
    """The slice of the pipeline a benchmark needs."""

    config: PipelineConfig
    resolved: PipelineConfig
    """The config as it really ran, after fallbacks: what a row's label shows."""
    startup: dict[str, float]

    def synthesize(self, text: str): ...

    def synthesize_batch(self, texts: list[str]) -> list: ...


@dataclass(frozen=True)
class BenchRow:
    """Speed of one configuration over one text set.

    `wall_s` and `audio_s` are per pass over the set (averaged over repeats); `rtf` is wall
    over audio, so below 1 is faster than real time; latencies are per request. `load_ms` and
    `warmup_ms` are the pipeline's one-time costs (warm-up includes any compile), reported
    beside the row and never inside its timings. `ms_per_step_p50` is the median over requests
    of each request's mean decode-step time (autoregressive families; None otherwise).
    """

    config: str
    batch_size: int
    n_texts: int
    repeats: int
    wall_s: float
    audio_s: float
    rtf: float
    audio_s_per_s: float
    latency_p50_ms: float
    latency_p95_ms: float
    ttfb_p50_ms: float | None
    ttfb_p95_ms: float | None
    peak_memory_mb: float | None
    fallbacks: str = ""
    load_ms: float | None = None
    warmup_ms: float | None = None
    ms_per_step_p50: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


STREAM_KNOBS = ("decode_interval", "overlap", "crossfade_ms")
ALWAYS_SHOWN = ("family", "model", "dtype", "device", "stream", "batch_size")


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def config_label(cfg: PipelineConfig) -> str:
    """A short name for a config: family, model, dtype, device and how audio was produced
    ("stream/24" or "one-shot"), then every other knob that differs from its default, so an
    override such as `--set overlap=4` shows in the row it produced. Batch size has its own
    column; the streaming window is shown only when streaming, where it acts."""
    parts = [f"{cfg.family}:{cfg.model}", cfg.dtype, cfg.device,
             f"stream/{cfg.decode_interval}" if cfg.stream else "one-shot"]
    hidden = set(ALWAYS_SHOWN) | {"decode_interval"} | (set() if cfg.stream else set(STREAM_KNOBS))
    default = _flat(to_dict(PipelineConfig()))
    for key, value in _flat(to_dict(cfg)).items():
        if key not in hidden and value != default[key]:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def streams_at(cfg: PipelineConfig, batch_size: int) -> bool:
    """Whether a row at `batch_size` is measured streaming (only one text at a time can be)."""
    return cfg.stream and batch_size == 1


def _check(texts: Sequence[str], batch_sizes: Sequence[int], repeats: int, warmup: int) -> None:
    if not texts:
        raise BenchError("the text set is empty; give at least one text")
    if not batch_sizes:
        raise BenchError("no batch sizes given")
    bad = [b for b in batch_sizes if isinstance(b, bool) or not isinstance(b, int) or b < 1]
    if bad:
        raise BenchError(f"batch sizes must be integers >= 1, got {bad}")
    if repeats < 1:
        raise BenchError(f"repeats={repeats} must be >= 1")
    if warmup < 0:
        raise BenchError(f"warmup={warmup} must be >= 0")


def _groups(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def run_text_set(
    make_pipeline: Callable[[int], BatchSynthesizer],
    texts: Sequence[str],
    batch_sizes: Sequence[int],
    repeats: int = 1,
    warmup: int = 1,
    progress: bool = True,
) -> list[BenchRow]:
    """One row per batch size; `make_pipeline(batch_size)` builds the pipeline to measure.

    Warmup passes run the first group only: enough to load kernels and trigger compilation
    without doubling the benchmark's cost.
    """
    texts = list(texts)
    _check(texts, batch_sizes, repeats, warmup)
    rows = []
    for batch_size in batch_sizes:
        pipe = make_pipeline(batch_size)
        try:
            rows.append(_measure(pipe, texts, batch_size, repeats, warmup, progress))
        finally:
            del pipe
            _release_memory()
        events.record("bench", **rows[-1].to_dict())
    return rows


def _measure(
    pipe: BatchSynthesizer,
    texts: list[str],
    batch_size: int,
    repeats: int,
    warmup: int,
    progress: bool,
) -> BenchRow:
    groups = _groups(texts, batch_size)
    bar = tqdm(
        total=warmup + repeats * len(groups),
        desc=f"batch {batch_size}",
        unit="batch",
        disable=not progress,
    )
    streaming = streams_at(pipe.config, batch_size)
    run = (lambda group: [pipe.synthesize(t) for t in group]) if streaming else \
        pipe.synthesize_batch
    with bar:
        for _ in range(warmup):
            run(groups[0])
            bar.update()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        wall = 0.0
        latencies, results = [], []
        for _ in range(repeats):
            for group in groups:
                start = time.perf_counter()
                out = run(group)
                elapsed = time.perf_counter() - start
                if len(out) != len(group):
                    raise BenchError(f"pipeline returned {len(out)} results for {len(group)} texts")
                wall += elapsed
                latencies += [elapsed * 1e3] * len(group)
                results += out
                bar.update()
    return summarize(pipe, texts, batch_size, repeats, wall, latencies, results)


def _ran_as(cfg: PipelineConfig, batch_size: int) -> tuple[PipelineConfig, list[str]]:
    """The config a row really ran (one-shot when a streaming config is batched) and why."""
    if cfg.stream and not streams_at(cfg, batch_size):
        note = f"streaming renders one text at a time; batch {batch_size} ran one-shot"
        return dataclasses.replace(cfg, stream=False), [note]
    return cfg, []


def summarize(pipe, texts, batch_size, repeats, wall, latencies, results) -> BenchRow:
    """One row from timed requests: `wall` seconds over all repeats, per-request latencies."""
    ran, notes = _ran_as(pipe.resolved, batch_size)
    audio = sum(r.metrics.audio_seconds for r in results)
    ttfbs = [r.metrics.ttfb_ms for r in results if r.metrics.ttfb_ms is not None]
    steps = [r.metrics.ms_per_step for r in results if r.metrics.step_ms]
    peaks = [r.metrics.peak_memory_mb for r in results if r.metrics.peak_memory_mb is not None]
    if torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0:
        peaks.append(torch.cuda.max_memory_allocated() / 2**20)
    notes = dict.fromkeys([*notes, *(n for r in results for n in getattr(r, "fallbacks", []))])
    return BenchRow(
        config=config_label(ran),
        batch_size=batch_size,
        n_texts=len(texts),
        repeats=repeats,
        wall_s=wall / repeats,
        audio_s=audio / repeats,
        rtf=wall / audio if audio > 0 else float("inf"),
        audio_s_per_s=audio / wall if wall > 0 else float("inf"),
        latency_p50_ms=_pct(latencies, 50),
        latency_p95_ms=_pct(latencies, 95),
        ttfb_p50_ms=_pct(ttfbs, 50),
        ttfb_p95_ms=_pct(ttfbs, 95),
        peak_memory_mb=max(peaks) if peaks else None,
        fallbacks="; ".join(notes),
        load_ms=pipe.startup.get("load_ms"),
        warmup_ms=pipe.startup.get("warmup_ms"),
        ms_per_step_p50=_pct(steps, 50),
    )


def _release_memory() -> None:
    """Free the last pipeline before the next is built, so peaks are not inherited."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
