"""Python's garbage collector, timed: a suspect for the rare step that takes ten times the rest.

A serving loop that keeps thousands of small objects alive (requests, chunks, tensors) makes
every full (generation 2) collection walk all of them, and the step it lands in stalls every
stream. `GcPauses` records each collection's generation and duration while it is active, so a
benchmark can say whether its slowest steps were the collector's or not.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field


@dataclass
class GcPauses:
    """Use as a context manager; `pauses` holds (generation, ms) of each collection inside."""

    pauses: list[tuple[int, float]] = field(default_factory=list)
    _started: float = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], (time.perf_counter() - self._started) * 1e3))

    def summary(self) -> dict:
        """Collections by count, the longest and the total pause (ms); full ones apart."""
        full = [ms for gen, ms in self.pauses if gen == 2]
        return {"gc_collections": len(self.pauses), "gc_full": len(full),
                "gc_ms_max": max((ms for _, ms in self.pauses), default=0.0),
                "gc_ms_total": sum(ms for _, ms in self.pauses),
                "gc_full_ms_max": max(full, default=0.0)}
