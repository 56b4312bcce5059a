"""How a server admits requests: slots, queue, deadline, and the name it answers to."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lab.pipeline import Pipeline
from lab.serve.memory_plan import plan_loaded

log = logging.getLogger("lab.serve")


@dataclass(frozen=True)
class ServeOptions:
    """`slots`: streams served at once; None takes the memory plan's (`lab.serve.memory_plan`:
    what the free memory holds, up to the loaded engine's slots or, for a family without one,
    a few interleaved streams).
    `queue`: requests that may wait for a slot before the next gets 429. `deadline_s`: how long
    a request may take from arrival to last byte. `model_name`: the id `/v1/models` lists and
    requests may name, besides the family's name.
    `keep_alive_s`: how long an idle connection stays open. Longer than clients keep idle
    connections in their pools (httpx, and so the `openai` client, drops them after 5 s), so
    a client never reuses a connection the server is closing at that moment: with both at 5 s,
    a request sent as the server's timer fired failed with no response at all (one in a
    load test's 631, on the first request after a pause)."""

    slots: int | None = None
    queue: int = 16
    deadline_s: float = 300.0
    retry_after_s: int = 1
    model_name: str | None = None
    keep_alive_s: float = 75.0

    def __post_init__(self) -> None:
        if self.slots is not None and self.slots < 1:
            raise ValueError(f"slots={self.slots} must be >= 1")
        if self.queue < 0:
            raise ValueError(f"queue={self.queue} must be >= 0")
        if not self.deadline_s > 0:
            raise ValueError(f"deadline_s={self.deadline_s} must be > 0")
        if not self.keep_alive_s > 0:
            raise ValueError(f"keep_alive_s={self.keep_alive_s} must be > 0")
        if self.retry_after_s < 1:
            raise ValueError(f"retry_after_s={self.retry_after_s} must be >= 1")

    def slots_for(self, pipeline: Pipeline) -> int:
        """`slots` when given, else the memory plan's for the loaded pipeline (logged)."""
        if self.slots is not None:
            return self.slots
        plan = plan_loaded(pipeline)
        log.info("%s", plan.summary())
        return plan.slots
