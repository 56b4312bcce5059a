"""How much of a load point the pipeline's serving thread spent on host work, its mean round,
and how long the codec's windows took from launch to hand-out.

A streaming server keeps every stream in real time only while its serving thread's rounds
(one engine step each, with the codec work it made due) stay short. When the thread is busy
nearly all the point's wall time outside its waits for the device, Python on the host, not the
GPU, sets every stream's pace, and a faster GPU would not help. On a GPU the codec decodes on
a side stream the thread never waits for, so a codec falling behind shows in no round: only in
the lag of its windows. The thread keeps the counters (`lab.worker.WorkerLoad`, the engine's
device waits, the decoder's windows and their lag); a point reads them as it starts and ends,
from the pipeline in this process (`lab.bench.in_process.thread_clock`) or from a server's
`/metrics`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from lab.bench.load_report import PointSummary


class ThreadClock(NamedTuple):
    """The serving thread so far: its rounds, its busy seconds, the seconds of them it waited
    for the device's sampled tokens, and the codec windows it handed out with their summed
    seconds from launch."""

    rounds: int
    busy_s: float
    wait_s: float
    codec_windows: int = 0
    codec_lag_s: float = 0.0

    @property
    def host_s(self) -> float:
        """Busy seconds less the device waits: the thread's host work."""
        return self.busy_s - self.wait_s


COUNTERS = ("lab_worker_rounds_total", "lab_worker_busy_seconds_total",
            "lab_engine_device_wait_seconds_total", "lab_codec_windows_total",
            "lab_codec_lag_seconds_total")
"""The counters' names in a lab server's `/metrics`, in `ThreadClock`'s order."""


def clock_of_metrics(exposition: str) -> ThreadClock | None:
    """The thread's counters from a server's Prometheus text; None where it has none (a server
    that is not the lab's, or whose text does not parse), so a load test of any server still
    runs."""
    try:
        values = {sample.name: sample.value
                  for family in text_string_to_metric_families(exposition)
                  for sample in family.samples}
    except ValueError:
        return None
    return clock_of_values(values)


def clock_of_values(values: dict[str, float]) -> ThreadClock | None:
    """The thread's counters from a server's samples by name; None without its busy seconds
    (a server that is not the lab's). A counter the server lacks (no engine, no codec) reads
    0."""
    if COUNTERS[1] not in values:
        return None
    rounds, busy, wait, windows, lag = (values.get(name, 0.0) for name in COUNTERS)
    return ThreadClock(int(rounds), busy, wait, int(windows), lag)


def with_host_work(row: PointSummary, before: ThreadClock | None,
                   after: ThreadClock | None) -> PointSummary:
    """The row with the thread's host work between two readings as a share of the point's wall
    time, its mean round, and the codec windows' mean lag; the row as it was without both
    readings. The thread books a round once it has handed out the round's audio, a moment
    after the point's clock may have stopped, so a thread busy throughout can read a hair
    over the wall time: the share is capped at 1."""
    if before is None or after is None:
        return row
    rounds, busy_s, _, windows, lag_s = (b - a for a, b in zip(before, after, strict=True))
    host_s = after.host_s - before.host_s
    host = round(min(1.0, host_s / row.wall_s), 3) if row.wall_s else None
    return replace(row, host_busy=host,
                   round_ms=round(busy_s * 1000 / rounds, 3) if rounds else None,
                   codec_lag_ms=round(lag_s * 1000 / windows, 3) if windows else None)
