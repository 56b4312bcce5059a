"""A load point sent from several processes, so that the load generator is not what it measures.

Time to first audio and the real-time check are taken where the audio arrives, on the client.
One Python process reading a few hundred streamed responses spends most of a core parsing
HTTP, and its event loop then starts requests late and reads chunks late; both count against
the server. On a 2-core machine, one process against a server that only paces silence kept up
with 60 arrivals a second (148 streams, requests started at most 7 ms late at p99) and fell
apart at 90 (requests started 5 s late, the streams in flight piled up to 560).

Spread over N processes, each with its own event loop and client, the server sees the same
point: the open loop's Poisson schedule and sentences dealt out in turn (every arrival keeps
its instant), the closed loop's users and sentences split. Every process counts from one
shared start, so the records merge as if one client had sent them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from lab.bench.arrivals import closed_loop, open_loop
from lab.bench.load_report import RequestRecord
from lab.bench.loopback import loopback_client

START_LEAD_S = 0.5
"""How far ahead of now a spread point starts: time for every process to take its share."""

READY_TIMEOUT_S = 120.0
"""How long the processes may take to start (each imports the lab, and with it torch)."""

Speak = Callable[..., Awaitable[RequestRecord]]
"""`lab.bench.loadtest.speak`: one request, timed from when it was due."""


@dataclass(frozen=True)
class Share:
    """One process's part of a point: its sentences and, in the open loop, their arrival
    offsets; in the closed loop, how many users send them."""

    texts: tuple[str, ...]
    offsets: tuple[float, ...] = ()
    users: int = 0


def deal(shape: str, load: float, texts: Sequence[str], offsets: Sequence[float],
         processes: int) -> list[Share]:
    """The point in `processes` shares, each of them sending something: arrival k (and its
    sentence) to share k mod n; in the closed loop the users split as evenly as they go."""
    if processes < 1:
        raise ValueError(f"processes={processes} must be >= 1")
    if shape != "closed":
        n = max(1, min(processes, len(offsets)))
        return [Share(tuple(texts[i:len(offsets):n]), tuple(offsets[i::n])) for i in range(n)]
    users = int(load)
    n = min(processes, users)
    return [Share(tuple(texts[i::n]), users=users // n + (i < users % n)) for i in range(n)]


async def send_share(speak: Speak, client, target, share: Share, shape: str, load: float,
                     duration_s: float, origin: float,
                     done: Callable[[RequestRecord], None]) -> list[RequestRecord]:
    """Every request of one share on this event loop, counted from `origin` (a
    `time.perf_counter()` instant); `done` hears of each as it ends."""
    texts, records = iter(share.texts), []

    async def send(due: float) -> None:
        record = await speak(client, target, next(texts), due, shape, load, origin)
        records.append(record)
        done(record)

    if shape == "closed":
        await closed_loop(share.users, send, len(share.texts), duration_s)
    else:
        await open_loop(share.offsets, send, start=origin)
    return records


_news: multiprocessing.Queue | None = None
"""In a sending process: where it says that a request ended (and whether it failed)."""


def _listen(news: multiprocessing.Queue) -> None:
    global _news
    _news = news
    news.put("ready")


def _send_in_process(speak: Speak, target, share: Share, shape: str, load: float,
                     duration_s: float, start_at: float) -> tuple[list[RequestRecord], float]:
    """A sending process's share of a point from the wall-clock instant `start_at`: its
    records and the seconds from that instant to its last answer."""

    async def run() -> tuple[list[RequestRecord], float]:
        async with loopback_client(target.timeout_s) as client:
            origin = time.perf_counter() + (start_at - time.time())
            await asyncio.sleep(max(0.0, origin - time.perf_counter()))
            records = await send_share(speak, client, target, share, shape, load, duration_s,
                                       origin, lambda r: _news.put(r.error is not None))
        return records, time.perf_counter() - origin

    return asyncio.run(run())


class Senders:
    """`processes` sending processes, started once for a run and reused by every point."""

    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._news = context.Queue()
        self._pool = context.Pool(processes, initializer=_listen, initargs=(self._news,))
        self._closed = False
        try:
            for _ in range(processes):
                self._news.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            self.close()
            raise RuntimeError(f"the {processes} sending processes did not all start within "
                               f"{READY_TIMEOUT_S:g} s") from None

    def send(self, speak: Speak, target, shares: Sequence[Share], shape: str, load: float,
             duration_s: float, heard: Callable[[bool], None]
             ) -> tuple[list[RequestRecord], float]:
        """Every share at once, from one start; `heard(failed)` for each request as it ends.
        The records come back in arrival order with the point's wall time."""
        start_at = time.time() + START_LEAD_S
        pending = [self._pool.apply_async(_send_in_process, (speak, target, share, shape, load,
                                                             duration_s, start_at))
                   for share in shares]
        told = 0

        def tell(failed: bool) -> None:
            nonlocal told
            told += 1
            heard(failed)

        while not all(p.ready() for p in pending):
            if self._closed:  # stopped from the event loop's thread (Ctrl-C): do not wait on
                raise RuntimeError("the sending processes were stopped mid-point")
            self._relay(tell, timeout=0.2)
        parts = [p.get() for p in pending]
        records = sorted((r for part, _ in parts for r in part), key=lambda r: r.due_s)
        while told < len(records) and self._relay(tell, timeout=1.0):
            pass
        return records, max(wall for _, wall in parts)

    def _relay(self, heard: Callable[[bool], None], timeout: float) -> bool:
        """Pass on what the processes said, waiting up to `timeout` for the first word;
        False when nothing came."""
        try:
            heard(self._news.get(timeout=timeout))
        except queue.Empty:
            return False
        try:
            while True:
                heard(self._news.get_nowait())
        except queue.Empty:
            return True

    def close(self) -> None:
        self._closed = True
        self._pool.terminate()
        self._pool.join()

    def __enter__(self) -> Senders:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
