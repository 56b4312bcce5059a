"""The same load against 1 replica and against 2, behind Ray Serve, in one run.

    python benchmarks/serve_replicas.py --preset cpu-default --replicas 1,2 --concurrency 4
    python benchmarks/serve_replicas.py --preset orpheus-3b-dummy-gpu --replicas 1,2 --rates 30,60

For each replica count, `lab.serve.replicas.LabReplicas` starts a fresh local Ray cluster on
127.0.0.1 with that many replicas of the preset (each loads and warms up its own pipeline;
CPU replicas share the cores, each with cores // N PyTorch threads), `lab loadtest`'s client
(`lab.bench.loadtest.run_load`) sends the same sentences at each point (closed-loop
concurrency, then open-loop Poisson arrivals, the way listeners load a server), and the
cluster is shut down before the next count starts. Each row's throughput ratio divides its
requests per second by the first replica count's at the same point.

Writes <stem>.json (every request) and <stem>.md. Hand-written remarks go in the JSON's
`notes` and `anomalies` lists, so a rewritten report keeps them; `--render` rewrites the
markdown from the JSON alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path

import httpx

from lab.bench.load_report import RequestRecord, table_rows
from lab.bench.loadtest import LoadPlan, SpeechTarget, run_load
from lab.bench.report import anomaly_lines, command_line, markdown_table, run_meta, write_json
from lab.config import PipelineConfig, load_preset, parse_overrides
from lab.serve import ServeOptions
from lab.serve.replicas import LabReplicas, Placement

COLUMNS = ("replicas", "threads_each", "shape", "load", "requests", "ok", "ttfa_p50_ms",
           "ttfa_p95_ms", "latency_p50_ms", "latency_p95_ms", "realtime_fraction",
           "mean_streams", "requests_per_s", "audio_s_per_s", "throughput_ratio", "errors")
SHARED_CORES = (
    "On a machine with few cores, CPU replicas share the same cores: one replica runs on all "
    "of them, two run on half each. The ratio then shows what Ray Serve's proxy and a "
    "second process cost, not scale-out; scale-out needs a core set (or a GPU) per replica.")
OWN_GPUS = ("Each replica has a GPU of its own; the proxy, the load generator and the replicas' "
            "host threads share the CPU cores.")
TIMING = (
    "ttfa and latency run from when a request was due (its arrival in the open loop, the end "
    "of the previous request in the closed loop) and include Ray's proxy. The load "
    "generator, Ray's proxy and controller, and the replicas share this machine's cores.")


def measure_one(cfg: PipelineConfig, options: ServeOptions, replicas: int, plan: LoadPlan,
                args: argparse.Namespace) -> tuple[list[dict], list[RequestRecord]]:
    """Rows and requests of every load point against `replicas` replicas on a fresh cluster."""
    cluster = LabReplicas(cfg, options, replicas).start()
    try:
        ready = httpx.get(f"{cluster.url}/ready", trust_env=False, timeout=10).json()
        target = SpeechTarget(f"{cluster.url}/v1/audio/speech", "", ready["voices"][0],
                              args.format, ready["sample_rate"], args.timeout)
        loaded = asyncio.run(run_load(target, plan))
    finally:
        cluster.stop()
    if loaded.unmeasured:
        raise RuntimeError(f"{replicas} replica(s): {loaded.unmeasured}")
    place = cluster.placement
    rows = [{"replicas": replicas, "threads_each": place.threads, **row}
            for row in table_rows(loaded.rows)]
    return rows, loaded.records


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's requests per second over the first replica count's at the same point."""
    base = {}
    for row in rows:
        base.setdefault((row["shape"], row["load"]), row["requests_per_s"])
    ratios = []
    for row in rows:
        first = base[(row["shape"], row["load"])]
        ratios.append({**row, "throughput_ratio": round(row["requests_per_s"] / first, 3)
                       if first else None})
    return ratios


def anomalies_of(rows: list[dict]) -> list[str]:
    return [f"{r['replicas']} replica(s) at {r['shape']} {r['load']:g} had errors: "
            f"{r['errors']}" for r in rows if r["errors"] != "0"]


def measure(args: argparse.Namespace, plan: LoadPlan) -> dict:
    overrides = parse_overrides(args.set)
    cfg = load_preset(args.preset, **overrides)
    options = ServeOptions(slots=args.slots, queue=args.queue, deadline_s=args.timeout,
                           model_name=Path(args.preset).stem)
    rows, records = [], []
    for replicas in args.replicas:
        more_rows, more_records = measure_one(cfg, options, replicas, plan, args)
        rows += more_rows
        records += [{"replicas": replicas, **asdict(r)} for r in more_records]
    rows = with_ratios(rows)
    placements = [Placement.of(cfg, n) for n in args.replicas]
    meta = run_meta(command=f"python {command_line(sys.argv)}", preset=args.preset,
                    overrides=" ".join(args.set), weights=f"{cfg.weights} "
                    f"({cfg.family}:{cfg.model})", format=args.format, timeout_s=args.timeout,
                    placements=[asdict(p) for p in placements],
                    plan=asdict(plan), slots=args.slots, queue=args.queue)
    return {"meta": meta, "baseline": f"{args.replicas[0]} replica(s) at the same "
                                      "load point, in the same run",
            "anomalies": anomalies_of(rows),
            "notes": [OWN_GPUS if placements[0].gpus else SHARED_CORES, TIMING],
            "rows": rows,
            "requests": records}


def header(result: dict) -> list[str]:
    """Command, device, weights, placement, baseline and anomalies, before any number."""
    meta, plan = result["meta"], result["meta"]["plan"]
    places = "; ".join(dict.fromkeys(f"{p['replicas']} replica(s): {p['threads']} thread(s) "
                                     f"and {p['gpus']} GPU each" for p in meta["placements"]))
    lines = [f"Command: `{meta['command']}`", "",
             f"- Device: {meta['device']}; torch {meta['torch']}, Python {meta['python']}; "
             f"{meta['date']}",
             f"- Preset: `{meta['preset']}`"
             + (f" with `{meta['overrides']}`" if meta.get("overrides") else "")
             + f"; weights: {meta['weights']}",
             f"- Replicas: {places}; each with its own slots "
             f"({meta['slots'] or 'the replica default'}) and a queue of {meta['queue']}",
             f"- Load: {points(plan)}, at most {plan['requests']} requests and "
             f"{plan['duration_s']} s per point, request timeout {meta['timeout_s']} s, "
             f"{plan['warmup']} warm-up request(s); sentences from "
             f"{', '.join(plan['texts'])}, seed {plan['seed']}; format {meta['format']}",
             f"- Baseline: {result['baseline']}",
             f"- Note: {result['notes'][0]}"]
    return lines + anomaly_lines(result)


def points(plan: dict) -> str:
    """The load points in words: closed-loop concurrencies and open-loop Poisson rates."""
    parts = [f"closed loop at {', '.join(f'{c:g}' for c in plan['concurrency'])} concurrent"
             if plan["concurrency"] else "",
             f"Poisson arrivals at {', '.join(f'{r:g}' for r in plan['rates'])} a second"
             if plan.get("rates") else ""]
    return "; ".join(part for part in parts if part)


def write(result: dict, out: Path, stem: str) -> None:
    write_json(result, out, stem)
    parts = [f"# Replicas behind Ray Serve ({result['meta']['device']})", "", *header(result),
             "", markdown_table(result["rows"], columns=COLUMNS),
             "\n\n".join(result["notes"][1:])]
    (out / f"{stem}.md").write_text("\n".join(parts) + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="cpu-default")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--replicas", default="1,2",
                        help="replica counts, one cluster each; the first is the baseline")
    parser.add_argument("--concurrency", default="4", help="closed-loop points, e.g. 2,4,8")
    parser.add_argument("--rates", default="",
                        help="open-loop points: Poisson arrivals per second, e.g. 30,60")
    parser.add_argument("--requests", type=int, default=16, help="most requests per point")
    parser.add_argument("--duration", type=float, default=60.0, help="most seconds per point")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--warmup", type=int, default=2,
                        help="requests sent first and not measured (reach both replicas)")
    parser.add_argument("--texts", default="short,medium")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", default="pcm", choices=("pcm", "wav", "sse"))
    parser.add_argument("--slots", type=int, default=None,
                        help="each replica's (default: its own)")
    parser.add_argument("--queue", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--stem", default="serve_replicas_cpu")
    parser.add_argument("--render", action="store_true",
                        help="rewrite <stem>.md from <stem>.json; measure nothing")
    args = parser.parse_args(argv)
    args.replicas = [int(n) for n in args.replicas.split(",") if n]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render:
        write(json.loads((args.out / f"{args.stem}.json").read_text()), args.out, args.stem)
        return
    plan = LoadPlan(tuple(int(c) for c in args.concurrency.split(",") if c),
                    tuple(float(r) for r in args.rates.split(",") if r),
                    args.requests, args.duration, tuple(args.texts.split(",")), args.seed,
                    args.warmup)
    result = measure(args, plan)
    write(result, args.out, args.stem)
    print(markdown_table(result["rows"], columns=COLUMNS))
    print(f"wrote {args.out / args.stem}.json and .md")


if __name__ == "__main__":
    main()
