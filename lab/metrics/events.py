"""An in-memory log of what the lab did recently, for live dashboards.

The pipeline records one event per request; the UI polls `recent(seconds)` to draw latency
over time. A bounded ring buffer keeps memory flat however long the app runs, and a lock
lets request threads write while the UI thread reads.
"""

from __future__ import annotations

import threading
import time
from collections import deque

RESERVED = ("time", "kind")


class EventLog:
    """A thread-safe ring buffer of dict events, newest last.

    Each event carries `time` (seconds since the epoch, for display) and `kind`. Age filters
    use a monotonic clock kept beside each event, so a wall-clock jump cannot hide events.
    """

    def __init__(self, maxlen: int = 10_000) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen={maxlen} must be >= 1")
        self._items: deque[tuple[float, dict]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def record(self, kind: str, **fields: object) -> dict:
        """Append one event and return a copy of it."""
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"event kind must be a non-empty string, got {kind!r}")
        clash = [k for k in RESERVED if k in fields]
        if clash:
            raise ValueError(f"event fields {clash} are reserved; rename them")
        event = {"time": time.time(), "kind": kind, **fields}
        with self._lock:
            self._items.append((time.monotonic(), event))
        return dict(event)

    def recent(self, seconds: float | None = None, kind: str | None = None) -> list[dict]:
        """Events of the last `seconds` (all kept ones when None), oldest first, as copies."""
        if seconds is not None and seconds < 0:
            raise ValueError(f"seconds={seconds} must be >= 0")
        cutoff = None if seconds is None else time.monotonic() - seconds
        with self._lock:
            items = list(self._items)
        return [
            dict(event)
            for stamp, event in items
            if (cutoff is None or stamp >= cutoff) and (kind is None or event["kind"] == kind)
        ]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


events = EventLog()
