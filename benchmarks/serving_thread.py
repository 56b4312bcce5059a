"""Where the serving thread's time goes, by function, under open-loop arrivals in this process.

    python benchmarks/serving_thread.py --preset orpheus-3b-dummy-gpu \
        --set sampling.max_tokens=420 --set batch_size=192 --set mixed_prefill=32 \
        --rates 36,44 --duration 20 --threads 16

A server holds up only while the thread that steps its engine keeps pace, and that thread's
round is spent in a dozen places: launching the decode step and the sampler, waiting for the
device's tokens, turning tokens into codec frames, launching and collecting codec windows,
handing chunks to their streams, starting and finishing requests. The preset's pipeline is
built as `lab serve` builds it and takes the load generator's Poisson arrivals without HTTP
(`lab.bench.in_process`); while each point runs, the functions of the serving path are timed
(`lab.bench.call_timer`: inclusive, so a row holds its callees' time too and rows do not add
up). Each row gives ms and calls per round of the thread; the point's row gives its rounds,
their mean length, and how much of a round was host work (less the token waits).

A warm-up point at the lowest rate runs first and is not reported. Writes <stem>.json and
<stem>.md; `--render` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lab.bench.call_timer import CallTimer
from lab.bench.in_process import open_in_process, thread_clock
from lab.bench.load_report import summarize
from lab.bench.loadtest import LoadPlan
from lab.bench.report import markdown_table, run_meta, save_report
from lab.config import load_preset, parse_overrides
from lab.engine.engine import LLMEngine
from lab.engine.runner import ModelRunner, PendingTokens
from lab.engine.scheduler import Scheduler
from lab.engine.slot_sampler import SlotSampler
from lab.metrics.repeats import pinned_threads
from lab.models.latent_codec import LatentCodec
from lab.models.snac_codec import SnacCodec
from lab.models.token_tts import TokenTTS
from lab.pipeline import Pipeline
from lab.serve.server import SWITCH_INTERVAL_MS, server_pipeline
from lab.stream.codec_stream import StreamingDecoder
from lab.worker import Outbox, Worker

SERVING_PATH = [
    (Worker, "_admit"), (Worker, "_run_shared"), (Worker, "_advance"), (Outbox, "flush"),
    (Pipeline, "_timed_prepare"), (Pipeline, "_finish"),
    (TokenTTS, "step"), (TokenTTS, "_take_tokens"), (TokenTTS, "_record"),
    (LLMEngine, "step"), (LLMEngine, "_launch"), (LLMEngine, "_retire"),
    (PendingTokens, "wait"), (Scheduler, "plan_prefill"),
    (ModelRunner, "decode"), (ModelRunner, "decode_with_prefill"), (ModelRunner, "prefill"),
    (ModelRunner, "sample"), (SlotSampler, "__call__"),
    (StreamingDecoder, "launch"), (StreamingDecoder, "due"), (StreamingDecoder, "_decode"),
    (StreamingDecoder, "collect"), (StreamingDecoder, "push"),
    (SnacCodec, "decode"), (LatentCodec, "decode"),
]
"""The functions timed: the worker's round, the engine's step and what it launches, the
codec's windows, and each request's start and end. A family that does not reach one (the Piper
voice has no engine) leaves its row out."""


def point(pipe: Pipeline, plan: LoadPlan, rate: float) -> tuple[dict, list[dict]]:
    """One open-loop point: its summary and a row per timed function it reached."""
    before = thread_clock(pipe)
    with CallTimer(SERVING_PATH) as timer:
        records, wall_s = open_in_process(pipe, plan, rate, "in-process open")
    rounds, busy_s, wait_s, *_ = (b - a for a, b in zip(before, thread_clock(pipe), strict=True))
    per_round = 1e3 / max(rounds, 1)
    row = summarize(records, "in-process open", rate, wall_s)
    summary = {"rate": rate, "requests": row.requests, "errors": row.requests - row.ok,
               "ttfa_p50_ms": row.ttfa_p50_ms, "ttfa_p95_ms": row.ttfa_p95_ms, "rounds": rounds,
               "round_ms": round(busy_s * per_round, 3),
               "host_ms_per_round": round((busy_s - wait_s) * per_round, 3),
               "token_wait_ms_per_round": round(wait_s * per_round, 3),
               "wall_s": round(wall_s, 2)}
    rows = [{"rate": rate, "function": name, "ms_per_round": round(c.seconds * per_round, 3),
             "calls_per_round": round(c.count / max(rounds, 1), 2),
             "us_per_call": round(1e6 * c.seconds / c.count, 1)}
            for name, c in timer.calls.items() if c.count]
    return summary, sorted(rows, key=lambda r: -r["ms_per_round"])


def run(args: argparse.Namespace) -> dict:
    cfg = load_preset(args.preset, **parse_overrides(args.set))
    plans = [LoadPlan(concurrency=(), rates=(rate,), requests=args.requests,
                      duration_s=args.duration, texts=tuple(args.texts.split(",")),
                      seed=args.seed, warmup=0) for rate in args.rates]
    points, functions = [], []
    with pinned_threads(args.threads) as threads:
        pipe = server_pipeline(cfg, switch_interval_ms=args.switch_interval)
        try:
            open_in_process(pipe, LoadPlan((), (), 4, 2.0, ("short",), args.seed, 0),
                            min(args.rates), "warm-up")
            for plan, rate in zip(plans, args.rates, strict=True):
                summary, rows = point(pipe, plan, rate)
                print(markdown_table([summary]), "\n", markdown_table(rows[:12]), flush=True)
                points.append(summary)
                functions += rows
        finally:
            pipe.close()
    return {"meta": run_meta(preset=args.preset, overrides=" ".join(args.set), threads=threads,
                             switch_interval_ms=args.switch_interval,
                             weights=f"{cfg.weights} ({cfg.family}:{cfg.model})"),
            "baseline": "none: where one run's serving thread spends its rounds",
            "anomalies": [], "notes": [], "points": points, "functions": functions}


def render(report: dict) -> str:
    """The markdown of a report, with the hand-written `notes` of its JSON, if any."""
    meta = report["meta"]
    parts = [f"# Where the serving thread's time goes ({meta['device']})", "",
             f"Command: `python {meta['command']}`", "",
             f"- Preset `{meta['preset']}` {meta['overrides']}; weights: {meta['weights']}",
             f"- {meta['threads']} intra-op threads; Python's lock changes hands every "
             f"{meta['switch_interval_ms']:g} ms at most",
             f"- Baseline: {report['baseline']}",
             *[f"- Anomaly: {a}" for a in report["anomalies"]], "",
             "Each point: the load generator's Poisson arrivals against the pipeline in this "
             "process, timed from when each request was due. `host_ms_per_round` is the "
             "round less its waits for the device's tokens. Function rows are inclusive.", "",
             markdown_table(report["points"])]
    for summary in report["points"]:
        rows = [r for r in report["functions"] if r["rate"] == summary["rate"]]
        parts += ["", f"## {summary['rate']:g} arrivals a second", "", markdown_table(rows)]
    parts += ["", "## Notes", "", *[f"- {n}" for n in report["notes"]]] if report["notes"] else []
    return "\n".join(parts) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="orpheus-tiny-cpu")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",") if r],
                        default=[4.0], help="Poisson arrivals per second, one point each")
    parser.add_argument("--duration", type=float, default=20.0, help="most seconds per point")
    parser.add_argument("--requests", type=int, default=4000, help="most requests per point")
    parser.add_argument("--texts", default="short,medium")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--switch-interval", type=float, default=SWITCH_INTERVAL_MS,
                        help="ms between hand-overs of Python's lock, as `lab serve` sets it")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--stem", default="serving_thread")
    parser.add_argument("--render", action="store_true",
                        help="rewrite <stem>.md from <stem>.json, measuring nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render:
        report = json.loads((args.out / f"{args.stem}.json").read_text())
        (args.out / f"{args.stem}.md").write_text(render(report))
        return
    if not args.rates:
        sys.exit("--rates names no rate")
    print(save_report(run(args), args.out, args.stem, render))


if __name__ == "__main__":
    main()
