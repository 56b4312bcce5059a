"""Which codec shape for the lab's own voice: frames per group x residual levels, by measurement.

    python benchmarks/voice_codec.py --train-texts 1500 --out benchmarks/results
    python benchmarks/voice_codec.py --codebooks lab/data/voice/codebooks.safetensors ...
    python benchmarks/voice_codec.py --groupings "" --decoder lab/data/voice/decoder.safetensors \
        --keep-rows

Renders `--train-texts` generated training sentences with the teacher (CPU is fine: no vocoder
runs), fits residual codebooks for each grouping, then resynthesizes held-out sentences (the
lab's short, medium and long sets plus generated held-out ones) through each candidate and meters
them as the lab meters everything: DNSMOS OVRL and pocketsphinx WER, against the teacher's own
take of the same sentence with the same noise. Residual levels nest (the first L levels of an
RVQ are an L-level RVQ), so one fit per grouping gives every level count. `--codebooks` adds the
rows of a shipped codebook file; `--decoder` a row for a learned decoder of the shipped codes
(`lab.models.latent_decoder`), and `--keep-rows` keeps the rows of an earlier run that this one
does not measure (the sentences and seeds are the same). The lab's target: within 5%
of the teacher's DNSMOS OVRL and +2 WER points, at the lowest token rate.

Writes `<stem>.json` and `<stem>.md` (`voice_codec` by default). `--sets ""` with
`--eval-skip K` scores generated held-out sentences K.. only: sentences no choice was made on.
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
from lab.models.latent_decoder import LatentDecoder, load_decoder
from lab.models.voice_weights import CODEBOOK_FILE, WEIGHTS_DIR
from lab.quality.report import evaluate
from lab.training.rvq import train_rvq
from lab.training.teacher import Teacher
from lab.training.textgen import held_out_texts, make_split

MOS_TOLERANCE, WER_POINTS = 0.05, 0.02


def resynth(teacher: Teacher, latents: torch.Tensor, books: torch.Tensor | None,
            levels: int, decoder: LatentDecoder | None = None) -> torch.Tensor:
    """The voice's generator on latents, or on their codes through the first `levels` levels,
    decoded by the sum of codebook rows or by a learned decoder."""
    z = latents
    if books is not None:
        shape = shape_of(books)
        vectors = group_latents(latents, shape.group_frames)
        codes = quantize(vectors, books[:levels])
        with torch.inference_mode():
            z = (dequantize(codes, books[:levels]).reshape(-1, shape.channels) if decoder is None
                 else decoder(codes[None])[0].T)[:len(latents)]
    with torch.inference_mode():
        return teacher.backend.model.vocode(z.T[None], torch.ones(1, 1, len(z)))[0]


def score(teacher: Teacher, takes, texts, books, levels, decoder=None) -> dict:
    scores = [evaluate(resynth(teacher, t.latents, books, levels, decoder).numpy(), 22050, text)
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
    ap.add_argument("--eval-skip", type=int, default=0,
                    help="skip this many generated held-out sentences before those scored")
    ap.add_argument("--sets", default="short,medium,long", help="the lab's sentence sets scored")
    ap.add_argument("--stem", default="voice_codec")
    ap.add_argument("--groupings", default="2:3,4:5,8:8", help="frames:max levels, ...")
    ap.add_argument("--codebook-size", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--codebooks", type=Path, action="append", default=[])
    ap.add_argument("--decoder", type=Path, action="append", default=[],
                    help="a learned decoder of the shipped codes (lab/data/voice)")
    ap.add_argument("--keep-rows", action="store_true",
                    help="keep an earlier run's rows that this run does not measure")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    teacher = Teacher("cpu")
    n_sets = len(held_out_texts())
    split = make_split(args.train_texts, args.eval_skip + args.eval_generated, args.seed)
    evals = [t for name in filter(None, args.sets.split(",")) for t in sentence_set(name)]
    evals += split.held_out[n_sets + args.eval_skip:]
    eval_ids = [teacher.ids(t)[0] for t in evals]
    eval_takes = list(teacher.takes(eval_ids, batch_size=8, seed=10**6))
    base = score(teacher, eval_takes, evals, None, 0)
    rows = [row("teacher", None, 0, base, base)]
    specs = [tuple(int(x) for x in spec.split(":")) for spec in args.groupings.split(",") if spec]
    hours = fit_rows(teacher, split.train, specs, args, rows, (eval_takes, evals, base))
    for path in args.codebooks:
        books = load_codebooks(path)
        shape = shape_of(books)
        for n in range(2, shape.levels + 1):
            rows.append(row(path.name, shape, n, score(teacher, eval_takes, evals, books, n),
                            base))
    shipped = WEIGHTS_DIR / CODEBOOK_FILE
    for path in args.decoder:
        books = load_codebooks(shipped)
        rows.append(row(f"{shipped.name} + learned decoder", shape_of(books), len(books),
                        score(teacher, eval_takes, evals, books, len(books),
                              load_decoder(path, books)), base))
        print(rows[-1], flush=True)
    notes: list[str] = []
    if args.keep_rows:
        rows, hours, notes = kept(args.out / f"{args.stem}.json", rows, hours, notes)
    sentences = f"sets {args.sets or 'none'}; generated held-out {args.eval_skip}.." \
                f"{args.eval_skip + args.eval_generated - 1}"
    write(args.out / args.stem, rows, run_meta(sentences=sentences), len(evals), hours, notes)


def fit_rows(teacher: Teacher, texts: list[str], specs: list[tuple[int, int]], args,
             rows: list[dict], evaluation) -> float | None:
    """Rows for residual k-means fit here, per (frames, max levels); the hours fit on."""
    if not specs:
        return None
    ids = [i for t in texts for i in teacher.ids(t)]
    latents = [t.latents for t in tqdm(teacher.takes(ids, batch_size=32, seed=args.seed),
                                       total=len(ids), desc="teacher")]
    hours = sum(len(x) for x in latents) * HOP / 22050 / 3600
    for frames, levels in specs:
        vectors = torch.cat([group_latents(x, frames) for x in latents])
        books = train_rvq(vectors, levels, args.codebook_size, args.iters, args.seed)
        shape = CodecShape(frames, levels, args.codebook_size)
        for n in range(2, levels + 1):
            rows.append(row(f"k-means, {hours:.1f} h", shape, n,
                            score(teacher, *evaluation[:2], books, n), evaluation[2]))
            print(rows[-1], flush=True)
    return hours


def kept(path: Path, rows: list[dict], hours: float | None, notes: list[str]
         ) -> tuple[list[dict], float | None, list[str]]:
    """An earlier run's rows first, replaced where this run measured the same candidate; the
    hours its k-means rows were fit on unless this run fit its own; its notes, and its command
    for the rows it made."""
    key = lambda r: (r["codebooks"], r["group_frames"], r["levels"])  # noqa: E731
    new = {key(r): r for r in rows}
    old = json.loads(path.read_text()) if path.is_file() else {"rows": [], "meta": {}}
    merged = [new.pop(key(r), r) for r in old["rows"]]
    earlier = old.get("notes", [])
    command = old["meta"].get("command")
    if command and not any(command in n for n in earlier):
        earlier = [*earlier, f"Rows this run did not measure come from `python {command}`."]
    return (merged + list(new.values()), hours if hours is not None else old.get("train_hours"),
            earlier + notes)


def write(stem: Path, rows: list[dict], meta: dict, n_eval: int, hours: float | None,
          notes: list[str]) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    report = {"meta": meta, "eval_sentences": n_eval,
              "train_hours": hours and round(hours, 2), "notes": notes,
              "criterion": f"DNSMOS OVRL >= {1 - MOS_TOLERANCE:.0%} of the teacher's and WER <= "
                           f"teacher + {WER_POINTS * 100:.0f} points", "rows": rows}
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    head = ["codebooks", "group_frames", "levels", "codebook_size", "tokens_per_s",
            "dnsmos_ovrl", "wer", "meets_criterion"]
    text = (f"# Voice codec candidates\n\nResynthesis of {n_eval} held-out sentences "
            f"({meta['sentences']}) through each candidate, "
            f"against the teacher's own take (real weights, CPU). Criterion: "
            f"{report['criterion']}, at the lowest token rate. Command: "
            f"`python {meta['command']}`.\n\n" + "".join(f"- {n}\n" for n in notes) + "\n"
            + markdown_table(rows, head))
    stem.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
