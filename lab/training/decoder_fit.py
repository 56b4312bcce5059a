"""Training the codec's learned decoder (`lab.models.latent_decoder`) on the teacher's latents.

The target of each code group is the latent frames it was made from. The loss adds two terms:
the mean squared error on the latents, and the L1 distance between log-mel spectra of the
voice's generator run on the decoded and on the true latents. The generator is what turns
latent error into sound, and it hears some directions far more than others; it stays frozen.
Runs are time-boxed and resume from a state file, so training goes on across commands.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from lab.mel import mel_filterbank
from lab.models.latent_codec import HOP, group_latents
from lab.models.latent_decoder import LatentDecoder

STATE_FILE = "decoder_state.pt"
LOG_FILE = "log.jsonl"
SAMPLE_RATE, N_FFT, N_MELS = 22050, 1024, 80


@dataclass
class DecoderTrainConfig:
    steps: int = 3000
    batch: int = 64
    crop_groups: int = 16
    lr: float = 1e-3
    mel_weight: float = 1.0
    eval_every: int = 250
    time_budget_s: float = float("inf")
    seed: int = 0


class Crops:
    """Crops of `crop_groups` whole groups, each inside one sentence, as (codes, latents)."""

    def __init__(self, codes: Sequence[torch.Tensor], latents: Sequence[torch.Tensor],
                 group_frames: int, crop_groups: int) -> None:
        self.gf, self.cg = group_frames, crop_groups
        self.codes = torch.cat(list(codes)).long()
        self.latents = torch.cat([group_latents(z, group_frames).reshape(-1, z.shape[1])
                                  for z in latents])
        starts, offset = [], 0
        for c in codes:
            if len(c) >= crop_groups:
                starts.append(torch.arange(offset, offset + len(c) - crop_groups + 1))
            offset += len(c)
        if not starts:
            raise ValueError(f"no sentence holds {crop_groups} groups")
        self.starts = torch.cat(starts).to(self.codes.device)

    def take(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        groups = starts[:, None] + torch.arange(self.cg, device=starts.device)
        frames = (starts * self.gf)[:, None] + torch.arange(self.cg * self.gf,
                                                            device=starts.device)
        return self.codes[groups], self.latents[frames].transpose(1, 2).float()

    def sample(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        pick = torch.randint(len(self.starts), (n,), generator=generator)
        return self.take(self.starts[pick.to(self.starts.device)])

    def spread(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`n` crops evenly spaced over the data: the same ones every evaluation."""
        index = torch.linspace(0, len(self.starts) - 1, n).long().to(self.starts.device)
        return self.take(self.starts[index])


class LogMel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        bank = torch.from_numpy(mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS)).float()
        self.register_buffer("bank", bank)
        self.register_buffer("window", torch.hann_window(N_FFT))

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(audio.float(), N_FFT, HOP, window=self.window, return_complex=True)
        return torch.log((self.bank @ spec.abs()).clamp_min(1e-5))


def losses(decoder: nn.Module, generator: nn.Module, mel: LogMel, codes: torch.Tensor,
           target: torch.Tensor, mel_weight: float) -> dict[str, torch.Tensor]:
    z = decoder(codes)
    latent = (z - target).pow(2).mean()
    with torch.no_grad():  # crops hold no padding: the generator's unmasked path
        heard = mel(generator(target, None))
    mel_l1 = (mel(generator(z, None)) - heard).abs().mean()
    return {"loss": latent + mel_weight * mel_l1, "latent_mse": latent, "mel_l1": mel_l1}


def _append(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def _evaluate(decoder, generator, mel, crops: Crops, config: DecoderTrainConfig) -> dict:
    decoder.eval()
    with torch.no_grad(), _amp(crops.codes.device):
        parts = losses(decoder, generator, mel, *crops.spread(4 * config.batch),
                       config.mel_weight)
    decoder.train()
    return {f"eval_{k}": float(v) for k, v in parts.items()}


def _amp(device: torch.device):
    return torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda")


def train_decoder(decoder: LatentDecoder, generator: nn.Module, train: Crops, held_out: Crops,
                  config: DecoderTrainConfig, run_dir: Path, stop_step: int | None = None
                  ) -> dict:
    """Train to `config.steps` (or stop early at `stop_step`, keeping that schedule), resuming
    from `run_dir` when it holds a state; returns the last evaluation. Each step draws its crops
    from its own seed, so a resumed run sees what one long run would have. When the first
    steps show that the time budget cannot hold them all, the schedule shrinks to what it
    can, so the learning rate still reaches its end. The log's `loss` and `eval_loss` feed
    `plot_losses`."""
    device = train.codes.device
    run_dir.mkdir(parents=True, exist_ok=True)
    generator = generator.to(device).eval().requires_grad_(False)
    mel = LogMel().to(device)
    decoder.to(device).train()
    opt = torch.optim.AdamW(decoder.parameters(), lr=config.lr, weight_decay=0.0)
    step, spent = _resume(run_dir, decoder, opt)
    log, start, first = run_dir / LOG_FILE, time.perf_counter(), step
    if step == 0:
        _append(log, {"step": 0, **_evaluate(decoder, generator, mel, held_out, config)})
    end = config.steps if stop_step is None else min(stop_step, config.steps)
    while step < end and time.perf_counter() - start < config.time_budget_s:
        rng = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
        with _amp(device):
            parts = losses(decoder, generator, mel, *train.sample(config.batch, rng),
                           config.mel_weight)
        for group in opt.param_groups:
            group["lr"] = lr_at(config, step)
        opt.zero_grad(set_to_none=True)
        parts["loss"].backward()
        nn.utils.clip_grad_norm_(decoder.parameters(), 1.0)
        opt.step()
        step += 1
        if step - first == 50:
            config = fit_to_budget(config, step, 50, time.perf_counter() - start, log)
            end = min(end, config.steps)
        if step % 25 == 0:
            _append(log, {"step": step, **{k: float(v.detach()) for k, v in parts.items()}})
        if step % config.eval_every == 0 or step == config.steps:
            _append(log, {"step": step, **_evaluate(decoder, generator, mel, held_out, config)})
    _save(run_dir, decoder, opt, step, spent + time.perf_counter() - start)
    return {"step": step, "planned_steps": config.steps,
            **_evaluate(decoder, generator, mel, held_out, config)}


def fit_to_budget(config: DecoderTrainConfig, step: int, done: int, spent: float,
                   log: Path) -> DecoderTrainConfig:
    """The schedule's length, cut to the steps that the rest of the budget holds (90% of it,
    leaving room for evaluations)."""
    room = int(0.9 * (config.time_budget_s - spent) * done / spent)
    if step + room >= config.steps:
        return config
    _append(log, {"event": "schedule cut to the time budget", "step": step,
                  "steps": step + room, "asked": config.steps})
    return replace(config, steps=step + room)


def lr_at(config: DecoderTrainConfig, step: int) -> float:
    """Linear warm-up over the first 5% of steps, then a cosine to zero."""
    warm = max(1, config.steps // 20)
    if step < warm:
        return config.lr * (step + 1) / warm
    return config.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / (config.steps - warm)))


def _save(run_dir: Path, decoder: nn.Module, opt, step: int, elapsed: float) -> None:
    """Through a temporary file, so a command killed mid-write keeps the last state."""
    path = run_dir / STATE_FILE
    tmp = path.with_suffix(".tmp")
    torch.save({"decoder": decoder.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "elapsed_s": elapsed}, tmp)
    os.replace(tmp, path)


def _resume(run_dir: Path, decoder: nn.Module, opt) -> tuple[int, float]:
    path = run_dir / STATE_FILE
    if not path.is_file():
        return 0, 0.0
    state = torch.load(path, map_location=next(decoder.parameters()).device)
    decoder.load_state_dict(state["decoder"])
    opt.load_state_dict(state["optimizer"])
    return state["step"], state["elapsed_s"]
