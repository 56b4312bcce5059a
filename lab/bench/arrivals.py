"""When load-test requests are sent: closed-loop users and open-loop Poisson arrivals.

The two shapes answer different questions. Closed loop (N users, each sending its next request
when its last one ends) asks how a server behaves with N streams in flight; it can never
overload the server, because a slow server slows its own users down. Open loop (requests
arriving at random at a given rate, whether or not earlier ones have finished) is how
independent users behave: a server slower than the arrival rate builds a queue, and the
latency of that queue is what users see. A load generator that waits for responses before
sending more hides exactly that queue, so `open_loop` never waits.

Nothing here knows about HTTP: `send(scheduled)` is any coroutine, told the moment its
request was due so that it can measure from then, not from when it got to run.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence

Send = Callable[[float], Awaitable[None]]
"""Sends one request; its argument is the `time.perf_counter()` instant it was due."""


def poisson_arrivals(rate: float, count: int, horizon_s: float, seed: int) -> list[float]:
    """Arrival offsets in seconds of a Poisson process at `rate` per second.

    The gaps are exponential with mean 1/rate, drawn from a seeded generator so two runs send
    the same schedule. At most `count` arrivals, all before `horizon_s`: the two bounds that
    keep a load test from running away.
    """
    if rate <= 0:
        raise ValueError(f"arrival rate {rate} must be > 0 requests per second")
    rng = random.Random(seed)
    offsets: list[float] = []
    t = rng.expovariate(rate)
    while len(offsets) < count and t < horizon_s:
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


async def open_loop(offsets: Sequence[float], send: Send, start: float | None = None) -> None:
    """Start each request at its offset from `start` (a `time.perf_counter()` instant; now by
    default), never waiting for an earlier one to end."""
    start = time.perf_counter() if start is None else start
    tasks = []
    for offset in offsets:
        due = start + offset
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(due)))
    await asyncio.gather(*tasks)


async def closed_loop(users: int, send: Send, count: int, duration_s: float) -> None:
    """`users` users, each sending its next request as soon as its last one ends.

    No request starts after `count` have started or after `duration_s`; those already sent
    run to their end, so the slowest requests are measured rather than dropped.
    """
    if users < 1:
        raise ValueError(f"concurrency {users} must be >= 1")
    deadline = time.perf_counter() + duration_s
    started = 0

    def take() -> bool:
        nonlocal started
        if started >= count or time.perf_counter() >= deadline:
            return False
        started += 1
        return True

    async def user() -> None:
        while take():
            await send(time.perf_counter())

    await asyncio.gather(*(user() for _ in range(users)))
