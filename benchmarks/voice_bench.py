"""Benchmark of the embedded Piper voice: speed by precision and batch size, streaming TTFB,
and the sound (DNSMOS OVRL, WER) of each precision on a sentence set.

    python benchmarks/voice_bench.py --device cpu --out benchmarks/results
    python benchmarks/voice_bench.py --device cuda --dtypes fp32,fp16,bf16 --compile none,default
    python benchmarks/voice_bench.py --device cpu --only quality --out benchmarks/results

Every configuration runs in this one process, so ratios between rows compare like with like.
Writes voice_<device>.json and voice_<device>.md. `--only quality` re-scores the sound into an
existing report and keeps its timings, which a busy machine would spoil but not the scores.
Hand-written remarks go in the JSON's `notes` list, so a rewritten report keeps them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from lab.bench.report import markdown_table, run_meta
from lab.bench.runner import run_text_set
from lab.config import PipelineConfig
from lab.frontend import sentence_set
from lab.pipeline import Pipeline


def speed_rows(base: PipelineConfig, texts: list[str], dtypes, compiles, batch_sizes, repeats):
    rows = []
    for dtype in dtypes:
        for mode in compiles:
            cfg = base.replace(dtype=dtype, compile=mode, stream=False)
            made = run_text_set(lambda size, c=cfg: Pipeline(c.replace(batch_size=size)), texts,
                                batch_sizes, repeats=repeats, warmup=1)
            rows += [{"dtype": dtype, "compile": mode, **r.to_dict()} for r in made]
    return rows


def ttfb_rows(base: PipelineConfig, texts: list[str], intervals: list[int]):
    """Time to first audio at batch 1: one-shot decoding vs streaming at several intervals."""
    rows = []
    settings = [("one-shot", base.replace(stream=False))]
    settings += [(f"stream every {n} frames", base.replace(stream=True, decode_interval=n))
                 for n in intervals]
    for label, cfg in settings:
        pipe = Pipeline(cfg)  # warmed up at construction
        results = [pipe.synthesize(t) for t in texts]
        rows.append({
            "mode": label,
            "ttfb_ms_mean": statistics.mean(r.metrics.ttfb_ms for r in results),
            "total_ms_mean": statistics.mean(r.metrics.total_ms for r in results),
            "audio_s_mean": statistics.mean(r.metrics.audio_seconds for r in results),
        })
    return rows


def quality_rows(base: PipelineConfig, texts: list[str], dtypes):
    from lab.quality import evaluate

    rows = []
    for dtype in dtypes:
        pipe = Pipeline(base.replace(dtype=dtype, stream=False))
        scores = [evaluate(r.audio, r.sample_rate, r.text) for r in map(pipe.synthesize, texts)]
        rows.append({
            "dtype": dtype,
            "dnsmos_ovrl": float(np.mean([s.mos.ovrl for s in scores])),
            "dnsmos_sig": float(np.mean([s.mos.sig for s in scores])),
            "p808": float(np.mean([s.mos.p808 for s in scores])),
            "wer": float(np.mean([s.wer for s in scores])),
            "cer": float(np.mean([s.cer for s in scores])),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--compile", default="none")
    parser.add_argument("--batch-sizes", default="1,4,8")
    parser.add_argument("--intervals", default="12,24,48")
    parser.add_argument("--texts", default="medium")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quality", action="store_true", help="also score DNSMOS and WER")
    parser.add_argument("--only", choices=["quality"],
                        help="re-score only the sound into the existing report; keep its timings")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--stem", help="output file stem (default voice_<device>)")
    args = parser.parse_args()

    base = PipelineConfig(device=args.device, model=args.model)
    texts = sentence_set(args.texts)
    dtypes = args.dtypes.split(",")
    out, stem = Path(args.out), args.stem or f"voice_{args.device}"
    meta = run_meta(command="python " + " ".join(sys.argv), texts=args.texts)
    if args.only == "quality":
        rescore_quality(out, stem, meta, quality_rows(base, texts, dtypes))
        return
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    result = {
        "meta": meta,
        "speed": speed_rows(base, texts, dtypes, args.compile.split(","), sizes, args.repeats),
        "ttfb": ttfb_rows(base, texts, [int(n) for n in args.intervals.split(",")]),
    }
    if args.quality:
        result["quality"] = quality_rows(base, texts, dtypes)
    write(result, out, stem)


def rescore_quality(out: Path, stem: str, meta: dict, rows: list[dict]) -> None:
    """Swap new sound rows into the saved report; its speed rows and their meta stay as run."""
    import json

    result = json.loads((out / f"{stem}.json").read_text())
    result["quality"] = rows
    result["quality_meta"] = meta
    write(result, out, stem)


def write(result: dict, out: Path, stem: str) -> None:
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    speed_cols = ["dtype", "compile", "batch_size", "rtf", "audio_s_per_s", "latency_p50_ms",
                  "latency_p95_ms", "peak_memory_mb", "fallbacks"]
    parts = [f"# Default voice benchmark ({result['meta'].get('device', '')})",
             f"Command: `{result['meta']['command']}`", "",
             "## Speed by precision and batch size (one-shot decoding)",
             markdown_table(result["speed"], speed_cols), "",
             "## Time to first audio, batch 1", markdown_table(result["ttfb"])]
    if "quality" in result:
        parts += ["", "## Sound on the sentence set", *_quality_origin(result),
                  markdown_table(result["quality"])]
    if result.get("notes"):
        parts += ["", "Notes: " + "\n\n".join(result["notes"])]
    (out / f"{stem}.md").write_text("\n".join(parts) + "\n")
    print("\n".join(parts))


def _quality_origin(result: dict) -> list[str]:
    """The command line of a sound section scored apart from the timings above it."""
    meta = result.get("quality_meta")
    if meta is None:
        return []
    return [f"Scored separately on {meta['date']}: `{meta['command']}`", ""]


if __name__ == "__main__":
    main()
