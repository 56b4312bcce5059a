"""Make the lab's own voice's training corpus from generated text and the Piper teacher.

    python scripts/make_voice_data.py phonemize --train 26000 --held-out 300 --out runs/voice
    python scripts/make_voice_data.py render --data runs/voice --device cuda

`phonemize` runs where espeak-ng does (any CPU) and writes `phonemized.npz`: the generated
training texts, the held-out texts (the lab's sentence sets plus generated ones), and the
teacher's phoneme ids. `render` runs the teacher on the device, fits the codec's residual
codebooks on the training sentences, and writes `corpus.npz` and `codebooks.safetensors`.
Both are seeded: the same arguments give the same files.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from lab.models.latent_codec import CodecShape, save_codebooks
from lab.training.corpus import Phonemized
from lab.training.make_data import phonemize, render
from lab.training.teacher import Teacher
from lab.training.textgen import make_split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    ph = sub.add_parser("phonemize")
    ph.add_argument("--train", type=int, default=26000)
    ph.add_argument("--held-out", type=int, default=300)
    ph.add_argument("--seed", type=int, default=0)
    ph.add_argument("--out", type=Path, default=Path("runs/voice"))
    rd = sub.add_parser("render")
    rd.add_argument("--data", type=Path, default=Path("runs/voice"))
    rd.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    rd.add_argument("--shape", default="4,5,1024", help="group frames, levels, codebook size")
    rd.add_argument("--voice", default="default", help="the teacher's weights (load_voice)")
    rd.add_argument("--batch-size", type=int, default=128)
    rd.add_argument("--kmeans-iters", type=int, default=20)
    rd.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.stage == "phonemize":
        split = make_split(args.train, args.held_out, args.seed)
        args.out.mkdir(parents=True, exist_ok=True)
        data = phonemize(Teacher("cpu"), split.train, split.held_out)
        data.save(args.out / "phonemized.npz")
        print(f"{len(data.ids)} sentences ({int(data.held_out.sum())} held out) -> "
              f"{args.out / 'phonemized.npz'}")
        return
    start = time.perf_counter()
    shape = CodecShape(*(int(x) for x in args.shape.split(",")))
    data = Phonemized.load(args.data / "phonemized.npz")
    teacher = Teacher(args.device, voice=args.voice)
    corpus, books = render(teacher, data, shape, batch_size=args.batch_size, seed=args.seed,
                           kmeans_iters=args.kmeans_iters)
    corpus.save(args.data / "corpus.npz")
    save_codebooks(books.cpu(), args.data / "codebooks.safetensors")
    train = corpus.split(held_out=False)
    summary = {"sentences": len(corpus.texts), "train_sentences": len(train.texts),
               "train_hours": round(train.seconds / 3600, 2),
               "held_out_hours": round(corpus.split(held_out=True).seconds / 3600, 3),
               "shape": vars(shape), "seconds": round(time.perf_counter() - start, 1),
               "device": args.device}
    (args.data / "corpus.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
