"""Does static int8 make the default voice faster on a CPU, and does it still sound the same?

    python benchmarks/voice_int8.py --out benchmarks/results
    python benchmarks/voice_int8.py --sets short --limit 3 --rounds 1 --out /tmp/smoke
    python benchmarks/voice_int8.py --render --out benchmarks/results

Each config (the Piper voice, one-shot decoding, `batch_size` = the largest batch measured) is
loaded once, with its set-up (int8-static's calibration and compilation) timed apart. Then every
round renders the sentence sets through each config in turn, one sentence per call (batch 1)
and in calls of `--batch-sizes` sentences, so a slow moment of a shared machine falls on all
configs alike. A pass's RTF is its wall time over its audio seconds; rows give the median pass
with its min-max, and `rtf_vs_fp32` the median over the fp32 row's at the same batch size (the
int8 target is 0.6 or less). `int8-static bf16` runs the float work between the int8 layers
in bf16. `--made-up N` adds N sentences drawn from the lab's own sentence generator
(`lab.frontend.fixed_length`: one clause, 40-60 characters), which no quality gate was tuned on and
which give a verdict the sets' 25 sentences cannot settle. The sound is each config's batch-1
take of every sentence (same seeds as fp32): DNSMOS OVRL and pocketsphinx WER, judged against
the fp32 row by the lab's gate as `voice_knobs.py` judges it, and PESQ against the fp32 take.
Writes voice_int8_<device>.json and .md (`--stem` names them otherwise); hand-written remarks
go in the JSON's `anomalies` and `notes` lists.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from voice_bench import header
from voice_knobs import score

from lab.bench.report import markdown_table, run_meta, write_json
from lab.config import PipelineConfig
from lab.frontend import sentence_set
from lab.frontend.fixed_length import made_up_sentences
from lab.metrics.repeats import pinned_threads
from lab.pipeline import Pipeline
from lab.quality import fidelity

CONFIGS = {"fp32": {"dtype": "fp32"}, "bf16": {"dtype": "bf16"},
           "int8-static": {"quant": "int8-static"},
           "int8-static bf16": {"quant": "int8-static", "dtype": "bf16"},
           "fp32 compiled": {"compile": "default"}}
COLUMNS = ["config", "batch_size", "rtf", "rtf_vs_fp32", "setup_s", "dnsmos_ovrl", "wer",
           "pesq_vs_fp32", "verdict", "applied", "fallbacks"]


def one_pass(pipe: Pipeline, texts: list[str], batch: int) -> tuple[float, list[np.ndarray]]:
    """(RTF, the takes) for the texts rendered `batch` at a time."""
    wall = audio = 0.0
    takes = []
    for start in range(0, len(texts), batch):
        begin = time.perf_counter()
        results = pipe.synthesize_batch(texts[start:start + batch])
        wall += time.perf_counter() - begin
        audio += sum(len(r.audio) / r.sample_rate for r in results)
        takes += [r.audio for r in results]
    return wall / audio, takes


def load(names: list[str], device: str, batch: int) -> tuple[dict[str, Pipeline], dict]:
    """One pipeline per config, with the seconds each took to load, calibrate and warm."""
    pipes, setup = {}, {}
    for name in names:
        begin = time.perf_counter()
        pipes[name] = Pipeline(PipelineConfig(device=device, stream=False, batch_size=batch,
                                              **CONFIGS[name]))
        setup[name] = round(time.perf_counter() - begin, 1)
        print(f"{name}: ready in {setup[name]} s; {pipes[name].fallbacks}", flush=True)
    return pipes, setup


def measure(pipes: dict[str, Pipeline], texts: list[str], sizes: list[int], rounds: int
            ) -> tuple[dict[tuple[str, int], list[float]], dict[str, list[np.ndarray]]]:
    """Per (config, batch size), the RTF of every round; and each config's batch-1 takes from
    the untimed first pass (which also meets any shape not yet compiled)."""
    takes = {name: one_pass(pipe, texts, 1)[1] for name, pipe in pipes.items()}
    for pipe in pipes.values():
        for size in sizes[1:]:
            one_pass(pipe, texts, size)
    rtfs: dict[tuple[str, int], list[float]] = {(n, s): [] for n in pipes for s in sizes}
    for round_ in range(rounds):
        for (name, size), values in rtfs.items():
            values.append(one_pass(pipes[name], texts, size)[0])
        print(f"round {round_ + 1}/{rounds}", flush=True)
    return rtfs, takes


def sound(takes: dict[str, list[np.ndarray]], texts: list[str], rate: int) -> dict[str, dict]:
    """DNSMOS, WER and the lab's verdict per config (as voice_knobs.py scores its rows), and
    PESQ against the fp32 take of the same sentence."""
    rows = [{"config": name} for name in takes]
    score(rows, takes, texts)
    for row in rows:
        row["pesq_vs_fp32"] = round(statistics.fmean(
            fidelity(a, ref, rate).pesq_wb
            for a, ref in zip(takes[row["config"]], takes["fp32"], strict=True)), 2)
    return {row.pop("config"): row for row in rows}


def rows_of(rtfs, setup, quality, pipes) -> list[dict]:
    rows = []
    for (name, size), values in rtfs.items():
        rtf = statistics.median(values)
        base = statistics.median(rtfs[("fp32", size)])
        applied = pipes[name].backend.applied()
        rows.append({"config": name, "batch_size": size, "rtf": round(rtf, 4),
                     "rtf_min": round(min(values), 4), "rtf_max": round(max(values), 4),
                     "rtf_vs_fp32": round(rtf / base, 3), "setup_s": setup[name],
                     **quality[name], "applied": f"{applied['dtype']} / {applied['quant']}",
                     "fallbacks": "; ".join(pipes[name].fallbacks)[:300],
                     "rtf_per_round": values})
    return rows


def write(result: dict, out: Path, stem: str) -> None:
    write_json(result, out, stem)
    table = markdown_table(result["rows"], COLUMNS)
    parts = [f"# Static int8 on the default voice ({result['meta'].get('device', '')})",
             *header(result), "",
             f"Sentences: {result['sentences']} from the sets {', '.join(result['sets'])}; "
             "`rtf` is the median round (min-max in the JSON), `rtf_vs_fp32` that median over "
             "fp32's at the same batch size, `setup_s` the seconds to load the config "
             "(int8-static: calibration and compilation included). Sound: batch-1 takes, "
             "verdict against fp32 (paired bootstrap over sentences: every MOS proxy within 5%, "
             "WER and CER within +2 points; pass, fail or inconclusive).", "", table]
    if result.get("notes"):
        parts += ["", "Notes: " + "\n\n".join(result["notes"])]
    (out / f"{stem}.md").write_text("\n".join(parts) + "\n")
    print("\n".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=["fp32", "bf16", "int8-static"],
                    choices=list(CONFIGS))
    ap.add_argument("--sets", default="short,medium", help="the lab's sentence sets")
    ap.add_argument("--limit", type=int, help="only the first N sentences (a smoke run)")
    ap.add_argument("--made-up", type=int, default=0,
                    help="add N sentences from the lab's sentence generator")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--stem", help="file name of the results (default voice_int8_<device>)")
    ap.add_argument("--render", action="store_true", help="rewrite the .md from the .json")
    args = ap.parse_args()
    stem = args.stem or f"voice_int8_{args.device}"
    if args.render:
        return write(json.loads((args.out / f"{stem}.json").read_text()), args.out, stem)
    sets = args.sets.split(",")
    texts = [t for name in sets for t in sentence_set(name)]
    if args.made_up:
        texts += made_up_sentences(args.made_up)
        sets.append(f"{args.made_up} made up")
    texts = texts[:args.limit]
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    names = ["fp32", *(n for n in args.configs if n != "fp32")]
    with pinned_threads(args.threads) as threads:
        pipes, setup = load(names, args.device, max(sizes))
        try:
            rtfs, takes = measure(pipes, texts, sizes, args.rounds)
            rows = rows_of(rtfs, setup, sound(takes, texts, pipes["fp32"].sample_rate), pipes)
        finally:
            for pipe in pipes.values():
                pipe.close()
    meta = run_meta(command="python " + " ".join(sys.argv), threads=threads,
                    repeats=args.rounds)
    write({"meta": meta, "sets": sets, "sentences": len(texts), "batch_sizes": sizes,
           "weights": "the embedded Piper voice (real weights)",
           "baseline": "the fp32 row at the same batch size, same process, rounds interleaved",
           "anomalies": [], "notes": [], "rows": rows}, args.out, stem)


if __name__ == "__main__":
    main()
