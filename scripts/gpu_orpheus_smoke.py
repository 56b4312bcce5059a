"""Check the Orpheus family end to end through the Pipeline API on a GPU (dummy 3B weights).

    python scripts/gpu_orpheus_smoke.py [--json results.json]

Prints the timings a user of the app would see (TTFB, tokens/s, per-stage time, fallbacks, the
config as it ran), then checks what CPU tests cannot: CUDA-graph capture at load, concurrent
streams from several threads through one pipeline (each complete), and the three KV cache
modes' ms per decode step. Dummy weights: speed only, never quality.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
from pathlib import Path

import numpy as np

from lab.config import load_preset
from lab.pipeline import Pipeline, drain

TEXTS = ["The first stream starts here.", "A second voice joins the batch.",
         "Third request, a little longer than the others.", "Four."] * 2


def batch_and_stream(pipe: Pipeline) -> dict:
    pipe.synthesize_batch(TEXTS)
    batch = pipe.synthesize_batch(TEXTS)[0].metrics
    streamed = pipe.synthesize(TEXTS[0]).metrics
    return {"batch": {"ttfb_ms": batch.ttfb_ms, "total_ms": batch.total_ms,
                      "tokens_per_second": batch.tokens_per_second},
            "streamed": {"ttfb_ms": streamed.ttfb_ms, "total_ms": streamed.total_ms,
                         "tokens_per_second": streamed.tokens_per_second,
                         "ms_per_step": streamed.ms_per_step,
                         "stages": streamed.stages}}


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
    return {"requests": len(complete), "all_complete": all(complete),
            "rows_per_decode_step": (stats.active_rows - rows) / (stats.decode_steps - steps),
            "ttfb_ms_median": statistics.median(ttfb)}


def kv_modes() -> dict:
    out = {}
    for mode in ("static", "dynamic", "none"):
        pipe = Pipeline(load_preset("orpheus-3b-dummy-gpu", batch_size=1, kv_cache=mode,
                                    cuda_graphs=mode == "static",
                                    sampling={"temperature": 0.0, "max_tokens": 210}))
        m = pipe.synthesize("A sentence to time every decode step with.").metrics
        first, last = m.step_quarters
        out[mode] = {"steps": len(m.step_ms), "ms_per_step": m.ms_per_step,
                     "first_quarter_median_ms": first, "last_quarter_median_ms": last,
                     "kv_cache": pipe.memory_facts()["KV cache"], "fallbacks": pipe.fallbacks}
        pipe.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pipe = Pipeline(load_preset("orpheus-3b-dummy-gpu", batch_size=8,
                                sampling={"max_tokens": 280}))
    report = {"startup": pipe.startup, "resolved": pipe.resolved.__dict__ | {"sampling": None},
              **batch_and_stream(pipe), "concurrent": concurrent(pipe),
              "fallbacks": pipe.fallbacks}
    pipe.close()
    del pipe
    report["kv_modes"] = kv_modes()
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
