"""Per-stage timing that is right on both CPU and CUDA.

On CUDA, host clocks only measure how long it took to *enqueue* work. Each stage therefore
records a pair of CUDA events and the timer synchronizes once, when results are read, so timing
never adds a sync inside the pipeline. Every stage is also a `record_function` range, so the same
names appear in a torch.profiler trace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class StageTimer:
    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.cuda = torch.device(device).type == "cuda"
        self._events: list[tuple[str, object, object]] = []
        self._origin = self._mark()
        self._marks: dict[str, object] = {}

    def _mark(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _elapsed_ms(self, start: object, end: object) -> float:
        if self.cuda:
            return float(start.elapsed_time(end))
        return (end - start) * 1000.0

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a block; repeated names (e.g. one per streamed chunk) add up."""
        with torch.profiler.record_function(name):
            start = self._mark()
            yield
            self._events.append((name, start, self._mark()))

    def mark(self, name: str) -> None:
        """Remember a point in time, such as the moment the first audio is ready."""
        self._marks[name] = self._mark()

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def results(self) -> dict[str, float]:
        """Milliseconds per stage name, summed over repeats."""
        self._sync()
        totals: dict[str, float] = {}
        for name, start, end in self._events:
            totals[name] = totals.get(name, 0.0) + self._elapsed_ms(start, end)
        return totals

    def since_start(self, mark: str | None = None) -> float:
        """Milliseconds from the timer's creation to a named mark, or to now."""
        end = self._marks[mark] if mark is not None else self._mark()
        self._sync()
        return self._elapsed_ms(self._origin, end)
