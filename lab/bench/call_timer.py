"""Where one thread's time goes, by function: inclusive wall time and calls of chosen methods.

A sampling profiler shows a serving thread's stacks but not what a round of it costs per
function, and a tracing one (cProfile) slows every Python call, so the rounds it measures are
not the rounds a server runs. This wraps only the methods it is given, for as long as it is
entered: one extra Python call and two clock reads per timed call, on the functions that
matter and nowhere else.
Times are inclusive (a method's callees count in it too), so rows do not add up.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_INHERITED = object()  # a method the class takes from a base, not its own


@dataclass
class Calls:
    seconds: float = 0.0
    count: int = 0


class CallTimer:
    """`with CallTimer([(Class, "method"), ...]) as timer:` times every call of those methods
    (from any thread) while entered, then puts the originals back; `timer.calls` maps
    "Class.method" to its `Calls`. A method named twice is timed once."""

    def __init__(self, targets: Sequence[tuple[type, str]]) -> None:
        for owner, name in targets:
            if not callable(getattr(owner, name, None)):
                raise ValueError(f"{owner.__name__}.{name} is not a method")
        self.targets = list(dict.fromkeys(targets))
        self.calls: dict[str, Calls] = {}
        self._originals: list[tuple[type, str, object]] = []

    def __enter__(self) -> CallTimer:
        for owner, name in self.targets:
            self._originals.append((owner, name, owner.__dict__.get(name, _INHERITED)))
            raw, label = inspect.getattr_static(owner, name), f"{owner.__name__}.{name}"
            if isinstance(raw, (staticmethod, classmethod)):  # wrapped inside, bound as before
                setattr(owner, name, type(raw)(self._timed(raw.__func__, label)))
            else:
                setattr(owner, name, self._timed(raw, label))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, own in reversed(self._originals):
            if own is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, own)
        self._originals.clear()

    def _timed(self, fn: Callable, label: str) -> Callable:
        calls = self.calls.setdefault(label, Calls())

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                calls.seconds += time.perf_counter() - start
                calls.count += 1

        return timed
