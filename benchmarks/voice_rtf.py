"""Is the lab's voice faster than real time at batch 1 on this machine? Interleaved repeats.

    python benchmarks/voice_rtf.py --configs fp32 bf16 --rounds 5 --out benchmarks/results

Each config (`ar-voice-cpu` with one override) is loaded once and warmed; then every round
renders the same sentences (the lab's short and medium sets) one at a time through each config
in turn, so a slow moment of a shared machine falls on all configs alike. The real-time factor
is wall time over audio seconds, including the codec; a round's RTF is over all its sentences.
Reports the median and the best round per config. Writes voice_rtf_<device>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from tqdm import tqdm

from lab.bench.report import markdown_table, run_meta
from lab.config import load_preset
from lab.frontend import sentence_set
from lab.pipeline import Pipeline

CONFIGS = {"fp32": {"dtype": "fp32"}, "bf16": {"dtype": "bf16"},
           "kv dynamic": {"kv_cache": "dynamic"}, "int8-weight": {"quant": "int8-weight"}}
BASE = {"decode_interval": 12, "overlap": 2, "sampling.temperature": 0.4}


def one_round(pipe: Pipeline, sentences: list[str]) -> tuple[float, float]:
    """(wall seconds, audio seconds) for the sentences rendered one after another."""
    wall = audio = 0.0
    for text in sentences:
        start = time.perf_counter()
        result = pipe.synthesize(text)
        wall += time.perf_counter() - start
        audio += len(result.audio) / result.sample_rate
    return wall, audio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=["fp32", "bf16"], choices=list(CONFIGS))
    ap.add_argument("--sets", nargs="+", default=["short", "medium"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sentences = [t for name in args.sets for t in sentence_set(name)]
    pipes = {name: Pipeline(load_preset("ar-voice-cpu").replace(
        device=args.device, **{**BASE, **CONFIGS[name]})) for name in args.configs}
    rtfs: dict[str, list[float]] = {name: [] for name in pipes}
    audio: dict[str, float] = {}
    try:
        for pipe in pipes.values():
            one_round(pipe, sentences[:2])
        for _ in tqdm(range(args.rounds), desc="rounds"):
            for name, pipe in pipes.items():
                wall, audio[name] = one_round(pipe, sentences)
                rtfs[name].append(wall / audio[name])
    finally:
        for pipe in pipes.values():
            pipe.close()
    rows = [{"config": name, "rtf_median": round(statistics.median(r), 3),
             "rtf_best": round(min(r), 3), "rtf_worst": round(max(r), 3),
             "audio_s": round(audio[name], 1), "rounds": len(r)} for name, r in rtfs.items()]
    print(markdown_table(rows, list(rows[0])))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"voice_rtf_{args.device}"
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"meta": run_meta(device=args.device), "sets": args.sets, "base": BASE,
         "threads": args.threads, "rtf_per_round": rtfs, "rows": rows}, indent=2))
    (args.out / f"{stem}.md").write_text(
        f"# The lab's voice at batch 1: real-time factor ({args.device})\n\n"
        f"Real weights (`ar-voice`), the lab's {' and '.join(args.sets)} sentence sets "
        f"({len(sentences)} sentences, {args.threads} threads), one at a time, codec "
        f"included; {args.rounds} interleaved rounds. Base settings: {BASE}. Command: "
        f"`python benchmarks/voice_rtf.py --configs {' '.join(args.configs)} --rounds "
        f"{args.rounds}`.\n\n" + markdown_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
