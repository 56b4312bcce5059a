"""Admission control: a bounded number of streams at once, a bounded queue, refusal beyond.

A server that accepts every request slows every stream below real time and then runs out of
memory; one that refuses early lets a client retry elsewhere. So a request takes a slot
(one of `slots` streams that the pipeline's worker interleaves), waits in a queue of at most
`queue` when none is free, and is refused with 429 and `Retry-After` when the queue is full.
Each request also carries a deadline from its arrival: it is refused with 503 when no slot
frees in time, and cut off when its stream runs past it. The counts are read live by
`/metrics`. Everything here runs on the server's one event loop, so the counts need no lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import anyio

from lab.serve.errors import OVERLOADED, UNAVAILABLE, ApiError, retry_later


@dataclass(frozen=True)
class Deadline:
    """When a request must be done by, counted from its arrival."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> float:
        return self.start + self.seconds - time.monotonic()


class Slot:
    """One admitted request's place; `release` is safe to call more than once."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission.leave()


class Admission:
    def __init__(self, slots: int, queue: int, retry_after_s: int) -> None:
        if slots < 1 or queue < 0:
            raise ValueError(f"slots={slots} must be >= 1 and queue={queue} >= 0")
        self.slots = slots
        self.queue = queue
        self.retry_after_s = retry_after_s
        self.active = 0
        self.waiting = 0
        self.draining = False
        self._free = anyio.Semaphore(slots)

    async def enter(self, deadline: Deadline) -> Slot:
        """A slot for this request, after waiting in the queue if need be; else ApiError."""
        if self.draining:
            raise retry_later(503, "the server is shutting down; it finishes the requests it "
                                   "holds and takes no new ones", self.retry_after_s,
                              UNAVAILABLE, "shutting_down")
        if self.active + self.waiting >= self.slots + self.queue:
            raise retry_later(429, f"the server is at capacity ({self.active} streams running, "
                                   f"{self.waiting} queued, at most {self.queue}); retry "
                                   f"after {self.retry_after_s} s", self.retry_after_s,
                              OVERLOADED, "queue_full")
        self.waiting += 1
        try:
            with anyio.move_on_after(max(deadline.remaining, 0)):
                await self._free.acquire()
                self.active += 1
                return Slot(self)
        finally:
            self.waiting -= 1
        raise self.expired(deadline, "before a slot freed")

    def expired(self, deadline: Deadline, when: str) -> ApiError:
        return retry_later(503, f"the request's deadline of {deadline.seconds:g} s passed "
                                f"{when} ({self.active} of {self.slots} slots busy)",
                           self.retry_after_s, OVERLOADED, "deadline_exceeded")

    def leave(self) -> None:
        self.active -= 1
        self._free.release()
