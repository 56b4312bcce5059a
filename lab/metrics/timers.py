"""Per-stage timing that is right on both CPU and CUDA.

On CUDA, host clocks only measure how long it took to *enqueue* work. Each stage therefore
records a pair of CUDA events and the timer waits only when results are read, and then only for
its own last event, so timing never adds a sync inside the pipeline. While torch.profiler runs,
every stage is also a `record_function` range, so the same names appear in its trace.

A batched step is timed once for every request in it: the requests' timers share one `Span`,
whose milliseconds are read off the device once. Serving 100 streams, timing costs the serving
thread two events a stage, not two hundred, and a finishing request reads no span twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch


class Span:
    """One timed interval between two marks (CUDA events or host clock readings), read once."""

    def __init__(self, start: object, end: object) -> None:
        self.start, self.end = start, end
        self._ms: float | None = None

    @property
    def ms(self) -> float:
        if self._ms is None:
            self._ms = _elapsed_ms(self.start, self.end)
        return self._ms


def _elapsed_ms(start: object, end: object) -> float:
    if isinstance(start, float):
        return (end - start) * 1000.0
    end.synchronize()
    return float(start.elapsed_time(end))


class StageTimer:
    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.cuda = torch.device(device).type == "cuda"
        self._stream = torch.cuda.current_stream(device) if self.cuda else None
        self._events: list[tuple[str, Span]] = []
        self._host_origin = time.perf_counter()
        self._origin = self._mark()
        self._marks: dict[str, object] = {}

    def _mark(self) -> object:
        """A CUDA event on the stream current at creation (looked up once: the lookup costs
        more host time than the record), or the host clock."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(self._stream)
            return event
        return time.perf_counter()

    def stage(self, name: str):
        """Time a block; repeated names (e.g. one per streamed chunk) add up."""
        return shared_stage((self,), name)

    def intervals(self, name: str) -> list[float]:
        """Milliseconds of each occurrence of one stage, in order (a per-step curve)."""
        return [span.ms for n, span in self._events if n == name]

    def mark(self, name: str) -> None:
        """Remember a point in time, such as the moment the first audio is ready."""
        self._marks[name] = self._mark()

    def results(self) -> dict[str, float]:
        """Milliseconds per stage name, summed over repeats."""
        totals: dict[str, float] = {}
        for name, span in self._events:
            totals[name] = totals.get(name, 0.0) + span.ms
        return totals

    def host_ms(self) -> float:
        """Milliseconds of wall clock since creation, read without synchronizing: for moments
        the host itself observes, such as a chunk of audio handed out. A device sync there
        would wait for work queued after that chunk (the next codec window, on a side stream)
        and stall every other stream on the device."""
        return (time.perf_counter() - self._host_origin) * 1000.0

    def settled(self) -> bool:
        """Whether every stage and mark so far can be read without waiting for the device.
        Events on one stream complete in order, so the newest span's end stands for all."""
        if not self.cuda:
            return True
        newest = [span.end for _, span in self._events[-1:]]
        return all(event.query() for event in [*newest, *self._marks.values()])

    def since_start(self, mark: str | None = None) -> float:
        """Milliseconds from the timer's creation to a named mark, or to now."""
        end = self._marks[mark] if mark is not None else self._mark()
        return _elapsed_ms(self._origin, end)


@contextmanager
def shared_stage(timers: Sequence[StageTimer], name: str) -> Iterator[None]:
    """Time one block of work done for several requests at once (a batched decode step) and
    charge the whole of it to each: every request waited for all of it."""
    if not timers:
        yield
        return
    clock = timers[0]  # every timer of one device marks time the same way
    with _profiled(name):
        start = clock._mark()
        yield
        entry = (name, Span(start, clock._mark()))
    for timer in timers:  # one entry shared by all: a hundred streams add no objects a step
        timer._events.append(entry)


def _profiled(name: str):
    """A `record_function` range while the profiler runs; otherwise nothing, at no cost."""
    if torch.autograd.profiler._is_profiler_enabled:
        return torch.profiler.record_function(name)
    return nullcontext()


STEP_STAGE = "lm_step"
"""The stage name of one autoregressive decode step; its intervals are the per-step curve."""


@dataclass
class RequestMeter:
    """What one request cost, carried with the request rather than stored on a shared model:
    its own stage timer and the tokens generated for it."""

    timer: StageTimer
    tokens: int = 0
    admission_ms: float | None = None
    """How long its first utterance waited for the engine to let it in (a free slot and an open
    admission gate), set with its first audio; None for a family without an engine queue."""

    @property
    def step_ms(self) -> list[float]:
        return self.timer.intervals(STEP_STAGE)
