"""Repeated timings with their spread, under a pinned thread count.

One pass of anything on a shared machine is an anecdote: the scheduler, the allocator and the
CPU's clock all move it by tens of percent. Every figure the lab prints as a speed therefore
comes from several passes and carries its median and its min-max, and the number of threads
the passes ran on is fixed first and recorded beside it, since PyTorch's CPU kernels scale
with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Spread:
    """The median of `n` values with their range; `str()` reads "12.3 (11.9-13.0, n=5)".

    `values` keeps the figures themselves, in order, for whoever wants each pass."""

    median: float
    low: float
    high: float
    n: int
    values: tuple[float, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if len(values) == 0:
            raise ValueError("a spread needs at least one value")
        arr = np.asarray(values, dtype=float)
        return cls(float(np.median(arr)), float(arr.min()), float(arr.max()), len(arr),
                   tuple(float(v) for v in arr))

    @property
    def relative_range(self) -> float:
        """(max - min) / median: how far apart the passes were, as a fraction."""
        return (self.high - self.low) / self.median if self.median else float("inf")

    def format(self, digits: int = 1) -> str:
        d = digits
        return f"{self.median:.{d}f} ({self.low:.{d}f}-{self.high:.{d}f}, n={self.n})"

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.n}


def timed_repeats(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1
                  ) -> tuple[Spread, list[Any]]:
    """Wall milliseconds of `repeats` calls of `fn` after `warmup` untimed ones, and each
    timed call's result (so a caller can also read the figures the call reports itself)."""
    return timed_in_turn({None: fn}, repeats, warmup)[None]


def timed_in_turn(fns: Mapping[K, Callable[[], Any]], repeats: int = 5, warmup: int = 1
                  ) -> dict[K, tuple[Spread, list[Any]]]:
    """`timed_repeats` for several calls that are to be compared, taking turns: each repeat
    times every call once, so a burst of other work on the machine lands on all of them alike
    instead of on whichever ran through it."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup} must be >= 0")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[K, list[float]] = {key: [] for key in fns}
    results: dict[K, list[Any]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            start = time.perf_counter()
            results[key].append(fn())
            times[key].append((time.perf_counter() - start) * 1e3)
    return {key: (Spread.of(times[key]), results[key]) for key in fns}


@contextmanager
def pinned_threads(threads: int | None = None) -> Iterator[int]:
    """Run the block on `threads` intra-op threads (default: what PyTorch uses now, made
    explicit), restoring the previous count after; yields the count to record.

    PyTorch fixes each thread's count the first time that thread uses it; a later change
    reaches only the calling thread and threads yet to start. So a worker thread that first
    runs inside the block (a new pipeline's) runs on the pinned count, and keeps it after the
    block; one that ran before keeps its own."""
    before = torch.get_num_threads()
    count = before if threads is None else int(threads)
    if count < 1:
        raise ValueError(f"threads={threads} must be >= 1")
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(before)
