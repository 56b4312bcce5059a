"""Train the lab's own voice LM on its corpus, in time-boxed runs that resume.

    python scripts/train_voice.py --data runs/voice --deadline-s 560 --out OUT_DIR

Each run goes on from `DATA/train/state.pt`, or else from a portable export in `--resume-from`
(what an earlier run left in its OUT_DIR), stops before `--deadline-s` seconds after this
script started, and writes to `--out`: the portable export (bf16 weight shards, index, loss
log), the shipped-format weights `lm.safetensors` (fp16, config in the header), the codebooks
it was trained against and the loss curve `loss.svg`. The model's shape is chosen for the CPU:
batch 1 must run faster than real time on two cores through the engine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from lab.engine.llm import LM, LMConfig
from lab.models.voice_format import VoiceLayout
from lab.models.voice_weights import save_voice_lm
from lab.training.checkpoint import export_portable, import_portable, load_state
from lab.training.corpus import VoiceCorpus
from lab.training.loss_plot import plot_losses
from lab.training.trainer import TrainConfig, init_weights, train

START = time.perf_counter()


def lm_config(layout: VoiceLayout, args) -> LMConfig:
    return LMConfig(vocab_size=layout.vocab_size, dim=args.dim, n_layers=args.layers,
                    n_heads=args.dim // 64, n_kv_heads=args.kv_heads,
                    intermediate_size=args.intermediate, rope_base=10000.0,
                    tie_embeddings=True, max_seq_len=args.max_len)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("runs/voice"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--resume-from", type=Path)
    ap.add_argument("--deadline-s", type=float, default=560.0)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--total-steps", type=int, default=6000)
    ap.add_argument("--batch-tokens", type=int, default=65536)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    corpus = VoiceCorpus.load(args.data / "corpus.npz")
    layout = VoiceLayout(levels=corpus.shape.levels, codebook_size=corpus.shape.codebook_size)
    run_dir = args.data / "train"
    if args.resume_from and load_state(run_dir) is None:
        print("resuming from the portable export at step",
              import_portable(args.resume_from, run_dir))
    train_seqs, train_prompts = corpus.split(held_out=False).sequences(layout)
    eval_seqs, eval_prompts = corpus.split(held_out=True).sequences(layout)
    model = init_weights(LM(lm_config(layout, args)), seed=0).to(device)
    print(f"{model.cfg.n_params / 1e6:.2f} M parameters; {len(train_seqs)} training "
          f"sentences ({corpus.split(held_out=False).seconds / 3600:.1f} h)")
    config = TrainConfig(lr=args.lr, total_steps=args.total_steps,
                         warmup_steps=min(300, args.total_steps // 10),
                         eval_every=max(1, args.total_steps // 20),
                         batch_tokens=args.batch_tokens, max_len=args.max_len,
                         compile=not args.no_compile and device.type == "cuda",
                         time_budget_s=args.deadline_s - (time.perf_counter() - START) - 30)
    result = train(model, train_seqs, train_prompts, config, run_dir, eval_sequences=eval_seqs,
                   eval_prompt_lengths=eval_prompts, layout=layout)
    print(json.dumps({k: str(v) for k, v in vars(result).items()}, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    export_portable(run_dir, args.out)
    save_voice_lm(model, args.out / "lm.safetensors")
    shutil.copyfile(args.data / "codebooks.safetensors", args.out / "codebooks.safetensors")
    plot_losses(run_dir / "log.jsonl", args.out / "loss.svg")


if __name__ == "__main__":
    main()
