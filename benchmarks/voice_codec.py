"""Which codec shape for the lab's own voice: frames per group x residual levels, by measurement.

    python benchmarks/voice_codec.py --train-texts 1500 --out benchmarks/results
    python benchmarks/voice_codec.py --codebooks lab/data/voice/codebooks.safetensors ...

Renders `--train-texts` generated training sentences with the teacher (CPU is fine: no vocoder
runs), fits residual codebooks for each grouping, then resynthesizes held-out sentences (the
lab's short, medium and long sets plus generated held-out ones) through each candidate and meters
them as the lab meters everything: DNSMOS OVRL and pocketsphinx WER, against the teacher's own
take of the same sentence with the same noise. Residual levels nest (the first L levels of an
RVQ are an L-level RVQ), so one fit per grouping gives every level count. `--codebooks` adds the
rows of a shipped codebook file. The criterion is the issue's: within 5% of the teacher's DNSMOS
OVRL and +2 WER points, at the lowest token rate.

Writes voice_codec.json and voice_codec.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from tqdm import tqdm

from lab.bench.report import markdown_table, run_meta
from lab.frontend import sentence_set
from lab.models.latent_codec import (
    HOP,
    CodecShape,
    dequantize,
    group_latents,
    load_codebooks,
    quantize,
    shape_of,
)
from lab.quality.report import evaluate
from lab.training.rvq import train_rvq
from lab.training.teacher import Teacher
from lab.training.textgen import make_split

MOS_TOLERANCE, WER_POINTS = 0.05, 0.02


def resynth(teacher: Teacher, latents: torch.Tensor, books: torch.Tensor | None,
            levels: int) -> torch.Tensor:
    """The voice's generator on latents, or on their codes through the first `levels` levels."""
    z = latents
    if books is not None:
        shape = shape_of(books)
        vectors = group_latents(latents, shape.group_frames)
        codes = quantize(vectors, books[:levels])
        z = dequantize(codes, books[:levels]).reshape(-1, shape.channels)[:len(latents)]
    with torch.inference_mode():
        return teacher.backend.model.vocode(z.T[None], torch.ones(1, 1, len(z)))[0]


def score(teacher: Teacher, takes, texts, books, levels) -> dict:
    scores = [evaluate(resynth(teacher, t.latents, books, levels).numpy(), 22050, text)
              for t, text in zip(takes, texts, strict=True)]
    return {"dnsmos_ovrl": statistics.fmean(s.mos.ovrl for s in scores),
            "wer": statistics.fmean(s.wer for s in scores)}


def row(name: str, shape: CodecShape | None, levels: int, metrics: dict, teacher: dict) -> dict:
    rate = None if shape is None else levels * 22050 / (HOP * shape.group_frames)
    ok = (metrics["dnsmos_ovrl"] >= (1 - MOS_TOLERANCE) * teacher["dnsmos_ovrl"]
          and metrics["wer"] <= teacher["wer"] + WER_POINTS)
    return {"codebooks": name, "group_frames": shape and shape.group_frames, "levels": levels,
            "codebook_size": shape and shape.codebook_size,
            "tokens_per_s": rate and round(rate, 1), **{k: round(v, 3) for k, v in
                                                        metrics.items()},
            "meets_criterion": ok if shape else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-texts", type=int, default=1500)
    ap.add_argument("--eval-generated", type=int, default=12)
    ap.add_argument("--groupings", default="2:3,4:5,8:8", help="frames:max levels, ...")
    ap.add_argument("--codebook-size", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--codebooks", type=Path, action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    teacher = Teacher("cpu")
    split = make_split(args.train_texts, args.eval_generated, args.seed)
    evals = [t for name in ("short", "medium", "long") for t in sentence_set(name)]
    evals += split.held_out[-args.eval_generated:]
    eval_ids = [teacher.ids(t)[0] for t in evals]
    eval_takes = list(teacher.takes(eval_ids, batch_size=8, seed=10**6))
    train_ids = [i for t in split.train for i in teacher.ids(t)]
    latents = [t.latents for t in tqdm(teacher.takes(train_ids, batch_size=32, seed=args.seed),
                                       total=len(train_ids), desc="teacher")]
    hours = sum(len(x) for x in latents) * HOP / 22050 / 3600
    base = score(teacher, eval_takes, evals, None, 0)
    rows = [row("teacher", None, 0, base, base)]
    for spec in filter(None, args.groupings.split(",")):
        frames, levels = (int(x) for x in spec.split(":"))
        vectors = torch.cat([group_latents(x, frames) for x in latents])
        books = train_rvq(vectors, levels, args.codebook_size, args.iters, args.seed)
        shape = CodecShape(frames, levels, args.codebook_size)
        for n in range(2, levels + 1):
            rows.append(row(f"k-means, {hours:.1f} h", shape, n,
                            score(teacher, eval_takes, evals, books, n), base))
            print(rows[-1], flush=True)
    for path in args.codebooks:
        books = load_codebooks(path)
        shape = shape_of(books)
        for n in range(2, shape.levels + 1):
            rows.append(row(path.name, shape, n, score(teacher, eval_takes, evals, books, n),
                            base))
    write(args.out, rows, run_meta(), len(evals), hours)


def write(out: Path, rows: list[dict], meta: dict, n_eval: int, hours: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {"meta": meta, "eval_sentences": n_eval, "train_hours": round(hours, 2),
              "criterion": f"DNSMOS OVRL >= {1 - MOS_TOLERANCE:.0%} of the teacher's and WER <= "
                           f"teacher + {WER_POINTS * 100:.0f} points", "rows": rows}
    (out / "voice_codec.json").write_text(json.dumps(report, indent=2))
    head = ["codebooks", "group_frames", "levels", "codebook_size", "tokens_per_s",
            "dnsmos_ovrl", "wer", "meets_criterion"]
    text = (f"# Voice codec candidates\n\nResynthesis of {n_eval} held-out sentences through "
            f"each candidate, against the teacher's own take (real weights, CPU). Criterion: "
            f"{report['criterion']}. Command: `python benchmarks/voice_codec.py`.\n\n"
            + markdown_table(rows, head))
    (out / "voice_codec.md").write_text(text)


if __name__ == "__main__":
    main()
