"""Which optimisations keep the lab's own voice: every autoregressive knob on real speech.

    python benchmarks/voice_knobs.py --device cpu --out benchmarks/results
    python benchmarks/voice_knobs.py --device cuda --phonemes P.json --audio-out OUT/audio.npz
    python benchmarks/voice_knobs.py --score OUT/audio.npz --out benchmarks/results

Each row is one config of the `ar-voice` family (real weights) rendering the same held-out
sentences with the same seeds, in this one process after a warm-up: ms per decode step (median
over the run's steps), real-time factor, time to first audio of a streamed sentence, and the
sound, DNSMOS OVRL and pocketsphinx WER, judged against the fp32 row by the lab's paired verdict
(every MOS proxy within 5%, WER and CER within +2 points, on 95% bootstrap intervals over the
sentences: pass, fail or inconclusive). A GPU machine without the meters saves the audio
(`--audio-out`); `--score` meters it here and writes the table. Batch rows render the text
set as one batch of `batch_size` concurrent requests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from lab.bench.report import markdown_table, run_meta
from lab.config import load_preset
from lab.frontend import sentence_set
from lab.pipeline import Pipeline
from lab.training.textgen import make_split

ROWS = {
    "fp32": {"dtype": "fp32"}, "bf16": {"dtype": "bf16"}, "fp16": {"dtype": "fp16"},
    "int8-weight": {"quant": "int8-weight"}, "int8-dynamic": {"quant": "int8-dynamic"},
    "int4-weight": {"dtype": "bf16", "quant": "int4-weight"},
    "fp8": {"dtype": "bf16", "quant": "fp8"},
    "kv dynamic": {"kv_cache": "dynamic"}, "kv none": {"kv_cache": "none"},
    "batch 8": {"batch_size": 8}, "batch 64": {"batch_size": 64},
    "interval 6": {"decode_interval": 6}, "interval 24": {"decode_interval": 24},
    "cuda graph": {"cuda_graphs": True}, "compile": {"compile": "default"},
}
CPU_ROWS = ("fp32", "bf16", "int8-weight", "int8-dynamic", "int4-weight", "kv dynamic",
            "kv none", "batch 8", "interval 6", "interval 24", "compile")
BASE = {"decode_interval": 12, "overlap": 2, "sampling.temperature": 0.4}


def texts(n_generated: int, sets: list[str], per_set: int | None = None) -> list[str]:
    """The first `per_set` sentences (all by default) of each of the lab's named sets, plus
    generated held-out sentences."""
    held = [t for name in sets for t in sentence_set(name)[:per_set]]
    return held + make_split(0, n_generated, 0).held_out[-n_generated:] * (n_generated > 0)


def run_row(name: str, device: str, model: str,
            sentences: list[str]) -> tuple[dict, list[np.ndarray]]:
    cfg = load_preset("ar-voice-cpu").replace(device=device, model=model, **{**BASE, **ROWS[name]})
    pipe = Pipeline(cfg)
    try:
        ttfa = [pipe.synthesize(s).metrics.ttfb_ms for s in sentences[:3]]
        reps = max(1, cfg.batch_size // len(sentences)) + (cfg.batch_size > len(sentences))
        start = time.perf_counter()
        results = pipe.synthesize_batch((sentences * reps)[:max(len(sentences),
                                                                 cfg.batch_size)])
        wall = time.perf_counter() - start
        audio = sum(len(r.audio) / r.sample_rate for r in results)
        steps = [ms for r in results for ms in r.metrics.step_ms]
        row = {"config": name, "ms_per_step": round(statistics.median(steps), 2),
               "rtf": round(wall / audio, 3), "ttfa_ms": round(statistics.median(ttfa), 1),
               "audio_s": round(audio, 1), "fallbacks": "; ".join(pipe.fallbacks)[:200]}
        return row, [r.audio for r in results[:len(sentences)]]
    finally:
        pipe.close()


def score(rows: list[dict], takes: dict[str, list[np.ndarray]], sentences: list[str]) -> None:
    """DNSMOS OVRL and WER per row, and the verdict against the fp32 row."""
    from lab.quality.report import compare, evaluate

    scores = {name: [evaluate(a, 22050, t) for a, t in zip(audios, sentences, strict=True)]
              for name, audios in takes.items()}
    for row in rows:
        own = scores[row["config"]]
        row["dnsmos_ovrl"] = round(statistics.fmean(s.mos.ovrl for s in own), 3)
        row["wer"] = round(statistics.fmean(s.wer for s in own), 3)
        report = compare(own, scores["fp32"])
        row["verdict"] = report.outcome  # pass, fail or inconclusive
        row["unsettled"] = "; ".join(f"{c.name}: {c.verdict}" for c in report.checks
                                     if c.outcome != "pass")


def save_audio(path: Path, rows: list[dict], takes: dict[str, list[np.ndarray]],
               device: str, sentences: list[str]) -> None:
    blobs = {f"{name}/{i}": (np.clip(a, -1, 1) * 32767).astype(np.int16)
             for name, audios in takes.items() for i, a in enumerate(audios)}
    meta = {"rows": rows, "names": list(takes), "texts": sentences, "device": device}
    np.savez_compressed(path, meta=json.dumps(meta), **blobs)


def write(out: Path, rows: list[dict], device: str, n: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"voice_knobs_{device}"
    (out / f"{stem}.json").write_text(json.dumps({"meta": run_meta(device=device),
                                                 "sentences": n, "rows": rows}, indent=2))
    head = ["run"] * ("run" in rows[0]) + ["config", "ms_per_step", "rtf", "ttfa_ms",
                                           "dnsmos_ovrl", "wer", "verdict", "fallbacks"]
    (out / f"{stem}.md").write_text(
        f"# The lab's voice: knobs on real speech ({device})\n\nReal weights (`ar-voice`, "
        f"lab/data/voice), {n} held-out sentences, same seeds in every row; verdict against "
        "the fp32 row (paired bootstrap over sentences: every MOS proxy within 5%, WER and "
        "CER within +2 points; pass, fail or inconclusive). Base settings: "
        f"{BASE}. Command: `python benchmarks/voice_knobs.py`.\n\n"
        + markdown_table(rows, head))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", default=None, help="comma-separated row names")
    ap.add_argument("--generated", type=int, default=6)
    ap.add_argument("--sets", default="short,medium,long", help="the lab's sentence sets")
    ap.add_argument("--per-set", type=int, help="only the first N sentences of each set")
    ap.add_argument("--limit", type=int, help="only the first N sentences (a smoke run)")
    ap.add_argument("--model", default="default", help="the weights directory")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--phonemes", type=Path, help="replay phonemes recorded with espeak-ng")
    ap.add_argument("--record-phonemes", type=Path)
    ap.add_argument("--audio-out", type=Path, help="save audio instead of scoring it here")
    ap.add_argument("--score", type=Path, nargs="+",
                    help="score audio saved by --audio-out (several runs: one table, each run "
                         "judged against its own fp32 row)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sentences = texts(args.generated, args.sets.split(","), args.per_set)[:args.limit]
    if args.record_phonemes:
        from voice_bench import record_phonemes

        return record_phonemes(sentences, "default", args.record_phonemes)
    if args.score:
        rows = []
        for run, path in enumerate(args.score, start=1):
            saved = np.load(path, allow_pickle=False)
            meta = json.loads(str(saved["meta"]))
            said = meta["texts"]
            takes = {name: [saved[f"{name}/{i}"].astype(np.float32) / 32767
                            for i in range(len(said))] for name in meta["names"]}
            score(meta["rows"], takes, said)
            rows += [{"run": run, **row} for row in meta["rows"]]
        return write(args.out, rows, meta["device"], len(said))
    if args.phonemes:
        from voice_bench import replay_phonemes

        replay_phonemes(args.phonemes)
    names = args.rows.split(",") if args.rows else (
        list(ROWS) if args.device == "cuda" else list(CPU_ROWS))
    rows, takes = [], {}
    for name in names:
        row, takes[name] = run_row(name, args.device, args.model, sentences)
        rows.append(row)
        print(row, flush=True)
        if args.audio_out:  # after every row: a run cut short still brings back what it did
            save_audio(args.audio_out, rows, takes, args.device, sentences)
    if args.audio_out:
        return None
    score(rows, takes, sentences)
    write(args.out, rows, args.device, len(sentences))


if __name__ == "__main__":
    main()
