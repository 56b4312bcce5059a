"""Sweep one knob of the pipeline and measure each setting.

A sweep answers "what does this knob cost or buy": batch size against throughput, decode
interval against time to first audio, dtype or quantisation against speed, input length
against latency (for the scaling fit in `lab.bench.complexity`). Every setting is validated
before anything runs, and a cancelled sweep keeps every point it finished.

The measures here build their own pipelines and tag them as benchmark traffic, so the app's
live view does not count a sweep's requests as a user's; given the sweep's cancel event they
stop at the next request, not only at the next point.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, fields

from tqdm import tqdm

from lab.bench.runner import BatchSynthesizer, BenchError, BenchRow, run_text_set, summarize
from lab.config import PipelineConfig
from lab.metrics.events import BENCHMARK, events

INPUT_LENGTH = "input_length"

Measure = Callable[[PipelineConfig, list[str]], object]
"""Returns a BenchRow, a dict, or a list of them, for one config and text set."""


class SweepCancelled(BenchError):
    """The sweep was cancelled while this point was being measured."""


@dataclass(frozen=True)
class SweepPoint:
    """The rows measured at one value of the axis, or the error that stopped that value."""

    axis: str
    value: object
    rows: list[dict] = field(default_factory=list)
    error: str | None = None

    def records(self) -> list[dict]:
        """Flat rows led by the axis value, ready for a report or a dataframe."""
        head = {"axis": self.axis, "value": self.value}
        if self.error is not None:
            return [{**head, "error": self.error}]
        return [{**head, **row} for row in self.rows]


@dataclass
class SweepResult:
    axis: str
    points: list[SweepPoint]
    total: int
    cancelled: bool = False

    def rows(self) -> list[dict]:
        return [rec for point in self.points for rec in point.records()]

    def series(self, column: str) -> tuple[list[object], list[float]]:
        """(axis values, column values) over the points that succeeded, for plots and fits."""
        xs, ys = [], []
        for point in self.points:
            for row in point.rows:
                if row.get(column) is not None:
                    xs.append(point.value)
                    ys.append(row[column])
        return xs, ys


def text_of_length(sentence: str, n_chars: int) -> str:
    """Repeat `sentence` to about `n_chars` characters, cut at a word boundary."""
    sentence = sentence.strip()
    if not sentence:
        raise BenchError("the base sentence for an input-length sweep is empty")
    if n_chars < 1:
        raise BenchError(f"input length {n_chars} must be >= 1 character")
    repeats = n_chars // (len(sentence) + 1) + 1
    text = " ".join([sentence] * repeats)
    if len(text) <= n_chars:
        return text
    cut = text.rfind(" ", 0, n_chars + 1)
    return text[: cut if cut > 0 else n_chars].rstrip()


def _axes() -> list[str]:
    names = [f.name for f in fields(PipelineConfig) if f.name != "sampling"]
    sampling = [f"sampling.{f.name}" for f in fields(PipelineConfig().sampling)]
    return [*names, *sampling, INPUT_LENGTH]


class Sweep:
    """Measure `measure(config, texts)` at each value of one axis.

    `axis` is a PipelineConfig field (`batch_size`, `decode_interval`, `dtype`, `quant`, ...),
    `sampling.<field>`, or `input_length`, which keeps the config and stretches each text
    to the given number of characters.
    """

    def __init__(
        self,
        axis: str,
        values: Sequence[object],
        base_config: PipelineConfig,
        texts: Sequence[str],
        measure: Measure,
    ) -> None:
        if axis not in _axes():
            raise BenchError(f"unknown sweep axis {axis!r}; choose one of {_axes()}")
        if not values:
            raise BenchError(f"no values given for sweep axis {axis!r}")
        if not texts:
            raise BenchError("the text set is empty; give at least one text")
        self.axis = axis
        self.values = list(values)
        self.base_config = base_config
        self.texts = list(texts)
        self.measure = measure
        self._plan = [self._setting(v) for v in self.values]

    def _setting(self, value: object) -> tuple[PipelineConfig, list[str]]:
        if self.axis != INPUT_LENGTH:
            return self.base_config.replace(**{self.axis: value}), self.texts
        if isinstance(value, bool) or not isinstance(value, int):
            raise BenchError(f"input length {value!r} must be an integer number of characters")
        return self.base_config, [text_of_length(t, value) for t in self.texts]

    def plan(self) -> list[tuple[object, PipelineConfig, list[str]]]:
        """Each value with the config and texts it will be measured with."""
        return [(v, cfg, texts) for v, (cfg, texts) in zip(self.values, self._plan, strict=True)]

    def points(self, cancel: threading.Event | None = None) -> Iterator[SweepPoint]:
        """Measure lazily, one point per value, stopping between points once `cancel` is set.

        A point that raises is recorded with its error and the sweep goes on, so one setting
        this machine cannot run (fp8 without a GPU, say) does not cost the others.
        """
        for value, cfg, texts in self.plan():
            if cancel is not None and cancel.is_set():
                return
            try:
                rows = _as_rows(self.measure(cfg, texts))
            except Exception as err:
                if cancel is not None and cancel.is_set():
                    return  # a point cut short by the cancel is not a result
                yield SweepPoint(self.axis, value, error=f"{type(err).__name__}: {err}")
                continue
            if self.axis == INPUT_LENGTH:
                chars = sum(len(t) for t in texts) / len(texts)
                rows = [{"n_chars": chars, **row} for row in rows]
            yield SweepPoint(self.axis, value, rows=rows)

    def run(
        self,
        progress_cb: Callable[[int, int, SweepPoint], None] | None = None,
        cancel: threading.Event | None = None,
        bar: bool = True,
    ) -> SweepResult:
        """Measure every value; `progress_cb(done, total, point)` is called after each.

        A sweep takes minutes, so by default a progress bar with an ETA counts its points.
        """
        result = SweepResult(axis=self.axis, points=[], total=len(self.values))
        with tqdm(total=result.total, desc=f"sweep {self.axis}", unit="point",
                  disable=not bar) as shown:
            for point in self.points(cancel):
                result.points.append(point)
                shown.update()
                if progress_cb is not None:
                    progress_cb(len(result.points), result.total, point)
        result.cancelled = len(result.points) < result.total
        return result


class _Guarded:
    """A pipeline that refuses new requests once `cancel` is set, so a cancelled sweep stops
    at the next request instead of finishing the point it is on."""

    def __init__(self, pipe: BatchSynthesizer, cancel: threading.Event | None) -> None:
        self._pipe, self._cancel = pipe, cancel

    def __getattr__(self, name: str) -> object:
        return getattr(self._pipe, name)

    def _check(self) -> None:
        if self._cancel is not None and self._cancel.is_set():
            raise SweepCancelled("the sweep was cancelled")

    def synthesize(self, text: str):
        self._check()
        return self._pipe.synthesize(text)

    def synthesize_batch(self, texts: list[str]) -> list:
        self._check()
        return self._pipe.synthesize_batch(texts)


def _benchmark(marks: ExitStack, pipe: BatchSynthesizer,
               cancel: threading.Event | None) -> _Guarded:
    """`pipe` tagged as benchmark traffic until `marks` closes, and guarded by `cancel`."""
    marks.enter_context(events.tagged(pipe, BENCHMARK))
    return _Guarded(pipe, cancel)


def runner_measure(
    build: Callable[[PipelineConfig], BatchSynthesizer],
    repeats: int = 1,
    warmup: int = 1,
    progress: bool = False,
    cancel: threading.Event | None = None,
) -> Measure:
    """A measure that benchmarks `build(config)` with `run_text_set` at the config's batch size."""

    def measure(cfg: PipelineConfig, texts: list[str]) -> list[BenchRow]:
        with ExitStack() as marks:
            return run_text_set(
                lambda _batch_size: _benchmark(marks, build(cfg), cancel),
                texts,
                [cfg.batch_size],
                repeats=repeats,
                warmup=warmup,
                progress=progress,
            )

    return measure


def streaming_measure(
    build: Callable[[PipelineConfig], BatchSynthesizer],
    repeats: int = 1,
    cancel: threading.Event | None = None,
) -> Measure:
    """Time to first audio needs the streamed path, one request at a time, not a batch."""

    def measure(cfg: PipelineConfig, texts: list[str]) -> BenchRow:
        with ExitStack() as marks:
            pipe = _benchmark(marks, build(cfg.replace(stream=True)), cancel)
            pipe.synthesize(texts[0])
            results = [pipe.synthesize(t) for _ in range(repeats) for t in texts]
            latencies = [r.metrics.total_ms for r in results]
            return summarize(pipe, texts, 1, repeats, sum(latencies) / 1000, latencies, results)

    return measure


def _as_rows(measured: object) -> list[dict]:
    items = measured if isinstance(measured, list) else [measured]
    rows = []
    for item in items:
        if isinstance(item, BenchRow):
            rows.append(item.to_dict())
        elif isinstance(item, dict):
            rows.append(dict(item))
        else:
            raise BenchError(
                f"measure must return a BenchRow, a dict or a list of them, "
                f"got {type(item).__name__}"
            )
    return rows
