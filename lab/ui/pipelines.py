"""A small cache of loaded pipelines, so turning back to a config does not reload its model.

Loading weights (and compiling) is the slow part of a request. The app keeps the last few
pipelines keyed by their full config, evicting the least recently used (its worker thread
exits once its requests are done), and builds each one only once even when two requests ask
for it at the same moment. Using a pipeline needs no lock here: its own worker serializes
the work on its model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from lab.config import PipelineConfig
from lab.pipeline import Pipeline

# Builds a pipeline for a config, reporting each startup stage to the callback it is given.
Factory = Callable[[PipelineConfig, Callable[[str], None] | None], Pipeline]


class PipelineCache:
    """Least-recently-used pipelines by config; `capacity` bounds memory held by models."""

    def __init__(self, capacity: int = 3, factory: Factory = Pipeline) -> None:
        if capacity < 1:
            raise ValueError(f"capacity={capacity} must be >= 1")
        self.capacity = capacity
        self.factory = factory
        self._items: OrderedDict[PipelineConfig, Pipeline] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[PipelineConfig, threading.Lock] = {}
        self.loads = 0

    def __contains__(self, cfg: PipelineConfig) -> bool:
        with self._lock:
            return cfg in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def _cached(self, cfg: PipelineConfig) -> Pipeline | None:
        with self._lock:
            pipe = self._items.get(cfg)
            if pipe is not None:
                self._items.move_to_end(cfg)
            return pipe

    def get(self, cfg: PipelineConfig, on_load: Callable[[str], None] | None = None) -> Pipeline:
        """The pipeline for `cfg`, loading it on a miss (`on_load(message)` hears each stage).

        A load that raises leaves the cache as it was, so the next request tries again.
        """
        pipe = self._cached(cfg)
        if pipe is not None:
            return pipe
        with self._lock:
            gate = self._loading.setdefault(cfg, threading.Lock())
        with gate:
            pipe = self._cached(cfg)
            if pipe is not None:
                return pipe
            pipe = self.factory(cfg, on_load)
            with self._lock:
                self._items[cfg] = pipe
                self.loads += 1
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)[1].close()
                self._loading.pop(cfg, None)
        return pipe

    def clear(self) -> None:
        with self._lock:
            for pipe in self._items.values():
                pipe.close()
            self._items.clear()
