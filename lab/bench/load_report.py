"""What a load test found: one summary row per load point, as JSON and a plotly HTML page.

A row holds time to first audio and latency at p50/p95/p99 over the requests that got audio,
the share of all requests whose stream stayed real time (a failed request did not), errors
by kind and throughput. Percentiles of a few dozen requests are coarse (p99 of 50 is
interpolated between the two slowest), so every row says how many requests it stands on.
The JSON keeps every request, so anything else can be computed later without a rerun.
"""

from __future__ import annotations

import dataclasses
import html
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.bench.report import markdown_table, to_json

SHAPE_AXES = {"closed": "concurrency", "open": "arrivals per second"}
"""The x axis each load shape is swept along."""


@dataclass(frozen=True)
class RequestRecord:
    """One request. Times are seconds from when it was due (its scheduled arrival)."""

    shape: str
    load: float
    chars: int
    due_s: float
    lag_s: float
    ttfa_s: float | None
    latency_s: float
    audio_s: float
    bytes: int
    reads: int
    margin_s: float | None
    error: str | None
    step_ms: float | None = None
    """The median decode step this request took part in: known for a pipeline driven in the
    benchmark's own process (an autoregressive family), not over HTTP."""
    server_ms: dict[str, float] | None = None
    """The server's own split of this request's time to first audio, in ms by name, from its
    `Server-Timing` header (the lab's server: `queue`, `first-audio`, `engine` and, for a family
    with an engine of its own, `admission`); None where the server sent none."""

    tightest_s: float | None = None
    """Seconds after its first audio when its player's buffer was smallest, where `margin_s`
    was measured (`Timeline.tightest_s`): for a stream that ran dry, whether it waited on its
    second piece or on a slow stretch later; None in files from before it was kept."""

    @property
    def realtime(self) -> bool:
        """Audio arrived and playback never ran dry."""
        return self.error is None and self.margin_s is not None and self.margin_s >= 0


@dataclass(frozen=True)
class PointSummary:
    shape: str
    load: float
    requests: int
    ok: int
    ttfa_p50_ms: float | None
    ttfa_p95_ms: float | None
    ttfa_p99_ms: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    realtime_fraction: float
    mean_streams: float
    """Streams in flight on average over the point (Little's law: total latency / wall time):
    what an open-loop rate amounts to in concurrent listeners."""
    mid_streams: float | None
    """Streams in flight on average over the middle half of the point's arrivals, past the
    ramp at its start and before the drain at its end: the concurrency the load holds once it
    has built up. An open point of 15 s whose requests take 3 s spends a third of its wall
    time on the ramp and the drain, so its `mean_streams` undercounts what it held."""
    mid_ttfa_p95_ms: float | None
    """TTFA p95 of the requests that arrived in that middle half, at that concurrency."""
    min_margin_s: float | None
    requests_per_s: float
    audio_s_per_s: float
    lag_p99_ms: float | None
    wall_s: float
    errors: dict[str, int]
    step_p50_ms: float | None = None
    """The median over requests of each one's median decode step (`RequestRecord.step_ms`):
    how long the steps took that the point's streams waited on, where that is known."""
    host_busy: float | None = None
    """The share of the point's wall time the pipeline's serving thread spent on host work:
    in rounds (`lab.worker.WorkerLoad`), less its waits for the device's tokens
    (`lab.bench.host_work`), from the pipeline in this process or a lab server's `/metrics`.
    Near 1, the host thread rather than the device set the pace."""
    round_ms: float | None = None
    """The serving thread's mean round over the point (one engine step each, for streams
    sharing an engine)."""
    codec_lag_ms: float | None = None
    """The codec windows' mean time from launch to their audio being handed out, over the
    point: on a GPU's side stream, the codec work no round shows (`lab.bench.host_work`)."""
    full: tuple[float, float, float, float] | None = None
    """Where the server was full (`full_rates`): from when, for how long, and requests a
    second that arrived and that it finished meanwhile, its ceiling (`ceiling_lines`)."""
    slowed: int | None = None
    """Streams that ran dry `SLOWED_AFTER_S` or more after their first audio (`slowed`): held
    up by the server's later rounds, not by a first piece too short. None in files from before
    streams kept when they ran dry."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile, interpolated linearly between ranks; None for no values."""
    return float(np.percentile(values, q)) if len(values) else None


def _ms(values: Sequence[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else round(value * 1000, 1)


def in_flight(records: Sequence[RequestRecord], start: float, stop: float) -> float:
    """Streams in flight on average between `start` and `stop` (stop > start), each request
    counted from when it was due to its last byte."""
    busy = sum(max(0.0, min(r.due_s + r.latency_s, stop) - max(r.due_s, start)) for r in records)
    return busy / (stop - start)


def middle_half(records: Sequence[RequestRecord]) -> tuple[float | None, list[RequestRecord]]:
    """Streams in flight on average between a quarter and three quarters of the way to the
    last arrival, and the requests that arrived in that window. None and [] when the arrivals
    span no time."""
    last = max((r.due_s for r in records), default=0.0)
    start, stop = last / 4, 3 * last / 4
    if stop <= start:
        return None, []
    return in_flight(records, start, stop), [r for r in records if start <= r.due_s <= stop]


QUEUED_MS = 50.0
"""A wait from this long for a server slot or for the engine to let the request in (the
server's `Server-Timing` `queue` plus `admission`): the request arrived to a full server, not to
a free slot."""

FULL_MIN_S = 5.0
"""A full stretch shorter than this is a burst's queue, too short to read a rate from."""


def found_full(record: RequestRecord) -> bool:
    """The request arrived to a full server: it was refused (429) or waited `QUEUED_MS` for a
    slot. A server with more slots than its engine lets in (an engine with an admission gate,
    or fewer engine slots) fills inside the engine, so that wait counts as well."""
    parts = record.server_ms or {}
    waited = parts.get("queue", 0.0) + parts.get("admission", 0.0) >= QUEUED_MS
    return waited or record.error == "http_429"


SLOWED_AFTER_S = 1.0
"""A stream that runs dry this long after its first audio waited on a slow stretch of the
server, not on its first piece."""


def slowed(records: Sequence[RequestRecord]) -> int | None:
    """How many streams ran dry `SLOWED_AFTER_S` or later after their first audio; None where
    no record says when its stream was tightest (files from before that was kept)."""
    known = [r for r in records if r.tightest_s is not None and r.margin_s is not None]
    if not known:
        return None
    return sum(r.margin_s < 0 and r.tightest_s >= SLOWED_AFTER_S for r in known)


def full_rates(records: Sequence[RequestRecord]) -> tuple[float, float, float, float] | None:
    """From the first arrival that found the server full (`found_full`) to the last: when it
    began, how long it lasted, and requests a second that arrived and that finished with their
    audio over it. A full server finishes what its slots carry, whatever arrives, so that is
    its ceiling for the point's texts (the whole point's `requests_per_s` is diluted by its
    ramp and drain, and a point whose streams are still building up finishes fewer than
    arrive without being full). None when no stretch of `FULL_MIN_S` was full."""
    full = [r.due_s for r in records if found_full(r)]
    if not full or max(full) - min(full) < FULL_MIN_S:
        return None
    start, stop = min(full), max(full)
    arrived = sum(start <= r.due_s < stop for r in records)
    served = sum(r.error is None and start <= r.due_s + r.latency_s < stop for r in records)
    span = stop - start
    return round(start, 2), round(span, 2), round(arrived / span, 2), round(served / span, 2)


@dataclass(frozen=True)
class Window:
    """The requests that arrived in one slice of an open-loop point's arrival time."""

    start_s: float
    arrivals_per_s: float
    streams: float
    ttfa_p50_ms: float | None
    ttfa_p95_ms: float | None
    realtime_fraction: float


def open_points(records: Sequence[RequestRecord]) -> dict[tuple[str, float], list[RequestRecord]]:
    """The open-loop records (any shape named for it) grouped by (shape, load), in order."""
    points: dict[tuple[str, float], list[RequestRecord]] = {}
    for r in records:
        if "open" in r.shape:
            points.setdefault((r.shape, r.load), []).append(r)
    return points


def over_time(records: Sequence[RequestRecord], width_s: float) -> list[Window]:
    """The point cut into slices of `width_s` seconds by arrival. Poisson arrivals come in
    bursts: a slice that ran above the mean rate builds up streams, and the requests arriving
    in and just after it wait longer for their first audio. A whole-point p95 cannot say
    whether its tail came from one burst or from every slice; this can. The last slice ends at
    the last arrival, so where the point stopped inside it, its rate reads low."""
    if width_s <= 0:
        raise ValueError(f"width_s must be positive; got {width_s}")
    last = max((r.due_s for r in records), default=0.0)
    windows = []
    for i in range(int(last // width_s) + 1):
        start = i * width_s
        here = [r for r in records if start <= r.due_s < start + width_s]
        ttfa = [r.ttfa_s for r in here if r.error is None and r.ttfa_s is not None]
        windows.append(Window(
            start_s=round(start, 3), arrivals_per_s=round(len(here) / width_s, 2),
            streams=round(in_flight(records, start, start + width_s), 1),
            ttfa_p50_ms=_ms(ttfa, 50), ttfa_p95_ms=_ms(ttfa, 95),
            realtime_fraction=round(sum(r.realtime for r in here) / len(here), 3)
            if here else 0.0))
    return windows


OUTSIDE = "outside"
"""The part of a request's time to first audio its server did not see: the client's TTFA less
the server's `queue` and `first-audio` (sending the request, the server's accept and parse, the
first bytes' way back, and any lag of the load generator)."""


TTFA_PARTS = ("'p50 / p95 / max' ms over the requests that got audio. `queue`: waiting for one "
              "of the server's slots; `first-audio`: from the slot to the first chunk in the "
              "server's process; `engine`: the pipeline's share of that, from the request "
              "reaching it to its first chunk (in an engine process, the rest is the pipe between "
              "the two); `admission`: the part of `engine` spent waiting for the engine to let it "
              "in (a free engine slot and an open admission gate); `outside`: the client's TTFA "
              "less `queue` and `first-audio`, spent before the server read the request or on the "
              "first bytes' way back.")
"""What the columns of `ttfa_parts` mean, for every report that prints them."""


def ttfa_parts(records: Sequence[RequestRecord]) -> list[dict]:
    """Per load point whose server split its time to first audio (`RequestRecord.server_ms`):
    TTFA and each part as 'p50 / p95 / max' ms over the requests that got audio, so a tail
    shows where it waited: for a slot, in the engine, or outside the server. Empty when no
    server sent a split."""
    points: dict[tuple[str, float], list[RequestRecord]] = {}
    for r in records:
        if r.server_ms and r.error is None and r.ttfa_s is not None:
            points.setdefault((r.shape, r.load), []).append(r)
    names = list(dict.fromkeys(name for rs in points.values() for r in rs for name in r.server_ms))
    rows = []
    for (shape, load), rs in points.items():
        parts = {"ttfa": [r.ttfa_s * 1e3 for r in rs], OUTSIDE: [
            r.ttfa_s * 1e3 - r.server_ms["queue"] - r.server_ms["first-audio"]
            for r in rs if {"queue", "first-audio"} <= r.server_ms.keys()]}
        parts |= {name: [r.server_ms[name] for r in rs if name in r.server_ms] for name in names}
        rows.append({"shape": shape, "load": load, "requests": len(rs),
                     **{f"{name} ms": _spread(values) for name, values in parts.items()}})
    return rows


def _spread(values: Sequence[float]) -> str:
    if not values:
        return ""
    p50, p95 = (percentile(values, q) for q in (50, 95))
    return f"{p50:.0f} / {p95:.0f} / {max(values):.0f}"


def summarize(records: Sequence[RequestRecord], shape: str, load: float,
              wall_s: float) -> PointSummary:
    """One load point; `wall_s` runs from the point's start to its last answer, so the
    throughput of an open-loop point is bounded by its arrival rate."""
    ok = [r for r in records if r.error is None]
    ttfa = [r.ttfa_s for r in ok if r.ttfa_s is not None]
    latency = [r.latency_s for r in ok]
    margins = [r.margin_s for r in ok if r.margin_s is not None]
    per_s = 1 / wall_s if wall_s > 0 else 0.0
    mid_streams, middle = middle_half(records)
    return PointSummary(
        shape=shape, load=load, requests=len(records), ok=len(ok),
        ttfa_p50_ms=_ms(ttfa, 50), ttfa_p95_ms=_ms(ttfa, 95), ttfa_p99_ms=_ms(ttfa, 99),
        latency_p50_ms=_ms(latency, 50), latency_p95_ms=_ms(latency, 95),
        latency_p99_ms=_ms(latency, 99),
        realtime_fraction=round(sum(r.realtime for r in records) / len(records), 3)
        if records else 0.0,
        mean_streams=round(sum(r.latency_s for r in records) * per_s, 2),
        mid_streams=None if mid_streams is None else round(mid_streams, 2),
        mid_ttfa_p95_ms=_ms([r.ttfa_s for r in middle if r.error is None
                             and r.ttfa_s is not None], 95),
        min_margin_s=round(min(margins), 3) if margins else None,
        requests_per_s=round(len(ok) * per_s, 3),
        audio_s_per_s=round(sum(r.audio_s for r in ok) * per_s, 3),
        lag_p99_ms=_ms([r.lag_s for r in records], 99), wall_s=round(wall_s, 2),
        errors=dict(Counter(r.error for r in records if r.error is not None)),
        step_p50_ms=median([r.step_ms for r in ok if r.step_ms is not None]),
        full=full_rates(records), slowed=slowed(records))


def median(values: Sequence[float]) -> float | None:
    """The median to 3 decimals; None for no values."""
    value = percentile(values, 50)
    return None if value is None else round(value, 3)


TABLE_COLUMNS = ("shape", "load", "requests", "ok", "ttfa_p50_ms", "ttfa_p95_ms", "ttfa_p99_ms",
                 "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "realtime_fraction",
                 "mean_streams", "mid_streams", "mid_ttfa_p95_ms", "requests_per_s",
                 "audio_s_per_s", "errors")


OPTIONAL_COLUMNS = ("step_p50_ms", "host_busy", "round_ms", "codec_lag_ms")
"""Columns some rows cannot fill: the step only a pipeline driven in this process, the serving
thread's work only where the benchmark can read it (`lab loadtest` cannot)."""


def table_rows(rows: Sequence[PointSummary]) -> list[dict]:
    """Rows for `markdown_table`: errors as one readable cell, and before them each of
    `OPTIONAL_COLUMNS` that some row knows."""
    known = tuple(c for c in OPTIONAL_COLUMNS if any(getattr(r, c) is not None for r in rows))
    columns = (*TABLE_COLUMNS[:-1], *known, TABLE_COLUMNS[-1])
    out = []
    for row in rows:
        data = dataclasses.asdict(row)
        data["errors"] = ", ".join(f"{k} {v}" for k, v in sorted(row.errors.items())) or "0"
        out.append({key: data[key] for key in columns})
    return out


def held(row: dict) -> bool:
    """Every request of the point (a `table_rows` row) got its audio, and every stream
    stayed in real time."""
    return row["requests"] > 0 and row["ok"] == row["requests"] and row["realtime_fraction"] >= 1


def load_words(shape: str, load: float) -> str:
    """A point's load as the report's remarks name it: arrivals a second for an open-loop
    shape, streams in flight for a closed one."""
    return f"{load:g}{'/s' if 'open' in shape else ' in flight'}"


def capacity(rows: Sequence[dict]) -> list[str]:
    """Per load shape, the highest point that `held`, with the streams it kept in flight (over
    the middle half where known) and its TTFA p95, then the lowest point that did not: the
    question a capacity sweep asks, answered from its `table_rows` (as reports keep them)."""
    lines = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        points = sorted((r for r in rows if r["shape"] == shape), key=lambda r: r["load"])
        kept = [r for r in points if held(r)]
        missed = [r for r in points if not held(r)]
        if kept:
            best = kept[-1]
            streams = best.get("mid_streams") or best["mean_streams"]
            line = (f"{shape}: every stream in real time up to {load_words(shape, best['load'])} "
                    f"({streams:.1f} streams in flight, TTFA p95 {best['ttfa_p95_ms']:.0f} ms)")
        else:
            line = f"{shape}: no point kept every stream in real time"
        if missed:
            first = missed[0]
            failed = first["requests"] - first["ok"]
            line += (f"; not at {load_words(shape, first['load'])}: "
                     f"{100 * first['realtime_fraction']:.1f}% "
                     "in real time" + (f", {failed} of {first['requests']} without audio"
                                       if failed else ""))
        lines.append(line)
    return lines


def result_of(meta: dict, rows: Sequence[PointSummary], records: Sequence[RequestRecord]
              ) -> dict:
    """What `lab loadtest` saves: its plan, one row per point and every request."""
    return {"meta": meta, "rows": [dataclasses.asdict(r) for r in rows],
            "requests": [dataclasses.asdict(r) for r in records]}


def write_json(path: Path, result: dict) -> None:
    """`result_of`'s report as the JSON that `write_markdown` reads back."""
    path.write_text(to_json(result) + "\n")


SLICE_S = 3.0
"""The width of the slices that reports follow open-loop points over time in."""


LAG_WARN_MS = 25.0
"""Requests started later than this after they were due (p99) mean the load generator's event
loop fell behind: a tenth of the 250 ms a first audio may take."""


def lag_lines(rows: Sequence[PointSummary]) -> list[str]:
    """A warning under the table for points where the load generator itself fell behind
    (`lag_p99_ms`), since what it measured there includes its own delay; nothing when it
    kept up."""
    late = [r for r in rows if r.lag_p99_ms is not None and r.lag_p99_ms > LAG_WARN_MS]
    if not late:
        return []
    points = ", ".join(f"{load_words(r.shape, r.load)} ({r.lag_p99_ms:.0f} ms)" for r in late)
    return ["", f"The load generator fell behind at {points}: it started requests that late "
                "after they were due (p99), so time to first audio and the real-time check "
                "there include its own delay. More sending processes (`lab loadtest "
                "--processes N`) keep it out of the measurement."]


HOST_BOUND = 0.85
"""A serving thread on host work for this share of a point or more has little time left to
wait for the device: the device waits for it instead."""


def host_lines(rows: Sequence[PointSummary]) -> list[str]:
    """A remark under the table for points whose serving thread was `HOST_BOUND` (read where
    the benchmark could read the thread's counters), since there a faster GPU would not have
    helped; nothing elsewhere."""
    bound = [r for r in rows if r.host_busy is not None and r.host_busy >= HOST_BOUND]
    if not bound:
        return []
    points = ", ".join(f"{load_words(r.shape, r.load)} ({100 * r.host_busy:.0f}%"
                       + (f", {r.round_ms:.1f} ms rounds)" if r.round_ms else ")")
                       for r in bound)
    return ["", f"The serving thread was on host work nearly all the time at {points}: "
                "Python on the host, not the device, set the streams' pace there, so less "
                "host work per stream and round would raise what it serves, a faster GPU "
                "would not."]


def at_ceiling(row: PointSummary) -> bool:
    """An open-loop point that kept its server full for a while (`full_rates`) and finished
    fewer requests a second than arrived meanwhile: its backlog grew. One that finished as many
    was full only in bursts, and its ceiling lies higher than what it finished."""
    if row.full is None or "open" not in row.shape:
        return False
    _, _, arrived, served = row.full
    return served < arrived


def ceiling_lines(rows: Sequence[PointSummary]) -> list[str]:
    """A remark under the table for open-loop points that ran at their server's ceiling: what
    it finished a second there, against what arrived, is the rate a user can plan under;
    nothing where every point kept up. Each point names its shape where several servers'
    rows ran full (a sweep over slot counts)."""
    over = [r for r in rows if at_ceiling(r)]
    if not over:
        return []
    points = "; ".join(
        f"{_named(r, over)}at {load_words(r.shape, r.load)}, for {span:.1f} s "
        f"from {start:.1f} s it finished {_finished_words(served, arrived)} arrived"
        for r in over for start, span, arrived, served in [r.full])
    return ["", "Full, the server finished what its slots carry, its ceiling for these texts "
                "(requests waited for a slot, its own or the engine's, or were refused): "
                f"{points}. Arrivals at or above that rate leave any burst's backlog in place "
                "for as long as they go on, so plan for a rate below it, with room for bursts."]


SLOWED_SHARE = 0.05
"""Streams slowed in this share of a point's requests or more mean the server took in more
streams than its rounds carry, not that a few met an unlucky stretch."""


def slowed_lines(rows: Sequence[PointSummary]) -> list[str]:
    """A remark under the table for points where `SLOWED_SHARE` of the streams ran dry well
    after their first audio: the server let in more streams than it keeps in real time, and
    what helps is making new arrivals wait, not a faster first piece; nothing elsewhere."""
    over = [r for r in rows if r.slowed and r.slowed >= SLOWED_SHARE * r.requests]
    if not over:
        return []
    points = "; ".join(f"{_named(r, over)}at {load_words(r.shape, r.load)} {r.slowed:,} of "
                       f"{r.requests:,}" + (f" ({r.round_ms:.1f} ms rounds)" if r.round_ms else "")
                       for r in over)
    return ["", f"Slowed, streams ran dry {SLOWED_AFTER_S:g} s or more after their first audio: "
                f"{points}. The server took in more streams than its rounds carry in real time, "
                "so each new stream slowed those already playing. Fewer slots (`lab serve "
                "--slots N`) or, for an engine of its own, a round ceiling (`--set "
                "admit_round_ms=MS`) make new arrivals wait instead (docs/serving.md, \"Sizing "
                "a GPU server\")."]


def _named(row: PointSummary, rows: Sequence[PointSummary]) -> str:
    """The row's shape and a space where the rows are of several servers (a sweep over slot
    counts or ceilings), else nothing: one server's rows need no names."""
    return row.shape + " " if len({r.shape for r in rows}) > 1 else ""


def server_lines(rows: Sequence[PointSummary]) -> list[str]:
    """The remarks on what the server did, in one order wherever they show: where it was full,
    where it slowed its streams, and where its serving thread set the pace."""
    return ceiling_lines(rows) + slowed_lines(rows) + host_lines(rows)


def remark_lines(rows: Sequence[PointSummary]) -> list[str]:
    """Every remark a report gives under its table, for the CLI, the file and the app: where
    the load generator fell behind, then `server_lines`."""
    return lag_lines(rows) + server_lines(rows)


def _finished_words(served: float, arrived: float) -> str:
    """'8.3 a second while 10.0', in two decimals where one would show a backlog that grew
    as none ('1.7 while 1.7')."""
    digits = 1 if f"{served:.1f}" != f"{arrived:.1f}" else 2
    return f"{served:.{digits}f} a second while {arrived:.{digits}f}"


def capacity_lines(rows: Sequence[dict]) -> list[str]:
    """`capacity` as a report's lines under its table; nothing without rows."""
    if not rows:
        return []
    return ["", "Capacity, the highest load that kept every stream in real time:", "",
            *(f"- {line}" for line in capacity(rows))]


def ttfa_split(records: list[RequestRecord]) -> list[str]:
    """Each served point's time to first audio split by the server's `Server-Timing`
    (`ttfa_parts`); nothing for files from before the server sent it."""
    rows = ttfa_parts(records)
    if not rows:
        return []
    return ["", "## Where the time to first audio went", "", f"Per served point, {TTFA_PARTS}",
            "", markdown_table(rows)]


def dry_streams(records: Sequence[RequestRecord]) -> list[dict]:
    """Per load point with any, the streams whose audio came but whose player ran dry: how far
    short it fell ('p50 / max' ms) and when (seconds after the first audio, 'min / p50 / max'),
    so a point's real-time misses read as first pieces too short (early) or as slow stretches
    of the server (later)."""
    points: dict[tuple[str, float], list[RequestRecord]] = {}
    for r in records:
        if r.error is None and r.margin_s is not None and r.margin_s < 0:
            points.setdefault((r.shape, r.load), []).append(r)
    totals = Counter((r.shape, r.load) for r in records)
    rows = []
    for (shape, load), dry in points.items():
        short = [-r.margin_s * 1e3 for r in dry]
        when = sorted(r.tightest_s for r in dry if r.tightest_s is not None)
        rows.append({"shape": shape, "load": load, "requests": totals[(shape, load)],
                     "dry": len(dry),
                     "short ms": f"{percentile(short, 50):.0f} / {max(short):.0f}",
                     "when s": f"{when[0]:.2f} / {percentile(when, 50):.2f} / {when[-1]:.2f}"
                     if when else ""})
    return rows


def dry_lines(records: list[RequestRecord]) -> list[str]:
    """`dry_streams` as a report section; nothing where every stream kept up."""
    rows = dry_streams(records)
    if not rows:
        return []
    return ["", "## Streams that ran dry", "",
            "Per point, the streams whose audio came but whose player ran out of it: `short "
            "ms`, by how much ('p50 / max'); `when s`, seconds after their first audio "
            "('min / p50 / max'; empty in files from before it was kept). Early means the "
            "first piece held too little to cover the wait for the next, later a slow stretch "
            "of the server.", "", markdown_table(rows)]


def timelines(records: list[RequestRecord], width_s: float = SLICE_S) -> list[str]:
    """Per open-loop point, its requests by arrival slice (`over_time`):
    whether a tail came from one burst of arrivals or from the whole point."""
    parts = []
    for (shape, load), point in open_points(records).items():
        rows = [{"arrived_s": f"{w.start_s:g}-{w.start_s + width_s:g}",
                 **{k: v for k, v in dataclasses.asdict(w).items() if k != "start_s"}}
                for w in over_time(point, width_s)]
        parts += [f"### {shape} {load:g}/s over time", "", markdown_table(rows), ""]
    if not parts:
        return []
    return ["", f"## Over time: open-loop points by {width_s:g} s of arrivals", "",
            "Each row holds the requests that arrived in its slice: their arrival rate, the "
            "streams in flight on average during the slice, their TTFA and the share that "
            "stayed real time. Poisson arrivals bunch: a slice above the mean rate builds up "
            "streams, and the TTFA of the slices during and after it rises.", "", *parts]


def write_markdown(path: Path, result: dict) -> None:
    """`lab loadtest`'s report from its JSON alone (`result`), so remarks added to the JSON's
    `notes` survive a rewrite: the commands, the table, the notes, then where the time to
    first audio went and each open-loop point over time."""
    meta = result["meta"]
    records = [RequestRecord(**r) for r in result.get("requests", [])]
    rows = with_slowed(records, [PointSummary(**r) for r in result["rows"]])
    server = meta.get("server_command")
    lines = [f"# Load test of {meta.get('url')} ({meta.get('device', '?')})", "",
             *([f"Server: `{server}`", ""] if server else []),
             f"Load: `{meta.get('command')}`", "",
             f"- torch {meta.get('torch', '?')}, Python {meta.get('python', '?')}; "
             f"{meta.get('date', '')}",
             f"- Model `{meta.get('model') or '(the server default)'}`, voice "
             f"`{meta.get('voice')}`, format {meta.get('format')}",
             "", markdown_table(table_rows(rows)), *capacity_lines(table_rows(rows)),
             *remark_lines(rows), "",
             "\n\n".join(result.get("notes", [])),
             *ttfa_split(records), *dry_lines(records), *timelines(records)]
    path.write_text("\n".join(lines) + "\n")


def with_slowed(records: Sequence[RequestRecord],
                 rows: list[PointSummary]) -> list[PointSummary]:
    """Rows of a file saved before they counted `slowed` get it from their point's records,
    so a rewritten report says where the server slowed its streams whenever it can."""
    points: dict[tuple[str, float], list[RequestRecord]] = {}
    for r in records:
        points.setdefault((r.shape, r.load), []).append(r)
    return [row if row.slowed is not None else
            dataclasses.replace(row, slowed=slowed(points.get((row.shape, row.load), [])))
            for row in rows]


def write_html(path: Path, rows: Sequence[PointSummary], title: str,
               records: Sequence[RequestRecord] = ()) -> None:
    """A self-contained page: plotly.js is inlined, so it opens offline and travels alone.
    Below the sweep, the open-loop points over time, where `records` hold any."""
    figures = [figure(rows, title)]
    timeline = timeline_figure(records, SLICE_S)
    figures += [timeline] if timeline is not None else []
    parts = [fig.to_html(include_plotlyjs=i == 0, full_html=False)
             for i, fig in enumerate(figures)]
    path.write_text(f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                    "</head><body>"
                    + "".join(parts) + "</body></html>\n")


def figure(rows: Sequence[PointSummary], title: str):
    """Per load shape, against the load: TTFA p50/p95, the share of streams at real time,
    and the errors stacked by kind (a zero bar when there were none, so a blank panel never
    has to be read as 'no data')."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    shapes = list(dict.fromkeys(r.shape for r in rows))
    titles = [f"{name} ({SHAPE_AXES.get(shape, shape)})" for shape in shapes
              for name in ("TTFA ms", "streams at real time", "errors")]
    fig = make_subplots(rows=max(1, len(shapes)), cols=3, subplot_titles=titles)
    for i, shape in enumerate(shapes, start=1):
        points = [r for r in rows if r.shape == shape]
        x = [r.load for r in points]
        for q in ("p50", "p95"):
            fig.add_trace(go.Scatter(x=x, y=[getattr(r, f"ttfa_{q}_ms") for r in points],
                                     mode="lines+markers", name=f"{shape} TTFA {q}"), i, 1)
        fig.add_trace(go.Scatter(x=x, y=[r.realtime_fraction for r in points],
                                 mode="lines+markers", name=f"{shape} real time"), i, 2)
        fig.update_yaxes(range=[0, 1.05], row=i, col=2)
        for kind in sorted({k for r in points for k in r.errors}) or ["none"]:
            fig.add_trace(go.Bar(x=x, y=[r.errors.get(kind, 0) for r in points],
                                 name=f"{shape} errors: {kind}"), i, 3)
    fig.update_layout(title=title, barmode="stack", height=360 * max(1, len(shapes)))
    return fig


def timeline_figure(records: Sequence[RequestRecord], width_s: float):
    """Per open-loop point, against arrival time in slices of `width_s` (`over_time`): the
    arrival rate, the streams in flight, and TTFA p50/p95. None without open-loop records.
    Its sweep figure gives one p95 per point; this shows whether a burst made it."""
    import plotly.colors
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    points = open_points(records)
    if not points:
        return None
    fig = make_subplots(rows=1, cols=3, subplot_titles=(
        "arrivals per second", "streams in flight", "TTFA ms (p50 dotted, p95 solid)"))
    palette = plotly.colors.qualitative.Plotly
    for i, ((_, load), point) in enumerate(sorted(points.items())):
        windows = over_time(point, width_s)
        x = [w.start_s + width_s / 2 for w in windows]
        series = [("arrivals", 1, "solid", [w.arrivals_per_s for w in windows]),
                  ("streams", 2, "solid", [w.streams for w in windows]),
                  ("TTFA p50", 3, "dot", [w.ttfa_p50_ms for w in windows]),
                  ("TTFA p95", 3, "solid", [w.ttfa_p95_ms for w in windows])]
        for what, col, dash, y in series:  # one colour per load point across the panels
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=f"{load:g}/s {what}",
                                     legendgroup=f"{load:g}",
                                     line={"dash": dash, "color": palette[i % len(palette)]}),
                          1, col)
    fig.update_xaxes(title_text=f"arrival time, s (slices of {width_s:g} s)")
    fig.update_layout(title="Open-loop points over time", height=380)
    return fig
