"""Train the voice codec's learned decoder on teacher latents, in time-boxed runs that resume.

    python scripts/make_voice_data.py phonemize --train 12000 --out runs/decoder   # CPU
    python scripts/train_codec_decoder.py --data runs/decoder --voice VOICE_EXPORT \\
        --out OUT_DIR --device cuda --deadline-s 540

The teacher renders the training sentences' latents (the held-out ones only for evaluation),
the shipped codebooks code them, and the decoder learns to turn those codes back into the
latents (`lab.training.decoder_fit`). The codes are the ones the shipped language model was
trained on, so the model is unchanged. Each run goes on from `DATA/decoder/decoder_state.pt`,
or from an earlier run's `decoder.safetensors` (`--resume-from`, fresh optimizer), and writes
`decoder.safetensors`, the log and the loss curve to `--out`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from lab.models.latent_codec import group_latents, load_codebooks, quantize, shape_of
from lab.models.latent_decoder import LatentDecoder, load_decoder, save_decoder
from lab.models.voice_backend import CODEBOOK_FILE, WEIGHTS_DIR
from lab.training.corpus import Phonemized
from lab.training.decoder_fit import LOG_FILE, Crops, DecoderTrainConfig, train_decoder
from lab.training.loss_plot import plot_losses
from lab.training.teacher import Teacher

START = time.perf_counter()


def render(teacher: Teacher, ids: list[list[int]], books: torch.Tensor, batch_size: int,
           seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(codes, latents) per sentence, kept on the teacher's device."""
    gf = shape_of(books).group_frames
    codes, latents = [], []
    for take in teacher.takes(ids, batch_size=batch_size, seed=seed):
        z = take.latents.to(teacher.device)
        codes.append(quantize(group_latents(z, gf), books))
        latents.append(z.half())
    return codes, latents


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("runs/decoder"))
    ap.add_argument("--voice", default="default", help="the teacher's weights (load_voice)")
    ap.add_argument("--codebooks", type=Path, default=WEIGHTS_DIR / CODEBOOK_FILE)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--resume-from", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sentences", type=int, default=0, help="training sentences (0: all)")
    ap.add_argument("--deadline-s", type=float, default=540.0)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--mel-weight", type=float, default=1.0)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    device = torch.device(args.device)
    books = load_codebooks(args.codebooks).to(device)
    data = Phonemized.load(args.data / "phonemized.npz")
    ids = [a.tolist() for a in data.ids]
    train_ids = [i for i, h in zip(ids, data.held_out, strict=True) if not h]
    held_ids = [i for i, h in zip(ids, data.held_out, strict=True) if h]
    train_ids = train_ids[:args.sentences or None]
    teacher = Teacher(args.device, voice=args.voice)
    train = Crops(*render(teacher, train_ids, books, 128, args.seed), shape_of(books).group_frames,
                  16)
    held = Crops(*render(teacher, held_ids, books, 128, 10**6), shape_of(books).group_frames, 16)
    hours = len(train.latents) * 256 / 22050 / 3600
    print(f"teacher latents: {len(train_ids)} sentences, {hours:.1f} h, "
          f"{time.perf_counter() - START:.0f} s", flush=True)
    decoder = (load_decoder(args.resume_from, books.cpu()).requires_grad_(True)
               if args.resume_from else LatentDecoder.from_codebooks(books.cpu(),
                                                                     hidden=args.hidden))
    config = DecoderTrainConfig(steps=args.steps, batch=args.batch, lr=args.lr,
                                mel_weight=args.mel_weight, seed=args.seed,
                                time_budget_s=args.deadline_s - (time.perf_counter() - START)
                                - 30)
    run_dir = args.data / "decoder"
    result = train_decoder(decoder, teacher.backend.model.dec, train, held, config, run_dir)
    result.update(train_hours=round(hours, 2), seconds=round(time.perf_counter() - START, 1),
                  device=str(device))
    print(json.dumps(result, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    save_decoder(decoder.cpu(), args.out / "decoder.safetensors")
    shutil.copyfile(run_dir / LOG_FILE, args.out / LOG_FILE)
    (args.out / "result.json").write_text(json.dumps(result, indent=1))
    plot_losses(run_dir / LOG_FILE, args.out / "loss.svg", title="Codec decoder loss")


if __name__ == "__main__":
    main()
