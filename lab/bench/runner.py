"""Run a set of texts through a pipeline at several batch sizes and summarise speed.

The runner times each call itself rather than trusting per-request figures: in a batch every
request waits for the whole group, so the group's wall time is the latency a caller sees. Time
to first byte and peak memory only the pipeline can know, so those come from each result's
metrics.

A streaming config is measured streaming: at batch size 1 each text goes through
`synthesize`, which streams, so time to first byte is the first chunk and the decode interval
acts. Streaming renders one text at a time, so larger batch sizes run one-shot batches, and
both the row's label and its notes say so.

Each row is several passes over the text set, every one kept: the row reports the median pass
with the min-max over passes beside it, so two configs are compared by more than one draw of
a noisy machine. The thread count is pinned for the whole row (load, warm-up and passes) and
recorded in it.
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
from lab.metrics.events import BENCHMARK, events
from lab.metrics.repeats import Spread, pinned_threads, timed_repeats


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
    """Speed of one configuration over one text set, from `repeats` passes over it.

    `wall_s` and `audio_s` are the median pass; `rtf` is the median of each pass's wall over
    its audio (below 1 is faster than real time) and `audio_s_per_s` its inverse. Latency and
    time to first byte percentiles are over every request of every pass; `*_min`/`*_max` are
    the range over passes (of each pass's own figure: its wall, its RTF, its p50), and
    `pass_*` keep each pass's figures in order. `threads` is the intra-op thread count pinned
    for the row. `load_ms` and `warmup_ms` are the pipeline's one-time costs (warm-up includes
    any compile), reported beside the row and never inside its timings. `ms_per_step_p50` is
    the median over requests of each request's mean decode-step time (autoregressive
    families; None otherwise).
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
    threads: int | None = None
    wall_s_min: float | None = None
    wall_s_max: float | None = None
    rtf_min: float | None = None
    rtf_max: float | None = None
    latency_p50_ms_min: float | None = None
    latency_p50_ms_max: float | None = None
    ttfb_p50_ms_min: float | None = None
    ttfb_p50_ms_max: float | None = None
    pass_wall_s: tuple[float, ...] = ()
    pass_audio_s: tuple[float, ...] = ()
    pass_latency_p50_ms: tuple[float, ...] = ()
    pass_ttfb_p50_ms: tuple[float, ...] = ()

    def to_dict(self) -> dict:
        """Plain data, per-pass figures as lists, as JSON reads them back."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items()}


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


def _check(texts: Sequence[str], batch_sizes: Sequence[int], repeats: int, warmup: int,
           threads: int | None = None) -> None:
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
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise BenchError(f"threads={threads!r} must be a whole number >= 1")


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
    threads: int | None = None,
) -> list[BenchRow]:
    """One row per batch size; `make_pipeline(batch_size)` builds the pipeline to measure.

    Warmup passes run the first group only: enough to load kernels and trigger compilation
    without doubling the benchmark's cost. Each row runs on `threads` intra-op threads
    (default: PyTorch's current count, made explicit and recorded).
    """
    texts = list(texts)
    _check(texts, batch_sizes, repeats, warmup, threads)
    rows = []
    for batch_size in batch_sizes:
        rows.append(_pinned_row(make_pipeline, texts, batch_size, repeats, warmup, progress,
                                threads))
        events.record("bench", **rows[-1].to_dict())
    return rows


def _pinned_row(make_pipeline, texts, batch_size, repeats, warmup, progress,
                threads) -> BenchRow:
    """Build and measure one batch size on a pinned thread count (each request runs on its
    caller's count), its requests tagged as benchmark traffic so Live does not count them as
    users'."""
    with pinned_threads(threads) as count:
        pipe = make_pipeline(batch_size)
        try:
            with events.tagged(pipe, BENCHMARK):
                return _measure(pipe, texts, batch_size, repeats, warmup, progress, count)
        finally:
            del pipe
            _release_memory()


def _measure(
    pipe: BatchSynthesizer,
    texts: list[str],
    batch_size: int,
    repeats: int,
    warmup: int,
    progress: bool,
    threads: int | None = None,
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

        def one_pass() -> tuple[list[float], list]:
            latencies, results = [], []
            for group in groups:
                start = time.perf_counter()
                out = run(group)
                elapsed = time.perf_counter() - start
                if len(out) != len(group):
                    raise BenchError(f"pipeline returned {len(out)} results for {len(group)} texts")
                latencies += [elapsed * 1e3] * len(group)
                results += out
                bar.update()
            return latencies, results

        walls, passes = timed_repeats(one_pass, repeats=repeats, warmup=0)
    latencies = [ms for lat, _ in passes for ms in lat]
    results = [r for _, res in passes for r in res]
    pass_walls = [ms / 1e3 for ms in walls.values]
    return summarize(pipe, texts, batch_size, repeats, sum(pass_walls), latencies, results,
                     pass_walls=pass_walls, threads=threads)


def _ran_as(cfg: PipelineConfig, batch_size: int) -> tuple[PipelineConfig, list[str]]:
    """The config a row really ran (one-shot when a streaming config is batched) and why."""
    if cfg.stream and not streams_at(cfg, batch_size):
        note = f"streaming renders one text at a time; batch {batch_size} ran one-shot"
        return dataclasses.replace(cfg, stream=False), [note]
    return cfg, []


def _split(items: list, parts: int) -> list[list]:
    """`items` in `parts` equal consecutive runs (one per pass), or one run if they do not
    divide evenly."""
    size, extra = divmod(len(items), parts)
    if extra or not size:
        return [items]
    return [items[i * size : (i + 1) * size] for i in range(parts)]


def summarize(pipe, texts, batch_size, repeats, wall, latencies, results, *,
              pass_walls: Sequence[float] | None = None, threads: int | None = None
              ) -> BenchRow:
    """One row from timed requests, in pass order: `wall` seconds over all repeats,
    per-request latencies, and each pass's wall seconds in `pass_walls`. Without
    `pass_walls`, `wall` is shared among passes by their latency sums, which is exact when
    every request is its own group (a streamed measure). `threads` defaults to the count in
    force now."""
    ran, notes = _ran_as(pipe.resolved, batch_size)
    chunks = _split(list(results), repeats)
    lat_chunks = _split(list(latencies), len(chunks))
    if pass_walls is None or len(pass_walls) != len(chunks):
        total = sum(latencies) or 1.0
        pass_walls = [wall * sum(lat) / total for lat in lat_chunks]
    pass_audio = [sum(r.metrics.audio_seconds for r in chunk) for chunk in chunks]
    pass_rtf = [w / a if a > 0 else float("inf") for w, a in zip(pass_walls, pass_audio,
                                                                  strict=True)]
    pass_lat = [_pct(lat, 50) for lat in lat_chunks]
    pass_ttfb = [_pct([r.metrics.ttfb_ms for r in chunk if r.metrics.ttfb_ms is not None], 50)
                 for chunk in chunks]
    pass_ttfb = pass_ttfb if None not in pass_ttfb else []
    ttfbs = [r.metrics.ttfb_ms for r in results if r.metrics.ttfb_ms is not None]
    steps = [r.metrics.ms_per_step for r in results if r.metrics.step_ms]
    peaks = [r.metrics.peak_memory_mb for r in results if r.metrics.peak_memory_mb is not None]
    if torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0:
        peaks.append(torch.cuda.max_memory_allocated() / 2**20)
    threads = torch.get_num_threads() if threads is None else threads
    ran_on = {getattr(r.metrics, "threads", None) for r in results} - {None}
    if ran_on - {threads}:
        notes.append(f"pinned {threads} threads but requests ran on {sorted(ran_on)} (a "
                     "pipeline whose worker started before the pin keeps its own count)")
    notes = dict.fromkeys([*notes, *(n for r in results for n in getattr(r, "fallbacks", []))])
    wall_s, rtf = Spread.of(pass_walls), Spread.of(pass_rtf)
    lat50 = Spread.of(pass_lat) if pass_lat and None not in pass_lat else None
    ttfb50 = Spread.of(pass_ttfb) if pass_ttfb else None
    return BenchRow(
        config=config_label(ran),
        batch_size=batch_size,
        n_texts=len(texts),
        repeats=repeats,
        wall_s=wall_s.median,
        audio_s=float(np.median(pass_audio)),
        rtf=rtf.median,
        audio_s_per_s=1 / rtf.median if rtf.median > 0 else float("inf"),
        latency_p50_ms=_pct(latencies, 50),
        latency_p95_ms=_pct(latencies, 95),
        ttfb_p50_ms=_pct(ttfbs, 50),
        ttfb_p95_ms=_pct(ttfbs, 95),
        peak_memory_mb=max(peaks) if peaks else None,
        fallbacks="; ".join(notes),
        load_ms=pipe.startup.get("load_ms"),
        warmup_ms=pipe.startup.get("warmup_ms"),
        ms_per_step_p50=_pct(steps, 50),
        threads=threads,
        wall_s_min=wall_s.low,
        wall_s_max=wall_s.high,
        rtf_min=rtf.low,
        rtf_max=rtf.high,
        latency_p50_ms_min=lat50 and lat50.low,
        latency_p50_ms_max=lat50 and lat50.high,
        ttfb_p50_ms_min=ttfb50 and ttfb50.low,
        ttfb_p50_ms_max=ttfb50 and ttfb50.high,
        pass_wall_s=tuple(pass_walls),
        pass_audio_s=tuple(pass_audio),
        pass_latency_p50_ms=tuple(pass_lat) if lat50 else (),
        pass_ttfb_p50_ms=tuple(pass_ttfb),
    )


def _release_memory() -> None:
    """Free the last pipeline before the next is built, so peaks are not inherited."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
