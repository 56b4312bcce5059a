"""How a server admits requests: slots, queue, deadline, and the name it answers to."""

from __future__ import annotations

from dataclasses import dataclass

from lab.pipeline import Pipeline

# The worker interleaves a non-autoregressive family's streams one window at a time, so each
# of n streams gets 1/n of its speed: a few keep the voice near real time on a CPU.
DEFAULT_STREAMS = 4


@dataclass(frozen=True)
class ServeOptions:
    """`slots`: streams served at once; None takes the family's own concurrency (an
    autoregressive family's engine slots, its `batch_size`; else `DEFAULT_STREAMS`).
    `queue`: requests that may wait for a slot before the next gets 429. `deadline_s`: how long
    a request may take from arrival to last byte. `model_name`: the id `/v1/models` lists and
    requests may name, besides the family's name."""

    slots: int | None = None
    queue: int = 16
    deadline_s: float = 300.0
    retry_after_s: int = 1
    model_name: str | None = None

    def __post_init__(self) -> None:
        if self.slots is not None and self.slots < 1:
            raise ValueError(f"slots={self.slots} must be >= 1")
        if self.queue < 0:
            raise ValueError(f"queue={self.queue} must be >= 0")
        if not self.deadline_s > 0:
            raise ValueError(f"deadline_s={self.deadline_s} must be > 0")
        if self.retry_after_s < 1:
            raise ValueError(f"retry_after_s={self.retry_after_s} must be >= 1")

    def slots_for(self, pipeline: Pipeline) -> int:
        if self.slots is not None:
            return self.slots
        return pipeline.config.batch_size if pipeline.family.autoregressive else DEFAULT_STREAMS
