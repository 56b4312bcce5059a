"""An in-memory log of what the lab did recently, for live dashboards.

The pipeline records one event per request; the UI polls `recent(seconds)` to draw latency
over time. A bounded ring buffer keeps memory flat however long the app runs, and a lock
lets request threads write while the UI thread reads.

A benchmark drives the same pipelines a user does, so each request event names its
`source`: `user` unless the pipeline that served it is tagged otherwise. The benchmark tags
the pipelines it builds for itself (`tagged(pipe, BENCHMARK)`), which no user request ever
reaches, so a dashboard can show the two kinds of traffic apart.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

RESERVED = ("time", "kind")
USER = "user"
BENCHMARK = "benchmark"


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
        self._sources: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()

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

    def recent(self, seconds: float | None = None, kind: str | None = None,
               source: str | None = None) -> list[dict]:
        """Events of the last `seconds` (all kept ones when None), oldest first, as copies;
        only those of `kind` and of `source` when given (an event without one is `user`)."""
        if seconds is not None and seconds < 0:
            raise ValueError(f"seconds={seconds} must be >= 0")
        cutoff = None if seconds is None else time.monotonic() - seconds
        with self._lock:
            items = list(self._items)
        return [
            dict(event)
            for stamp, event in items
            if (cutoff is None or stamp >= cutoff) and (kind is None or event["kind"] == kind)
            and (source is None or event.get("source", USER) == source)
        ]

    def source_of(self, owner: object) -> str:
        """The traffic `owner` (a pipeline) serves now: its tag, or `user`."""
        with self._lock:
            return self._sources.get(owner, USER)

    @contextmanager
    def tagged(self, owner: object, source: str) -> Iterator[None]:
        """Within the block, events `owner` records name `source`; the old tag comes back after.

        Tags are kept by weak reference, so one left behind never keeps a pipeline (and its
        model) alive.
        """
        if not isinstance(source, str) or not source:
            raise ValueError(f"source must be a non-empty string, got {source!r}")
        with self._lock:
            before = self._sources.get(owner)
            self._sources[owner] = source
        try:
            yield
        finally:
            with self._lock:
                if before is None:
                    self._sources.pop(owner, None)
                else:
                    self._sources[owner] = before

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


events = EventLog()
