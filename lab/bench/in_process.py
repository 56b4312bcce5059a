"""The load generator's arrivals against a pipeline in this process: no server, no HTTP.

A request is read on one event loop as the server reads it (`Pipeline.astream`) and timed from
when it was due as `lab loadtest` times one over HTTP, so rows made here compare with served
ones, and the gap between the two is what the server itself costs.
"""

from __future__ import annotations

import asyncio
import time

from tqdm import tqdm

from lab.bench.arrivals import open_loop, poisson_arrivals
from lab.bench.host_work import ThreadClock
from lab.bench.load_report import RequestRecord, median
from lab.bench.loadtest import LoadPlan, draw_texts
from lab.bench.playback import Timeline
from lab.pipeline import AudioChunk, Pipeline


def thread_clock(pipe: Pipeline) -> ThreadClock:
    """The pipeline's serving thread so far: its rounds, its busy seconds, the seconds of
    them it waited for the device's tokens, and its codec windows and their lag (none for a
    family without an engine)."""
    load, queue = pipe.worker_load(), pipe.engine_queue()
    if queue is None:
        return ThreadClock(load.rounds, load.busy_s, 0.0)
    return ThreadClock(load.rounds, load.busy_s, queue.device_wait_s, queue.codec_windows,
                       queue.codec_lag_s)


def open_in_process(pipe: Pipeline, plan: LoadPlan, rate: float, shape: str
                    ) -> tuple[list[RequestRecord], float]:
    """One open-loop point against the pipeline: the load generator's arrivals and sentences,
    every request read on one event loop, as the server reads them."""
    offsets = poisson_arrivals(rate, plan.requests, plan.duration_s, plan.seed)
    texts = iter(draw_texts(plan.texts, plan.requests, plan.seed))
    records: list[RequestRecord] = []
    origin = time.perf_counter()
    bar = tqdm(total=len(offsets), desc=f"{shape} {rate:g}", unit="req")

    async def send(due: float) -> None:
        records.append(await one_in_process(pipe, next(texts), due, shape, rate, origin))
        bar.update(1)

    asyncio.run(open_loop(offsets, send))
    bar.close()
    return records, time.perf_counter() - origin


async def one_in_process(pipe: Pipeline, text: str, due: float, shape: str,
                         load: float, origin: float) -> RequestRecord:
    """One request to the pipeline, timed from `due` as the load generator times one over
    HTTP (`origin`: the point's start, from which `due_s` counts)."""
    timeline, error, steps = Timeline(), None, []
    started = time.perf_counter()
    try:
        async for item in pipe.astream(text):
            if isinstance(item, AudioChunk):
                timeline.add(time.perf_counter(), len(item.audio) / item.sample_rate,
                             2 * len(item.audio))
            else:
                steps = item.metrics.step_ms
    except Exception as err:  # a failed request is a row's error count, as over HTTP
        error = type(err).__name__
    return RequestRecord(
        shape=shape, load=load, chars=len(text), due_s=round(due - origin, 4),
        lag_s=started - due,
        ttfa_s=timeline.ttfa_s(due), latency_s=time.perf_counter() - due,
        audio_s=timeline.audio_s, bytes=timeline.bytes, reads=timeline.reads,
        margin_s=timeline.margin_s(), tightest_s=timeline.tightest_s(), error=error,
        step_ms=median(steps))
