"""Does the lab's voice end where it should? Every held-out sentence against the teacher.

    python benchmarks/voice_endings.py --sentences 200 --out benchmarks/results

Renders generated held-out sentences (never trained on) with the `ar-voice` family in batches
and the teacher (the embedded Piper voice, same frontend) one by one, and checks that each
utterance stopped on its own end token, not on the stop rule, within twice the teacher's
duration. Writes voice_endings.json and voice_endings.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from tqdm import tqdm

from lab.bench.report import markdown_table, run_meta
from lab.config import load_preset
from lab.pipeline import Pipeline
from lab.training.textgen import make_split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    texts = make_split(0, args.sentences, 0).held_out[-args.sentences:]
    voice = Pipeline(load_preset("ar-voice-cpu", batch_size=args.batch_size,
                                 **{"sampling.temperature": 0.4}))
    teacher = Pipeline(load_preset("cpu-default"))
    rows = []
    for start in tqdm(range(0, len(texts), args.batch_size), desc="batches"):
        chunk = texts[start:start + args.batch_size]
        before = len(voice.fallbacks)
        takes = voice.synthesize_batch(chunk)
        stopped = len([n for n in voice.fallbacks[before:] if "token" in n and "limit" in n])
        for text, take in zip(chunk, takes, strict=True):
            ref = teacher.synthesize(text)
            rows.append({"text": text, "seconds": round(len(take.audio) / take.sample_rate, 2),
                         "teacher_seconds": round(len(ref.audio) / ref.sample_rate, 2)})
        rows[-1]["stop_rule_fired_in_batch"] = stopped
    ratio = [r["seconds"] / r["teacher_seconds"] for r in rows]
    fired = sum(r.get("stop_rule_fired_in_batch", 0) for r in rows)
    summary = {"sentences": len(rows), "stop_rule_fired": fired,
               "within_2x_teacher": sum(x <= 2 for x in ratio),
               "ratio_median": round(statistics.median(ratio), 3),
               "ratio_max": round(max(ratio), 3), "ratio_min": round(min(ratio), 3)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "voice_endings.json").write_text(json.dumps(
        {"meta": run_meta(), "summary": summary, "rows": rows}, indent=1))
    (args.out / "voice_endings.md").write_text(
        "# The lab's voice: does every utterance end on its own?\n\n"
        f"{len(rows)} generated held-out sentences (never trained on), `ar-voice` real "
        f"weights (the `ar-voice-cpu` preset: dtype {voice.resolved.dtype}) at batch "
        f"{args.batch_size}, temperature 0.4, against the teacher's duration for the same "
        f"text. Command: `python benchmarks/voice_endings.py --sentences {args.sentences} "
        f"--batch-size {args.batch_size}`.\n\n"
        + markdown_table([summary]))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
