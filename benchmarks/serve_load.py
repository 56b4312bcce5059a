"""A preset served over HTTP under load, beside the status quo: one request at a time.

    python benchmarks/serve_load.py --preset cpu-default --threads 2 --out benchmarks/results

In one run, on the same sentences (drawn with a seed from the lab's sentence sets):

1. Status quo: the preset's pipeline in this process streams the sentences one at a time,
   with no server, so its rows are what the lab offered before it could serve. With
   `--in-process-rates`, the same pipeline then takes Poisson arrivals without a server (one
   thread per request), so the gap to the served rows at the same rate is what HTTP costs.
   With `--static-rates`, the preset with static batching (a batch admitted only when the
   previous one has finished, as serving stacks did before continuous batching) takes the
   same Poisson arrivals in this process, at most `--static-slots` a batch. Without
   `--in-process-rates` the one-at-a-time pipeline is built with one slot.
2. `lab serve --preset P --port 0` starts in a child process on 127.0.0.1 with its threads
   pinned, and loads and warms its own pipeline. With `--servers one-process,engine-process`
   a second server follows the first, with `--engine-process` (its pipeline in a process of
   its own); its rows' shapes start with "engine process". With `--slots 128,192,256`, one
   server per slot count follows another, each in every `--servers` mode, their rows' shapes
   starting with their slots ("192 slots open"): the same arrivals against each size on one
   machine, so the report's "Full" remark shows which finishes the most once full. With
   `--admit-round-ms 0,7,10`, one server per round ceiling (the config's `admit_round_ms`, 0
   off) follows another in the same way, for every slot count ("7 ms ceiling open").
3. `lab loadtest`'s client (`lab.bench.loadtest`) runs the closed-loop sweep (N streams in
   flight), then the open-loop Poisson sweep (arrivals at a rate, never waiting).
4. The server is stopped with SIGTERM, which drains the requests in flight.

Every row is measured the same way: time to first audio from when the request was due,
latency, and whether a player fed by the stream would have run dry (`lab.bench.playback`).
The in-process rows of an autoregressive family also give `step_p50_ms`, the median over
requests of the decode step each one waited on: the figure to set beside
`orpheus_streams.py`'s step times for the engine driven alone at the same rate. Every row
gives `host_busy`, the share of its wall time the pipeline's serving thread spent on host work
(in rounds, less its waits for the device's tokens), and `round_ms`, its mean round: near 1,
Python on the host, not the device, set the pace. A served row reads them from the server's
`/metrics` as the point starts and ends.
The status quo runs before the server starts, so the two never share the cores. Writes
<stem>.json (every request) and <stem>.md. Hand-written remarks go in the JSON's `notes` and
`anomalies` lists, so a rewritten report keeps them; `--render` rewrites the markdown from
the JSON alone.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import NamedTuple

import httpx

from lab.bench.host_work import with_host_work
from lab.bench.in_process import one_in_process, open_in_process, thread_clock
from lab.bench.load_report import (
    LAG_WARN_MS,
    PointSummary,
    RequestRecord,
    capacity_lines,
    dry_lines,
    server_lines,
    summarize,
    table_rows,
    timelines,
    ttfa_split,
    with_slowed,
)
from lab.bench.loadtest import LoadPlan, LoadResult, SpeechTarget, draw_texts, run_load
from lab.bench.report import anomaly_lines, command_line, markdown_table, run_meta, write_json
from lab.config import PipelineConfig, load_preset, parse_overrides
from lab.metrics.repeats import pinned_threads
from lab.models.registry import family
from lab.pipeline import Pipeline
from lab.serve.child import ServeProcess
from lab.serve.server import SWITCH_INTERVAL_MS, hand_over_lock

PARTIAL = ("Partial: saved before the run's last load point ended; a run that completes "
           "replaces it.")
NOTES = [
    "ttfa and latency run from when a request was due (its arrival time in the open loop, the "
    "end of the previous request in the closed loop), so queueing in the server and any lag "
    "of the load generator count. realtime_fraction is the share of all requests whose "
    "stream never ran dry (a failed request did not stay real time); percentiles are over "
    "requests that got their audio, so a point of a few dozen requests gives a coarse p99.",
    "The load generator and the server share this machine's cores; on a CPU the client's "
    "share is small (it only counts bytes), but it is not zero.",
]


def status_quo(cfg: PipelineConfig, plan: LoadPlan, rates: tuple[float, ...]
               ) -> tuple[list[PointSummary], list[RequestRecord]]:
    """The preset's pipeline in this process, no server, on the same sentences, timed as the
    load generator times a request so its rows compare with the served ones.

    First the sentences one at a time (what the lab offered before it could serve), then,
    for each of `rates`, the open-loop Poisson point with every request read on one event
    loop: the pipeline's worker under the server's load shape without HTTP, so the gap
    between these rows and the served ones is what the server itself costs. Without `rates`
    the pipeline is built with one slot (`status_quo_config`).
    """
    pipe = _built(status_quo_config(cfg, rates), "status quo")
    try:
        before = thread_clock(pipe)
        records, wall_s = _one_at_a_time(pipe, plan)
        alone = with_host_work(summarize(records, "in-process", 1, wall_s), before,
                               thread_clock(pipe))
        open_rows, open_records = _open_points(pipe, plan, rates, "in-process open")
    finally:
        pipe.close()
    return [alone, *open_rows], records + open_records


def _said(part: str) -> Callable[[str], None]:
    """A line of set-up on stderr as it happens, named for the `part` of the run it is from:
    on a GPU each pipeline and server takes minutes to build, and a run that says nothing
    meanwhile cannot be told from a hung one."""
    return lambda message: print(f"[{part}] {message}", file=sys.stderr, flush=True)


def _built(cfg: PipelineConfig, part: str) -> Pipeline:
    """The pipeline for `part` of the status quo, its set-up stages said as they go."""
    return Pipeline(cfg, on_stage=_said(part))


def status_quo_config(cfg: PipelineConfig, rates: tuple[float, ...]) -> PipelineConfig:
    """The preset for the in-process rows: with no Poisson `rates` they are one request at a
    time, so one slot, as a pipeline serving one request never fills another, and on a GPU
    every batch size up to the preset's captures graphs of its own (minutes for a few hundred
    slots, more than the status quo's points take)."""
    return cfg if rates else cfg.replace(batch_size=1)


def static_config(cfg: PipelineConfig, slots: int | None) -> PipelineConfig:
    """The preset with static batching, at most `slots` a batch (None: the preset's batch
    size)."""
    return cfg.replace(continuous_batching=False, batch_size=slots or cfg.batch_size)


STATIC_SHAPE = "in-process static open"


def static_batching(cfg: PipelineConfig, plan: LoadPlan, rates: tuple[float, ...],
                    slots: int | None = None) -> tuple[list[PointSummary], list[RequestRecord]]:
    """The preset with static batching, no server, under each of `rates`: the status quo of
    serving stacks before continuous batching, on the same arrivals and sentences. `slots`,
    if given, caps its batches instead of the preset's batch size: a batch holds what arrived
    while the one before ran, few at the rates static batching keeps up with, and a smaller
    cap captures fewer graphs."""
    if not rates:
        return [], []
    pipe = _built(static_config(cfg, slots), "static batching")
    try:
        return _open_points(pipe, plan, rates, STATIC_SHAPE)
    finally:
        pipe.close()


SWEEPS = (("static_rates", "continuous_batching",
           "continuous batching to compare with static batching"),
          ("admit_round_ms", "admit_round_ms", "round ceiling to sweep"))
"""Options that compare settings of one knob: (option, knob, what a family must have)."""


def check_sweeps(cfg: PipelineConfig, args: argparse.Namespace) -> None:
    """Refuse a comparison over a knob the family ignores, before anything loads."""
    fam = family(cfg.family)
    for option, knob, what in SWEEPS:
        if getattr(args, option) and not fam.supports(knob):
            flag = "--" + option.replace("_", "-")
            raise SystemExit(f"{flag}: {cfg.family} has no {what}: {fam.unsupported[knob]}")
    if args.static_slots and not args.static_rates:
        raise SystemExit("--static-slots: give --static-rates too (the static rows it caps)")


def _one_at_a_time(pipe: Pipeline, plan: LoadPlan) -> tuple[list[RequestRecord], float]:
    async def run() -> list[RequestRecord]:
        records = []
        for text in draw_texts(plan.texts, plan.requests, plan.seed):
            if time.perf_counter() >= start + plan.duration_s:
                break
            records.append(await one_in_process(pipe, text, time.perf_counter(), "in-process",
                                                 1, start))
        return records

    start = time.perf_counter()
    records = asyncio.run(run())
    return records, time.perf_counter() - start


def _open_points(pipe: Pipeline, plan: LoadPlan, rates: tuple[float, ...], shape: str
                 ) -> tuple[list[PointSummary], list[RequestRecord]]:
    """Each of `rates` as an open-loop point against the pipeline, its rows marked `shape`."""
    rows, records = [], []
    for rate in rates:
        before = thread_clock(pipe)
        point, wall_s = open_in_process(pipe, plan, rate, shape)
        rows.append(with_host_work(summarize(point, shape, rate, wall_s), before,
                                   thread_clock(pipe)))
        records += point
    return rows, records


def serve(preset: str, overrides: list[str], threads: int, slots: int | None,
          queue: int, switch_interval_ms: float, engine_process: bool) -> ServeProcess:
    """`lab serve` for the preset on a free loopback port, its threads pinned."""
    args = ["--preset", preset, "--host", "127.0.0.1", "--port", "0", "--queue", str(queue),
            "--switch-interval", f"{switch_interval_ms:g}"]
    args += ["--engine-process" if engine_process else "--no-engine-process"]
    args += [arg for pair in overrides for arg in ("--set", pair)]
    args += ["--slots", str(slots)] if slots else []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    return ServeProcess(args, env=env, on_start_line=_said("server"))


def anomalies_of(rows: list[dict], fallbacks: list[str]) -> list[str]:
    """What the run itself says is off: a load generator that fell behind, and every
    fallback the server reported (a slower path than its preset asks for)."""
    late = [r for r in rows if (r.get("lag_p99_ms") or 0) > LAG_WARN_MS]
    return [*(f"The load generator sent requests late at {r['shape']} {r['load']:g} (lag p99 "
              f"{r['lag_p99_ms']:.0f} ms); that lag is inside those rows' ttfa "
              "(over HTTP, --processes N sends from more processes)." for r in late),
            *(f"The server fell back: {note}" for note in fallbacks)]


def header(result: dict) -> list[str]:
    """Command, device, weights, threads, baseline and anomalies, before any number."""
    meta, server = result["meta"], result.get("server", {})
    plan = meta.get("plan", {})
    lines = [f"Command: `{meta['command']}`", "",
             f"- Device: {meta.get('device', '?')}; torch {meta.get('torch', '?')}, "
             f"Python {meta.get('python', '?')}; {meta.get('date', '')}",
             f"- Preset: `{meta.get('preset')}`"
             + (f" with `{meta['overrides']}`" if meta.get("overrides") else "")
             + f"; weights: {meta.get('weights')}",
             f"- Threads: {meta.get('threads')} intra-op threads in the server process and "
             "in the in-process pipeline" + _lock(meta),
             _server_line(meta, server),
             f"- Load: at most {plan.get('requests')} requests and {plan.get('duration_s')} s "
             f"per point, request timeout {meta.get('timeout_s')} s, {plan.get('warmup')} "
             f"warm-up request(s); sentences from {', '.join(plan.get('texts', []))}, "
             f"seed {plan.get('seed')}",
             f"- Baseline: {result.get('baseline')}"]
    return lines + anomaly_lines(result)


def _server_line(meta: dict, server: dict) -> str:
    """The server's shape, or that a partial run stopped before it started."""
    if server.get("slots") is None:
        return "- Server: not started; the run stopped before it (in-process rows only)"
    sweeps = [f"{what} ({', '.join(f'{v:g}' for v in values)})"
              for what, values in (("slot count", meta.get("slots") or []),
                                   ("round ceiling in ms", meta.get("admit_round_ms") or []))
              if len(values) > 1]
    if sweeps:
        return (f"- Servers: one per {' and '.join(sweeps)}, in turn, each row named for its "
                f"server's; queue {server.get('queue')}, model `{meta.get('model')}`, "
                f"format {meta.get('format')}")
    where = ("; the 'engine process' rows from a server whose pipeline runs in a process of "
             "its own (`lab serve --engine-process`), after the other's"
             if "engine-process" in meta.get("servers", []) else "")
    return (f"- Server: {server['slots']} slots, queue {server.get('queue')}, model "
            f"`{meta.get('model')}`, format {meta.get('format')}{where}")


def _lock(meta: dict) -> str:
    """Files from before the knob ran at Python's default, 5 ms."""
    interval = meta.get("switch_interval_ms", 5)
    return f"; Python's lock changes hands every {interval:g} ms at most in both"


def write(result: dict, out: Path, stem: str) -> None:
    write_json(result, out, stem)
    records = [RequestRecord(**r) for r in result.get("requests", [])]
    parts = [f"# Serving under load ({result['meta'].get('device', '')})", *header(result), "",
             markdown_table(result["table"]), *capacity_lines(result["table"]),
             *_remarks(result["rows"], records), "",
             "\n\n".join(result.get("notes", [])),
             *ttfa_split(records), *dry_lines(records), *timelines(records)]
    (out / f"{stem}.md").write_text("\n".join(parts) + "\n")


def _remarks(rows: list[dict], records: list[RequestRecord]) -> list[str]:
    """The load report's remarks on the server (`server_lines`; the header says where the
    generator fell behind); none for a file from before rows kept `full`, whose rows lack
    fields a summary needs."""
    if not rows or any("full" not in r for r in rows):
        return []
    return server_lines(with_slowed(records, [PointSummary(**r) for r in rows]))


SERVERS = {"one-process": "", "engine-process": "engine process "}
"""Each way `lab serve` can hold its pipeline, and the prefix of its rows' shapes."""


def measure(args: argparse.Namespace, plan: LoadPlan, save: Callable[[dict], None]) -> dict:
    """Status quo, then the served sweeps (one server per `--servers` mode, `--slots` count
    and `--admit-round-ms` ceiling, in turn), on the same sentences; the report's content. A
    partial report is handed to `save` after the status quo and after each served point, so a
    run stopped midway (a time limit on a lent GPU) keeps what it measured."""
    cfg = load_preset(args.preset, **parse_overrides(args.set))
    check_sweeps(cfg, args)
    hand_over_lock(args.switch_interval)
    with pinned_threads(args.threads) as threads:
        local_rows, local = status_quo(cfg, plan, args.in_process_rates)
        static_rows, static = static_batching(cfg, plan, args.static_rates,
                                              args.static_slots)
    rows, records = [*local_rows, *static_rows], [*local, *static]
    draft = functools.partial(report, args, plan, cfg, threads)
    save(draft(LoadResult(None, rows, records, []), {}, PARTIAL))
    target, ready = None, {}
    for shape in itertools.product(args.servers, args.slots or (None,),
                                   args.admit_round_ms or (None,)):
        before = LoadResult(None, rows, records, [])
        target, ready, served = served_sweep(args, plan, threads, ServerShape(*shape),
                                             functools.partial(_save_partial, save, draft,
                                                               before))
        rows, records = [*rows, *served.rows], [*records, *served.records]
    return draft(LoadResult(target, rows, records, []), ready, None)


def _save_partial(save: Callable[[dict], None], draft: Callable[..., dict], before: LoadResult,
                  done: LoadResult, ready: dict) -> None:
    """Save what was measured `before` a server and by it so far, as a partial report."""
    save(draft(LoadResult(done.target, [*before.rows, *done.rows],
                          [*before.records, *done.records], []), ready, PARTIAL))


class ServerShape(NamedTuple):
    """One server of a run: how it holds its pipeline (`SERVERS`), its slots and its round
    ceiling (None: the memory plan's slots, the preset's ceiling)."""

    mode: str
    slots: int | None
    round_ms: float | None

    def overrides(self, given: list[str]) -> list[str]:
        """The run's `--set` pairs, with this server's ceiling last so that it wins."""
        return given + ([] if self.round_ms is None else [f"admit_round_ms={self.round_ms:g}"])

    def prefix(self, args: argparse.Namespace) -> str:
        """Its rows' shape prefix: the mode's, then what the run sweeps over."""
        slots = _slots_words(self.slots) + " " if len(args.slots) > 1 else ""
        ceiling = _ceiling_words(self.round_ms) + " " if len(args.admit_round_ms) > 1 else ""
        return SERVERS[self.mode] + slots + ceiling


def served_sweep(args: argparse.Namespace, plan: LoadPlan, threads: int, shape: ServerShape,
                 on_point: Callable[[LoadResult, dict], None]
                 ) -> tuple[SpeechTarget, dict, LoadResult]:
    """`lab serve` in `shape` under the plan's points: its target, its /ready answer, and its
    rows (with the server's serving thread's host work, from /metrics) and requests, their
    shapes prefixed with the server's (`ServerShape.prefix`)."""
    server = serve(args.preset, shape.overrides(args.set), threads, shape.slots, args.queue,
                   args.switch_interval, shape.mode == "engine-process")
    prefix = shape.prefix(args)
    try:
        ready = httpx.get(f"{server.url}/ready", trust_env=False, timeout=10).json()
        target = SpeechTarget(f"{server.url}/v1/audio/speech", "", ready["voices"][0], args.format,
                              ready.get("sample_rate", 22050), args.timeout)
        loaded = asyncio.run(run_load(
            target, plan, lambda done: on_point(_prefixed(done, prefix), ready)))
    finally:
        server.stop(timeout_s=60)
    if loaded.unmeasured:
        raise RuntimeError(loaded.unmeasured)
    return loaded.target, ready, _prefixed(loaded, prefix)


def _slots_words(slots: int) -> str:
    return f"{slots} slot" + ("s" if slots != 1 else "")


def _ceiling_words(round_ms: float) -> str:
    return f"{round_ms:g} ms ceiling" if round_ms else "no ceiling"


def _prefixed(result: LoadResult, prefix: str) -> LoadResult:
    return replace(result, rows=[replace(r, shape=prefix + r.shape) for r in result.rows],
                   records=[replace(r, shape=prefix + r.shape) for r in result.records])


def report(args: argparse.Namespace, plan: LoadPlan, cfg: PipelineConfig, threads: int,
           measured: LoadResult, ready: dict, partial: str | None) -> dict:
    """The report of what was measured so far: `measured`'s rows and requests (its target
    None before the server is up), the server's /ready answer, and why it is `partial`."""
    row_dicts = [asdict(r) for r in measured.rows]
    target = asdict(measured.target) if measured.target else {}
    meta = run_meta(command=args.command, preset=args.preset,
                    overrides=" ".join(args.set), threads=threads,
                    switch_interval_ms=args.switch_interval,
                    servers=list(args.servers), slots=list(args.slots),
                    admit_round_ms=list(args.admit_round_ms),
                    weights=f"{cfg.weights} ({cfg.family}:{cfg.model})",
                    **target, plan=asdict(plan))
    return {"meta": meta, "server": {k: ready.get(k) for k in ("slots", "queue", "startup_ms",
                                                                "fallbacks")},
            "baseline": baseline(args, cfg),
            "anomalies": ([partial] if partial else [])
            + anomalies_of(row_dicts, ready.get("fallbacks") or []), "notes": NOTES,
            "rows": row_dicts,
            "table": table_rows(measured.rows),
            "requests": [asdict(r) for r in measured.records]}


def baseline(args: argparse.Namespace, cfg: PipelineConfig) -> str:
    """What the in-process rows are, with the slots each pipeline was built with."""
    slots = static_config(cfg, args.static_slots).batch_size
    return ("the in-process row: the preset's pipeline in this process, one request at a "
            "time, no server, the same sentences"
            + ("; the in-process open rows: the same pipeline under the same Poisson arrivals "
               "without HTTP" if args.in_process_rates else " (built with one slot)")
            + ("; the in-process static rows: the preset with static batching (a batch "
               "admitted only when the previous one has finished, at most "
               f"{slots} a batch) under the same arrivals" if args.static_rates else ""))


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a count of 1 or more")
    return int(text)


def _rates(text: str) -> tuple[float, ...]:
    return tuple(float(r) for r in text.split(",") if r)


def _distinct(kind: type, least: float, what: str) -> Callable[[str], tuple]:
    """A parser of a comma-separated list of distinct `kind` values of `least` or more, whose
    error names `what` it wants."""
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(v) for v in text.split(","))
        except ValueError:
            values = ()
        if not values or min(values) < least or len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r}: give distinct {what}")
        return values
    return parse


def _servers(text: str) -> tuple[str, ...]:
    modes = tuple(text.split(","))
    unknown = [m for m in modes if m not in SERVERS]
    if unknown or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"{text!r}: name each of {list(SERVERS)} at most once")
    return modes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="cpu-default")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--rates", default="0.25,0.5,1,2",
                        help="Poisson arrivals per second (the default voice on 2 CPU cores "
                             "serves about one short sentence a second)")
    parser.add_argument("--in-process-rates", type=_rates, default=(),
                        help="also these Poisson rates against the pipeline in this process, "
                             "without the server (what HTTP adds is the difference)")
    parser.add_argument("--static-rates", type=_rates, default=(),
                        help="also these Poisson rates against the preset with static "
                             "batching, in this process (the status quo before continuous "
                             "batching)")
    parser.add_argument("--static-slots", type=_count, default=None, metavar="N",
                        help="the static rows' largest batch (default: the preset's "
                             "batch_size); fewer slots capture fewer graphs on a GPU")
    parser.add_argument("--requests", type=int, default=32, help="most requests per point")
    parser.add_argument("--duration", type=float, default=60.0, help="most seconds per point")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--texts", default="short,medium")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=1,
                        help="processes that send each point over HTTP (`lab loadtest "
                             "--processes`): one falls behind past a few hundred streams")
    parser.add_argument("--format", default="pcm", choices=("pcm", "wav", "sse"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slots", type=_distinct(int, 1, "slot counts of 1 or more, e.g. 192 "
                                                         "or 128,192,256"), default=(),
                        help="the server's slots (default: its memory plan's); several, e.g. "
                             "128,192,256, start one server per count in turn")
    parser.add_argument("--admit-round-ms", type=_distinct(float, 0, "round ceilings in ms, 0 or "
                                                           "more (0: off), e.g. 7 or 0,7,10"),
                        default=(), metavar="MS",
                        help="the engine's round ceiling (the config's admit_round_ms, 0 off; "
                             "default: the preset's); several, e.g. 0,7,10, start one server "
                             "per ceiling in turn, for every slot count")
    parser.add_argument("--queue", type=int, default=16)
    parser.add_argument("--switch-interval", type=float, default=SWITCH_INTERVAL_MS,
                        metavar="MS", help="how long a thread may keep Python's lock while "
                                           "another waits, in the server and in this process")
    parser.add_argument("--servers", type=_servers, default=("one-process",),
                        help="how each server in turn holds its pipeline, e.g. "
                             "one-process,engine-process (engine-process: `lab serve "
                             "--engine-process`, the pipeline in a process of its own)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--stem", default="serve_load_cpu")
    parser.add_argument("--render", action="store_true",
                        help="rewrite <stem>.md from <stem>.json; measure nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.command = command_line(["python", "benchmarks/serve_load.py", *argv])
    if args.render:
        write(json.loads((args.out / f"{args.stem}.json").read_text()), args.out, args.stem)
        return
    plan = LoadPlan(tuple(int(c) for c in args.concurrency.split(",") if c),
                    _rates(args.rates), args.requests,
                    args.duration, tuple(args.texts.split(",")), args.seed, args.warmup,
                    args.processes)
    result = measure(args, plan, lambda draft: write(draft, args.out, args.stem))
    write(result, args.out, args.stem)
    print(markdown_table(result["table"]))
    print(f"wrote {args.out / args.stem}.json and .md")


if __name__ == "__main__":
    main()
