"""Train the voice codec's learned decoder on teacher latents, in time-boxed runs that resume.

    python scripts/make_voice_data.py phonemize --train 12000 --out runs/decoder   # CPU
    python scripts/train_codec_decoder.py --data runs/decoder --voice VOICE_EXPORT \\
        --out OUT_DIR --device cuda --deadline-s 540

The teacher renders the training sentences' latents (the held-out ones only for evaluation),
the shipped codebooks code them, and the decoder learns to turn those codes back into the
latents (`lab.training.decoder_fit`). The codes are the ones the shipped language model was
trained on, so the model is unchanged. With `--forced`, every sentence also enters a second
time with the codes the voice's language model draws for it under teacher forcing
(`lab.training.forced_codes`), so the decoder learns the codes it will meet when the voice
speaks, not only those of true latents. Each run goes on from `DATA/decoder/decoder_state.pt`,
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

from lab.engine.llm import LM
from lab.models.latent_codec import group_latents, load_codebooks, quantize, shape_of
from lab.models.latent_decoder import LatentDecoder, load_decoder, save_decoder
from lab.models.voice_format import VoiceLayout, lm_phonemes, phoneme_groups
from lab.models.voice_weights import CODEBOOK_FILE, LM_FILE, WEIGHTS_DIR, load_voice_lm
from lab.training.corpus import Phonemized
from lab.training.decoder_fit import LOG_FILE, Crops, DecoderTrainConfig, train_decoder
from lab.training.forced_codes import Draw, forced_codes
from lab.training.loss_plot import plot_losses
from lab.training.teacher import Teacher

START = time.perf_counter()


def render(teacher: Teacher, ids: list[list[int]], books: torch.Tensor, batch_size: int,
           seed: int, lm: LM | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(codes, latents) per sentence, kept on the teacher's device; given the voice's `lm`,
    each sentence that fits its context comes a second time with the codes the model draws."""
    gf = shape_of(books).group_frames
    codes, latents, groups = [], [], []
    for take in teacher.takes(ids, batch_size=batch_size, seed=seed):
        z = take.latents.to(teacher.device)
        codes.append(quantize(group_latents(z, gf), books))
        latents.append(z.half())
        groups.append(phoneme_groups(take.durations, gf))
    if lm is None:
        return codes, latents
    layout = VoiceLayout(levels=books.shape[0], codebook_size=books.shape[1])
    drawn = forced_codes(lm, layout, [lm_phonemes(i) for i in ids], groups,
                         [c.cpu().numpy() for c in codes], Draw(), seed=seed)
    kept = [i for i, d in enumerate(drawn) if d is not None]
    return (codes + [torch.from_numpy(drawn[i]).to(teacher.device) for i in kept],
            latents + [latents[i] for i in kept])


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
    ap.add_argument("--forced", action="store_true",
                    help="also learn the voice LM's teacher-forced codes")
    ap.add_argument("--lm", type=Path, default=WEIGHTS_DIR / LM_FILE)
    args = ap.parse_args()
    device = torch.device(args.device)
    books = load_codebooks(args.codebooks).to(device)
    data = Phonemized.load(args.data / "phonemized.npz")
    ids = [a.tolist() for a in data.ids]
    train_ids = [i for i, h in zip(ids, data.held_out, strict=True) if not h]
    held_ids = [i for i, h in zip(ids, data.held_out, strict=True) if h]
    train_ids = train_ids[:args.sentences or None]
    teacher = Teacher(args.device, voice=args.voice)
    lm = (load_voice_lm(args.lm, device=device, dtype=torch.bfloat16 if device.type == "cuda"
                        else torch.float32)[0] if args.forced else None)
    gf = shape_of(books).group_frames
    train = Crops(*render(teacher, train_ids, books, 128, args.seed, lm), gf, 16)
    held = Crops(*render(teacher, held_ids, books, 128, 10**6, lm), gf, 16)
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
    result.update(train_hours=round(hours, 2), forced=args.forced, device=str(device),
                  seconds=round(time.perf_counter() - START, 1))
    print(json.dumps(result, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    save_decoder(decoder.cpu(), args.out / "decoder.safetensors")
    shutil.copyfile(run_dir / LOG_FILE, args.out / LOG_FILE)
    (args.out / "result.json").write_text(json.dumps(result, indent=1))
    plot_losses(run_dir / LOG_FILE, args.out / "loss.svg", title="Codec decoder loss")


if __name__ == "__main__":
    main()
