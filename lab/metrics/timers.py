"""Per-stage timing that is right on both CPU and CUDA.

On CUDA, host clocks only measure how long it took to *enqueue* work. Each stage therefore
records a pair of CUDA events and the timer synchronizes once, when results are read, so timing
never adds a sync inside the pipeline. Every stage is also a `record_function` range, so the same
names appear in a torch.profiler trace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch


class StageTimer:
    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.cuda = torch.device(device).type == "cuda"
        self._events: list[tuple[str, object, object]] = []
        self._host_origin = time.perf_counter()
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

    def stage(self, name: str):
        """Time a block; repeated names (e.g. one per streamed chunk) add up."""
        return shared_stage((self,), name)

    def intervals(self, name: str) -> list[float]:
        """Milliseconds of each occurrence of one stage, in order (a per-step curve)."""
        self._sync()
        return [self._elapsed_ms(start, end) for n, start, end in self._events if n == name]

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

    def host_ms(self) -> float:
        """Milliseconds of wall clock since creation, read without synchronizing: for moments
        the host itself observes, such as a chunk of audio handed out. A device sync there
        would wait for work queued after that chunk (the next codec window, on a side stream)
        and stall every other stream on the device."""
        return (time.perf_counter() - self._host_origin) * 1000.0

    def since_start(self, mark: str | None = None) -> float:
        """Milliseconds from the timer's creation to a named mark, or to now."""
        end = self._marks[mark] if mark is not None else self._mark()
        self._sync()
        return self._elapsed_ms(self._origin, end)


@contextmanager
def shared_stage(timers: Sequence[StageTimer], name: str) -> Iterator[None]:
    """Time one block of work done for several requests at once (a batched decode step) and
    charge the whole of it to each: every request waited for all of it."""
    if not timers:
        yield
        return
    clock = timers[0]  # every timer of one device marks time the same way
    with torch.profiler.record_function(name):
        start = clock._mark()
        yield
        end = clock._mark()
    for timer in timers:
        timer._events.append((name, start, end))


STEP_STAGE = "lm_step"
"""The stage name of one autoregressive decode step; its intervals are the per-step curve."""


@dataclass
class RequestMeter:
    """What one request cost, carried with the request rather than stored on a shared model:
    its own stage timer and the tokens generated for it."""

    timer: StageTimer
    tokens: int = 0

    @property
    def step_ms(self) -> list[float]:
        return self.timer.intervals(STEP_STAGE)
