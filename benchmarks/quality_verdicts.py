"""Does each optimisation of the default voice keep its quality? Paired verdicts with intervals.

    python benchmarks/quality_verdicts.py --out benchmarks/results
    python benchmarks/quality_verdicts.py --quick --out /tmp/quality_smoke
    python benchmarks/quality_verdicts.py --render --out benchmarks/results

The baseline is the Piper voice in fp32, one-shot, seed 0. Every row renders the lab's sentence
sets (one sentence per call, so each keeps its seed) through one variant: bf16, streamed
decoding, and each quantization mode; a mode that the voice cannot take (the family's
declaration names int8-static as the one that reaches its convolutions) falls back, and the
row says so instead of judging the baseline against itself. Every MOS proxy reading, WER and
CER are judged on paired per-sentence differences with 95% bootstrap intervals (pass / fail /
inconclusive with the sentences that would settle it); WER and CER show the recogniser's floor,
its own rate on the baseline. The voice draws its noise from the seed on the CPU, so every
variant is paired with the baseline waveform, and MCD, PESQ and STOI against it come with
intervals too. The worst sentences of each row are written as 16-bit FLAC files beside the
report.

The baseline's renderings and scores are cached (lab/quality/score_cache.py) under
`--cache` per (sentences, config, seed); a second run re-scores only the variants.
`--quick` judges four short sentences, for a smoke run in a few minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import soundfile as sf
from voice_bench import header

from lab.bench.report import markdown_table, run_meta, write_json
from lab.config import PipelineConfig, to_dict
from lab.frontend import sentence_set
from lab.metrics.repeats import pinned_threads
from lab.pipeline import Pipeline
from lab.quality import QualityReport, mos_label
from lab.quality.paired import CONFIDENCE, RESAMPLES
from lab.quality.report import CER_POINTS, MOS_TOLERANCE, WER_POINTS
from lab.quality.score_cache import ScoreCache
from lab.quality.scoring import default_workers
from lab.quality.verdicts import judge_takes, judgeable, render_takes, renderer, scored_baseline
from lab.quant import QUANTS

BASE = PipelineConfig(device="cpu", stream=False)
VARIANTS = {"bf16": {"dtype": "bf16"}, "streamed": {"stream": True},
            **{f"{q}": {"quant": q} for q in QUANTS if q != "none"}}
QUICK_ROWS = ("bf16", "streamed", "int8-static")
SETS = ("short", "medium", "edge", "long")
STEM = "quality_verdicts_cpu"


def texts_of(sets: list[str], quick: bool) -> tuple[list[str], list[str]]:
    """(sentences judged, sentences left out): the edge set's punctuation-only and non-English
    lines give the US English recogniser nothing to compare."""
    texts = sentence_set("short")[:4] if quick else [t for n in sets for t in sentence_set(n)]
    return [t for t in texts if judgeable(t)], [t for t in texts if not judgeable(t)]


def judge_row(name: str, base, texts: list[str], workers: int, audio_dir: Path) -> dict:
    """Load, render, score and judge one variant; a mode that fell back is not judged."""
    asked = BASE.replace(**VARIANTS[name])
    began = time.perf_counter()
    pipe = Pipeline(asked)
    setup = time.perf_counter() - began
    applied = pipe.backend.applied()
    row = {"config": name, "asked": VARIANTS[name], "applied": applied,
           "setup_s": round(setup, 1), "fallbacks": pipe.fallbacks}
    if "quant" in VARIANTS[name] and applied["quant"] != VARIANTS[name]["quant"]:
        pipe.close()
        return {**row, "outcome": f"not judged: fell back to quant {applied['quant']}"}
    try:
        began = time.perf_counter()
        takes = render_takes(renderer(pipe), texts, f"rendering {name}")
        rendered = time.perf_counter()
        report = judge_takes(takes, base, paired_waveforms=not pipe.family.autoregressive,
                             workers=workers)
        scored = time.perf_counter()
    finally:
        pipe.close()
    audio = save_worst(report, takes, base, audio_dir / _slug(name))
    data = report.to_dict(audio={i: {k: str(Path(p).relative_to(audio_dir.parent))
                                     for k, p in files.items()} for i, files in audio.items()})
    return {**row, "render_s": round(rendered - began, 1), "score_s": round(scored - rendered, 1),
            **{k: data[k] for k in ("outcome", "checks", "fidelity", "worst", "candidate")}}


def save_worst(report: QualityReport, takes, base, folder: Path) -> dict[int, dict[str, str]]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for w in report.worst():
        pair = {"baseline": folder / f"{w.index + 1:02d}_fp32.flac",
                "candidate": folder / f"{w.index + 1:02d}_candidate.flac"}
        sf.write(pair["baseline"], base.audio[w.index], base.sample_rate)
        sf.write(pair["candidate"], takes.audio[w.index], takes.sample_rate)
        files[w.index] = {k: str(p) for k, p in pair.items()}
    return files


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _left_out(result: dict) -> str:
    left = result.get("left_out") or []
    if not left:
        return ""
    return (f" ({len(left)} left out, with nothing in US English to transcribe: "
            + ", ".join(f"`{t}`" for t in left) + ")")


def _rate(x: float) -> str:
    return f"{x * 100:.1f}%"


def _check_cells(c: dict) -> dict:
    rate = c["metric"] in ("WER", "CER")
    if rate:
        base, cand = f"{_rate(c['baseline'])} (floor)", _rate(c["candidate"])
        change = f"{c['delta'] * 100:+.1f} ({c['low'] * 100:+.1f} to {c['high'] * 100:+.1f})"
    else:
        base, cand = f"{c['baseline']:.3f}", f"{c['candidate']:.3f}"
        change = f"{c['delta']:+.3f} ({c['low']:+.3f} to {c['high']:+.3f})"
    metric = c["metric"] if rate else mos_label(c["metric"])
    return {"metric": metric, "baseline": base, "candidate": cand,
            "change (95% CI)": change + (" points" if rate else ""), "verdict": c["verdict"]}


def markdown(result: dict) -> str:
    rows = result["rows"]
    summary = []
    for r in rows:
        fid = {f["name"]: f"{f['mean']:.3f} ({f['low']:.3f}-{f['high']:.3f})"
               for f in r.get("fidelity", [])}
        summary.append({"config": r["config"], "verdict": r["outcome"],
                        "ran as": f"{r['applied']['dtype']} / {r['applied']['quant']}",
                        "setup_s": r["setup_s"], "render_s": r.get("render_s"),
                        "score_s": r.get("score_s"), **fid})
    cols = ["config", "verdict", "ran as", "MCD (dB)", "PESQ-WB", "STOI", "setup_s",
            "render_s", "score_s"]
    checks = [{"config": r["config"], **_check_cells(c)} for r in rows for c in r.get("checks",
                                                                                     [])]
    s = result["settings"]
    parts = [f"# Quality verdicts for the default voice ({result['meta'].get('device', '')})",
             *header(result), "",
             f"Sentences: {result['sentences']} from the sets {', '.join(result['sets'])}, one "
             f"per call, seed {BASE.seed} on both sides{_left_out(result)}. Baseline scored in "
             f"{result['baseline_s']} s ({'from the cache' if result['cache_hit'] else 'now'}); "
             f"scoring workers: {result['workers']}.", "",
             f"Rule: each check is judged on the paired per-sentence change with a "
             f"{s['confidence']:.0%} percentile bootstrap interval ({s['resamples']} resamples "
             f"over sentences): pass when the interval lies within the tolerance (every MOS "
             f"proxy may drop {s['mos_tolerance']:.0%} of the baseline's mean, WER may grow "
             f"{s['wer_points'] * 100:g} points and CER {s['cer_points'] * 100:g}), fail when "
             "it lies beyond, otherwise inconclusive with the sentences that would settle it. "
             "WER and CER are judged as the change over the recogniser's floor (its own rate on "
             "the baseline), never as absolutes.", "",
             "## Verdicts and fidelity to the fp32 waveform (mean, 95% CI)", "",
             markdown_table(summary, cols), "## Every check", "",
             markdown_table(checks, ["config", "metric", "baseline", "candidate",
                                     "change (95% CI)", "verdict"])]
    for r in rows:
        if not r.get("worst"):
            continue
        parts += [f"## Worst sentences: {r['config']}", "",
                  "| # | why | text | fp32 heard | candidate heard | WER change | audio |",
                  "|---|---|---|---|---|---|---|"]
        for w in r["worst"]:
            links = f"[fp32]({w['baseline']}) · [candidate]({w['candidate']})"
            parts.append(f"| {w['index'] + 1} | {', '.join(w['reasons'])} | {w['text']} | "
                         f"{w['baseline_transcript']} | {w['candidate_transcript']} | "
                         f"{w['wer_delta'] * 100:+.0f} points | {links} |")
        parts.append("")
    if result.get("notes"):
        parts += ["", "Notes: " + "\n\n".join(result["notes"])]
    return "\n".join(parts) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=None, help=f"comma-separated, of {list(VARIANTS)}")
    ap.add_argument("--sets", default=",".join(SETS), help="the lab's sentence sets")
    ap.add_argument("--quick", action="store_true", help="four short sentences; bf16, "
                    "streamed and int8-static")
    ap.add_argument("--workers", type=int, default=default_workers(),
                    help="scoring processes (1: score in this process)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=None,
                    help="score cache folder (default: the lab's data folder)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--render", action="store_true", help="rewrite the .md from the .json")
    args = ap.parse_args()
    stem = STEM + "_quick" * args.quick
    if args.render:
        result = json.loads((args.out / f"{stem}.json").read_text())
        (args.out / f"{stem}.md").write_text(markdown(result))
        return None
    sets = args.sets.split(",")
    texts, left_out = texts_of(sets, args.quick)
    names = args.rows.split(",") if args.rows else list(QUICK_ROWS if args.quick else VARIANTS)
    audio_dir = args.out / f"{stem}_audio"
    with pinned_threads(args.threads) as threads:
        began = time.perf_counter()
        base, hit = scored_baseline(texts, to_dict(BASE), BASE.seed,
                                    lambda: renderer(Pipeline(BASE)),
                                    cache=ScoreCache(args.cache), workers=args.workers)
        baseline_s = round(time.perf_counter() - began, 1)
        print(f"baseline: {'cache hit' if hit else 'rendered and scored'} in {baseline_s} s",
              flush=True)
        rows = []
        for name in names:
            rows.append(judge_row(name, base, texts, args.workers, audio_dir))
            print(f"{name}: {rows[-1]['outcome']}", flush=True)
    result = {"meta": run_meta(command="python " + " ".join(sys.argv), threads=threads),
              "sets": ["short (first 4)"] if args.quick else sets, "sentences": len(texts),
              "weights": "the embedded Piper voice (real weights)",
              "baseline": "fp32, one-shot, seed 0, same sentences one per call",
              "settings": {"mos_tolerance": MOS_TOLERANCE, "wer_points": WER_POINTS,
                           "cer_points": CER_POINTS, "confidence": CONFIDENCE,
                           "resamples": RESAMPLES},
              "workers": args.workers, "baseline_s": baseline_s, "cache_hit": hit,
              "left_out": left_out, "anomalies": [], "notes": [], "rows": rows}
    write_json(result, args.out, stem)
    (args.out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))
    return None


if __name__ == "__main__":
    main()
