"""Check the Orpheus family end to end through the Pipeline API on a GPU (dummy 3B weights).

    python scripts/gpu_orpheus_smoke.py [--json results.json] [--repeats 3]

Prints the timings a user of the app would see (TTFB, tokens/s, per-stage time, fallbacks, the
config as it ran), then checks what CPU tests cannot: CUDA-graph capture at load, concurrent
streams from several threads through one pipeline (each complete), and the three KV cache
modes' ms per decode step, the eager ones also with cuDNN attention off (cuDNN builds a plan
for every new key length, which a growing cache meets at every step). Dummy weights: speed
only, never quality. Each timed figure is the median of `--repeats` requests with its min-max;
the thread count is pinned and recorded. With `--json X.json` it also writes `X.md`, whose
header takes hand-written `anomalies` and `notes` from the JSON (`--render` rewrites it).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import threading
from pathlib import Path

import numpy as np
import torch

from lab.config import load_preset
from lab.metrics.repeats import Spread, pinned_threads, timed_repeats
from lab.pipeline import Pipeline, drain

TEXTS = ["The first stream starts here.", "A second voice joins the batch.",
         "Third request, a little longer than the others.", "Four."] * 2


def _median_of(metrics: list, keys: tuple[str, ...]) -> dict:
    """Each key's median over the requests, with its spread under `<key>_spread`."""
    out = {}
    for key in keys:
        values = [getattr(m, key) for m in metrics]
        if any(v is None for v in values):
            out[key] = None
            continue
        spread = Spread.of(values)
        out[key], out[f"{key}_spread"] = spread.median, spread.to_dict()
    return out


def batch_and_stream(pipe: Pipeline, repeats: int) -> dict:
    keys = ("ttfb_ms", "total_ms", "tokens_per_second")
    _, batches = timed_repeats(lambda: pipe.synthesize_batch(TEXTS)[0].metrics, repeats)
    _, streams = timed_repeats(lambda: pipe.synthesize(TEXTS[0]).metrics, repeats, warmup=0)
    streamed = _median_of(streams, (*keys, "ms_per_step"))
    streamed["stages"] = streams[len(streams) // 2].stages
    return {"batch": _median_of(batches, keys), "streamed": streamed}


def concurrent(pipe: Pipeline, threads: int = 4, each: int = 2) -> dict:
    """Streams from several threads at once: each must come back whole (its chunks add up to
    its Synthesis), and they must share decode steps."""
    stats = pipe.backend.tts.engine.stats
    steps, rows = stats.decode_steps, stats.active_rows
    complete, ttfb = [], []

    def client(n: int) -> None:
        for text in TEXTS[n::threads][:each]:
            chunks, syn = drain(pipe.stream(text))
            joined = np.concatenate([c.audio for c in chunks])
            complete.append(bool(syn.audio.size) and np.array_equal(joined, syn.audio))
            ttfb.append(syn.metrics.ttfb_ms)

    workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    spread = Spread.of(ttfb)
    return {"requests": len(complete), "all_complete": all(complete),
            "rows_per_decode_step": (stats.active_rows - rows) / (stats.decode_steps - steps),
            "ttfb_ms_median": statistics.median(ttfb), "ttfb_ms_spread": spread.to_dict()}


def kv_modes(repeats: int) -> dict:
    out = {}
    runs = [(m, True) for m in ("static", "dynamic", "none")]
    runs += [(m, False) for m in ("dynamic", "none")] if torch.cuda.is_available() else []
    for mode, cudnn in runs:
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        try:
            pipe = Pipeline(load_preset("orpheus-3b-dummy-gpu", batch_size=1, kv_cache=mode,
                                        cuda_graphs=mode == "static",
                                        sampling={"temperature": 0.0, "max_tokens": 210}))
            text = "A sentence to time every decode step with."
            _, metrics = timed_repeats(lambda p=pipe, t=text: p.synthesize(t).metrics, repeats,
                                       warmup=0)
            ms = Spread.of([m.ms_per_step for m in metrics])
            mid = sorted(metrics, key=lambda m: m.ms_per_step)[(len(metrics) - 1) // 2]
            first, last = mid.step_quarters
            out[mode if cudnn else f"{mode}, cuDNN attention off"] = {
                "steps": len(mid.step_ms), "ms_per_step": ms.median,
                "ms_per_step_spread": ms.to_dict(),
                "first_quarter_median_ms": first, "last_quarter_median_ms": last,
                "kv_cache": pipe.memory_facts()["KV cache"], "fallbacks": pipe.fallbacks}
            pipe.close()
        finally:
            torch.backends.cuda.enable_cudnn_sdp(True)
    return out


def _span(d: dict, key: str, spec: str = ".0f") -> str:
    s = d.get(f"{key}_spread")
    value = d.get(key)
    if value is None:
        return "-"
    if not s or s["n"] < 2:
        return format(value, spec)
    return f"{value:{spec}} ({s['min']:{spec}}-{s['max']:{spec}})"


def markdown(report: dict) -> str:
    b, s, c = report["batch"], report["streamed"], report["concurrent"]
    anomalies = report.get("anomalies") or []
    resolved = report["resolved"]
    lines = [
        "# Orpheus family through the Pipeline API on a GPU", "",
        f"Command: `{report.get('command', 'python scripts/gpu_orpheus_smoke.py')}`", "",
        f"- Device: {report.get('device', '?')}; torch {report.get('torch', '?')}; threads "
        f"{report.get('threads') or 'not recorded'}; repeats: {report.get('repeats', 1)} "
        "request(s) per figure, median (min-max)",
        "- Weights: preset `orpheus-3b-dummy-gpu`, dummy (random) LM and codec weights: speed "
        "only, never quality",
        "- Baseline: none outside the lab. This checks that the app's path (Pipeline -> worker "
        "-> OrpheusBackend -> LLMEngine -> SNAC) runs on a GPU; the engine's own figures with "
        "their peers are in `orpheus_streams.md` and `engine_ladder.md`. The KV cache table "
        "compares the three modes with each other, same process.",
        "- Anomalies:" + (" none seen" if not anomalies else ""),
        *[f"  - {a}" for a in anomalies], "",
        f"Load {report['startup']['load_ms'] / 1e3:.1f} s, warm-up "
        f"{report['startup']['warmup_ms'] / 1e3:.1f} s. The config as it ran "
        f"(`Pipeline.resolved`): {resolved['dtype']}, quant {resolved['quant']}, CUDA graphs "
        f"{resolved['cuda_graphs']}, {resolved['kv_cache']} cache.", "",
        f"| run (batch_size {resolved['batch_size']}) | TTFB ms | total ms | tokens/s | "
        "ms per step |", "| --- | ---: | ---: | ---: | ---: |",
        f"| a batch of {len(TEXTS)} texts | {_span(b, 'ttfb_ms')} | {_span(b, 'total_ms')} | "
        f"{_span(b, 'tokens_per_second')} (aggregate) | - |",
        f"| one text, streamed | {_span(s, 'ttfb_ms')} | {_span(s, 'total_ms')} | "
        f"{_span(s, 'tokens_per_second')} | {_span(s, 'ms_per_step', '.2f')} |",
        f"| {c['requests']} streams from 4 threads at once | "
        f"{_span({'t': c['ttfb_ms_median'], 't_spread': c.get('ttfb_ms_spread')}, 't')} "
        f"(over requests) | - | - | {c['rows_per_decode_step']:.2f} requests per decode "
        "step |", "",
        f"All {c['requests']} concurrent streams came back whole: {c['all_complete']}.", "",
        "KV cache modes, batch 1, greedy, 210 tokens (static with CUDA graphs; dynamic and none "
        "run eager):", "",
        "| kv_cache | ms per step | first quarter (median) | last quarter (median) | cache |",
        "| --- | ---: | ---: | ---: | --- |"]
    for mode, r in report["kv_modes"].items():
        lines.append(f"| {mode} | {_span(r, 'ms_per_step', '.2f')} | "
                     f"{r['first_quarter_median_ms']:.2f} | {r['last_quarter_median_ms']:.2f} | "
                     f"{r['kv_cache']} |")
    if report.get("notes"):
        lines += ["", "## Run notes", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    parser.add_argument("--render", action="store_true",
                        help="rewrite the markdown beside --json from it; measure nothing")
    args = parser.parse_args()
    if args.render:
        args.json.with_suffix(".md").write_text(markdown(json.loads(args.json.read_text())))
        return
    with pinned_threads(args.threads) as threads:
        pipe = Pipeline(load_preset("orpheus-3b-dummy-gpu", batch_size=8,
                                    sampling={"max_tokens": 280}))
        report = {"command": shlex.join(["python", "scripts/gpu_orpheus_smoke.py",
                                         *sys.argv[1:]]),
                  "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                  "torch": torch.__version__, "threads": threads, "repeats": args.repeats,
                  "startup": pipe.startup, "resolved": pipe.resolved.__dict__ | {"sampling": None},
                  **batch_and_stream(pipe, args.repeats), "concurrent": concurrent(pipe),
                  "fallbacks": pipe.fallbacks}
        pipe.close()
        del pipe
        report["kv_modes"] = kv_modes(args.repeats)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
        args.json.with_suffix(".md").write_text(markdown(report))


if __name__ == "__main__":
    main()
