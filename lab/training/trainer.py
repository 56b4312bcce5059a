"""The training loop of the lab's own voice LM: time-boxed, resumable, the same on CPU and GPU.

Training runs on a lent GPU in commands of at most ten minutes, so the loop stops itself before
`time_budget_s` and leaves a checkpoint, and a later call with the same data goes on in the same
batch order: an epoch is a seeded shuffle of length-bucketed batches, so the epoch number and the
position in it are all the order needs. CPUs run it in fp32, which is what the tests do.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from lab.engine.llm import LM
from lab.models.voice_format import VoiceLayout
from lab.training.checkpoint import LOG_FILE, STATE_FILE, TrainState, load_state, save_state

# Batch widths are rounded up to this: fewer shapes to compile, and aligned attention masks.
PAD_MULTIPLE = 64
# torch.compile specialises a batch of one row, and would compile again for it.
MIN_ROWS = 2
INIT_STD = 0.02
# The stop test reserves this many times the cost of one more step, eval and save.
SAFETY = 1.5
SAVE_GUESS_S = 2.0


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation knobs. Batch order and schedule follow from these and the data alone."""

    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 200
    total_steps: int = 5000
    batch_tokens: int = 65536
    max_len: int = 2048
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    betas: tuple[float, float] = (0.9, 0.95)
    seed: int = 0
    prompt_loss_weight: float = 0.0
    dtype: str = "bf16"  # autocast dtype on CUDA; CPUs emulate bf16, so they always run fp32
    compile: bool = True
    log_every: int = 10
    eval_every: int = 250
    ckpt_every_s: float = 120.0
    time_budget_s: float = 540.0

    def __post_init__(self) -> None:
        rules = {
            "lr > 0": self.lr > 0,
            "0 <= min_lr_ratio <= 1": 0 <= self.min_lr_ratio <= 1,
            "0 <= warmup_steps <= total_steps": 0 <= self.warmup_steps <= self.total_steps,
            "2 <= max_len <= batch_tokens": 2 <= self.max_len <= self.batch_tokens,
            "grad_clip > 0": self.grad_clip > 0,
            "prompt_loss_weight >= 0": self.prompt_loss_weight >= 0,
            "dtype in ('bf16', 'fp32')": self.dtype in ("bf16", "fp32"),
            "log_every, eval_every >= 1": min(self.log_every, self.eval_every) >= 1,
        }
        broken = [rule for rule, ok in rules.items() if not ok]
        if broken:
            raise ValueError(f"TrainConfig breaks {broken}: {self}")


@dataclass(frozen=True)
class TrainResult:
    step: int
    epoch: float
    loss: float | None  # mean train loss of the last logged window; None if no step ran
    eval_loss: float | None
    elapsed_s: float  # training wall time summed over every call of the run
    stop: str  # "total_steps", "stop_step" or "time_budget"
    state_path: Path

    @property
    def finished(self) -> bool:
        return self.stop == "total_steps"


@dataclass
class Batch:
    tokens: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor
    n_tokens: int  # real input tokens, pads left out


class Batches:
    """Sequences packed into batches of at most `batch_tokens` padded tokens.

    Packing length-sorted sequences keeps padding small. Equal lengths are ordered at random
    per epoch, so batches do not always hold the same sequences, and the batches are shuffled:
    both seeded by (seed, epoch), so an epoch can be rebuilt to resume inside it.
    """

    def __init__(self, sequences: Sequence, prompt_lengths: Sequence[int] | None,
                 batch_tokens: int, max_len: int, pad: int) -> None:
        if prompt_lengths is None or len(prompt_lengths) != len(sequences):
            raise ValueError("every sequence needs its prompt length")
        keep = [i for i, s in enumerate(sequences) if len(s) <= max_len]
        self.seqs = [np.asarray(sequences[i], np.int64) for i in keep]
        self.prompts = [int(prompt_lengths[i]) for i in keep]
        self.lengths = np.array([len(s) - 1 for s in self.seqs], np.int64)  # inputs per row
        self.dropped = len(sequences) - len(keep)
        bad = [i for i, (n, p) in enumerate(zip(self.lengths, self.prompts, strict=True))
               if not 1 <= p <= n]
        if not self.seqs or bad:
            raise ValueError(f"no sequence of at most max_len={max_len} tokens, or prompts "
                             f"that leave no token to predict (sequences "
                             f"{[keep[i] for i in bad[:5]]})")
        self.batch_tokens, self.max_len, self.pad = batch_tokens, max_len, pad

    def __len__(self) -> int:
        return len(self.seqs)

    def width(self, n: int) -> int:
        return min(-(-int(n) // PAD_MULTIPLE) * PAD_MULTIPLE, self.max_len)

    def _pack(self, order: np.ndarray) -> list[np.ndarray]:
        batches, rows = [], []
        for i in order:
            if rows and (len(rows) + 1) * self.width(self.lengths[i]) > self.batch_tokens:
                batches.append(np.array(rows))
                rows = []
            rows.append(i)
        return [*batches, np.array(rows)]

    def epoch(self, seed: int, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([seed, epoch])
        batches = self._pack(np.lexsort((rng.random(len(self)), self.lengths)))
        return [batches[i] for i in rng.permutation(len(batches))]

    def in_length_order(self) -> list[np.ndarray]:
        return self._pack(np.argsort(self.lengths, kind="stable"))

    def collate(self, rows: np.ndarray, prompt_weight: float, device: torch.device) -> Batch:
        """Inputs are each sequence but its last token, targets all but its first, both
        right-padded: causal attention keeps pads out of every real token's view.

        Rows of pads fill every batch up to `batch_tokens`: torch.compile picks kernels by
        size and compiled again mid-run (40 s on an H100) when a short last batch came first.
        """
        width = self.width(self.lengths[rows].max())
        b = max(len(rows), self.batch_tokens // width, MIN_ROWS)
        tokens = np.full((b, width), self.pad, np.int64)
        targets = np.zeros((b, width), np.int64)
        weights = np.zeros((b, width), np.float32)
        for r, i in enumerate(rows):
            n, seq = self.lengths[i], self.seqs[i]
            tokens[r, :n], targets[r, :n] = seq[:-1], seq[1:]
            weights[r, :n] = 1.0
            weights[r, : self.prompts[i] - 1] = prompt_weight  # targets that are prompt tokens
        positions = np.tile(np.arange(width), (b, 1))
        return Batch(*(torch.from_numpy(a).to(device) for a in (tokens, positions, targets,
                                                                  weights)),
                     int(self.lengths[rows].sum()))


def init_weights(model: LM, seed: int = 0) -> LM:
    """GPT-2's initialisation, which `LM` (written to load checkpoints) leaves out: N(0, 0.02),
    residual outputs shrunk with depth, norms at one. PyTorch's defaults would give a tied head
    N(0, 1) rows and first logits sqrt(dim) wide, and the first hundred steps undo that."""
    gen = torch.Generator().manual_seed(seed)
    residual = INIT_STD / math.sqrt(2 * model.cfg.n_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                std = residual if name.endswith(("attn.o.weight", "down.weight")) else INIT_STD
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return model


def lr_at(config: TrainConfig, step: int, age: int) -> float:
    """Linear warmup over the optimizer moments' first steps (`age`; again after a portable
    import, whose moments start fresh), times a cosine over `step` down to the floor."""
    warm = min(1.0, (age + 1) / max(1, config.warmup_steps))
    span = max(1, config.total_steps - config.warmup_steps)
    t = min(1.0, max(0.0, (step - config.warmup_steps) / span))
    floor = config.min_lr_ratio
    return config.lr * warm * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def batch_loss(model: LM, tokens, positions, targets, weights) -> torch.Tensor:
    """Weighted mean next-token cross-entropy; pads weigh 0, prompt tokens what config says."""
    logits = model(tokens, positions)
    ce = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    return (ce * weights.flatten()).sum() / weights.sum()


@torch.no_grad()
def evaluate(model: LM, data: Batches, amp, layout: VoiceLayout | None) -> dict:
    """Teacher-forced loss on continuation tokens and, given a layout, top-1 accuracy per code
    level (over the whole vocabulary, stricter than the decoder's constraint)."""
    model.eval()
    device = next(model.parameters()).device
    levels = layout.levels if layout else 0
    loss, weight = torch.zeros((), device=device), torch.zeros((), device=device)
    hits = torch.zeros(levels + 1, device=device)
    counts = torch.zeros(levels + 1, device=device)
    for rows in data.in_length_order():
        b = data.collate(rows, 0.0, device)
        with amp():
            logits = model(b.tokens, b.positions).flatten(0, 1).float()
        targets, w = b.targets.flatten(), b.weights.flatten()
        loss += (F.cross_entropy(logits, targets, reduction="none") * w).sum()
        weight += w.sum()
        if layout:
            code = targets - layout.audio_offset
            is_code = (code >= 0) & (code < levels * layout.codebook_size) & (w > 0)
            level = torch.where(is_code, code // layout.codebook_size, levels)
            right = (logits.argmax(-1) == targets).float()
            counts += torch.bincount(level, minlength=levels + 1)
            hits += torch.bincount(level, weights=right, minlength=levels + 1)
    model.train()
    out = {"eval_loss": (loss / weight).item()}
    if layout:
        out["eval_acc_level"] = (hits / counts.clamp_min(1))[:levels].tolist()
    return out


def _append(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


class _Run:
    """One call of `train`: model and optimizer, where the run stands, and what steps cost."""

    def __init__(self, model: LM, config: TrainConfig, run_dir: Path, data: Batches,
                 held: Batches | None, layout: VoiceLayout | None) -> None:
        self.t0 = time.monotonic()
        self.model, self.config, self.data, self.held, self.layout = (
            model, config, data, held, layout)
        self.state_path, self.log = run_dir / STATE_FILE, run_dir / LOG_FILE
        self.device = next(model.parameters()).device
        self.cuda = self.device.type == "cuda"
        self.params = list(model.parameters())
        self.opt = torch.optim.AdamW(
            [{"params": [p for p in self.params if p.dim() >= 2],
              "weight_decay": config.weight_decay},
             {"params": [p for p in self.params if p.dim() < 2], "weight_decay": 0.0}],
            lr=config.lr, betas=config.betas, fused=self.cuda)
        state = self._resume(run_dir)
        self.step, self.epoch, self.position, self.elapsed0 = (0, 0, 0, 0.0) if state is None \
            else (state.step, state.epoch, state.position, state.elapsed_s)
        self.first_step = self.step
        # Steps the optimizer moments have seen: the step count, or fewer after an import.
        self.age = max((int(s["step"]) for s in self.opt.state.values()), default=0)
        compiled = config.compile and self.cuda
        self.loss_fn = torch.compile(batch_loss, dynamic=True) if compiled else batch_loss
        self.batches = data.epoch(config.seed, self.epoch)
        self.step_s, self.eval_s, self.save_s = 0.0, 0.0, SAVE_GUESS_S
        self.last_loss = self.last_eval = None
        self.eval_step = -1
        self.window_loss = torch.zeros((), device=self.device)
        self.window_steps = self.window_tokens = 0
        self.window_t = self.last_save = time.monotonic()
        changed = [] if state is None else sorted(
            k for k, v in json.loads(json.dumps(asdict(config))).items()
            if state.train_config.get(k) != v)
        _append(self.log, {"event": "start", "step": self.step, "resumed": state is not None,
                           "moment_age": self.age, "changed": changed, "sequences": len(data),
                           "dropped": data.dropped, "eval_sequences": len(held or ()),
                           "device": str(self.device)})

    def _resume(self, run_dir: Path) -> TrainState | None:
        """Load `state.pt` into model and optimizer: moments from the state, knobs (lr, decay,
        fused) from this call, since a resume may well run on another machine."""
        state = load_state(run_dir)
        if state is None:
            return None
        if state.lm_config != asdict(self.model.cfg):
            raise ValueError(f"{self.state_path} holds a model shaped {state.lm_config}, not "
                             f"this model's {asdict(self.model.cfg)}")
        self.model.load_state_dict(state.model)
        if state.optimizer is not None:
            knobs = [{k: v for k, v in g.items() if k != "params"} for g in self.opt.param_groups]
            self.opt.load_state_dict(state.optimizer)
            for group, own in zip(self.opt.param_groups, knobs, strict=True):
                group.update(own)
        if "cpu" in state.rng:
            torch.set_rng_state(state.rng["cpu"])
        if "cuda" in state.rng and self.cuda:
            torch.cuda.set_rng_state(state.rng["cuda"])
        return state

    def amp(self):
        bf16 = self.cuda and self.config.dtype == "bf16"
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16)

    def elapsed(self) -> float:
        return self.elapsed0 + time.monotonic() - self.t0

    def where(self) -> dict:
        return {"step": self.step, "epoch": self.epoch + self.position / len(self.batches)}

    def stop_reason(self, stop_step: int | None) -> str | None:
        reserve = SAFETY * (self.step_s + self.save_s + (self.eval_s if self.held else 0.0))
        if self.step >= self.config.total_steps:
            return "total_steps"
        if stop_step is not None and self.step >= stop_step:
            return "stop_step"
        if time.monotonic() - self.t0 + reserve > self.config.time_budget_s:
            return "time_budget"
        return None

    def train_step(self) -> None:
        if self.position >= len(self.batches):
            self.epoch, self.position = self.epoch + 1, 0
            self.batches = self.data.epoch(self.config.seed, self.epoch)
        began = time.monotonic()
        batch = self.data.collate(self.batches[self.position], self.config.prompt_loss_weight,
                                  self.device)
        self.lr = lr_at(self.config, self.step, self.age)
        for group in self.opt.param_groups:
            group["lr"] = self.lr
        with self.amp():
            loss = self.loss_fn(self.model, batch.tokens, batch.positions, batch.targets,
                                batch.weights)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step, self.position, self.age = self.step + 1, self.position + 1, self.age + 1
        self.window_loss += loss.detach()
        self.window_steps += 1
        self.window_tokens += batch.n_tokens
        if self.step_s == 0.0:  # until the first logged window measures steps properly
            self.step_s = time.monotonic() - began

    def log_window(self) -> None:
        """The window's mean loss and speed: the one host sync of a logging interval."""
        now = time.monotonic()
        self.last_loss = self.window_loss.item() / self.window_steps
        self.step_s = (now - self.window_t) / self.window_steps
        tokens_per_s = self.window_tokens / (now - self.window_t)
        _append(self.log, {**self.where(), "loss": self.last_loss, "lr": self.lr,
                           "tokens_per_s": tokens_per_s, "elapsed": self.elapsed()})
        self.bar.set_postfix(loss=f"{self.last_loss:.3f}", tok_s=f"{tokens_per_s:.0f}")
        self.window_loss.zero_()
        self.window_steps = self.window_tokens = 0
        self.window_t = now

    def run_eval(self) -> None:
        began = time.monotonic()
        record = evaluate(self.model, self.held, self.amp, self.layout)
        _append(self.log, {**self.where(), **record, "elapsed": self.elapsed()})
        self.last_eval, self.eval_step = record["eval_loss"], self.step
        self.eval_s = time.monotonic() - began
        self.window_t += self.eval_s  # keep the window's speed a training speed

    def save(self) -> None:
        began = time.monotonic()
        save_state(self.state_path.parent, TrainState(
            model={k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            optimizer=self.opt.state_dict(), step=self.step, epoch=self.epoch,
            position=self.position, elapsed_s=self.elapsed(), rng={
                "cpu": torch.get_rng_state(), **({"cuda": torch.cuda.get_rng_state()}
                                                 if self.cuda else {})},
            lm_config=asdict(self.model.cfg), train_config=asdict(self.config)))
        self.last_save = time.monotonic()
        self.save_s = self.last_save - began
        self.window_t += self.save_s

    def run(self, stop_step: int | None) -> TrainResult:
        config = self.config
        self.bar = tqdm(total=config.total_steps, initial=self.step, desc="train", unit="step",
                        mininterval=2)
        while (stop := self.stop_reason(stop_step)) is None:
            self.train_step()
            self.bar.update()
            if self.step % config.log_every == 0:
                self.log_window()
            if self.held is not None and self.step % config.eval_every == 0:
                self.run_eval()
            if time.monotonic() - self.last_save >= config.ckpt_every_s:
                self.save()
        if self.window_steps:
            self.log_window()
        if self.held is not None and self.step > max(self.eval_step, self.first_step):
            self.run_eval()
        self.bar.close()
        self.save()
        _append(self.log, {"event": "stop", "step": self.step, "stop": stop,
                           "elapsed": self.elapsed()})
        where = self.where()
        return TrainResult(self.step, where["epoch"], self.last_loss, self.last_eval,
                           self.elapsed(), stop, self.state_path)


def train(model: LM, sequences: Sequence, prompt_lengths: Sequence[int], config: TrainConfig,
          run_dir: Path, *, eval_sequences: Sequence | None = None,
          eval_prompt_lengths: Sequence[int] | None = None, layout: VoiceLayout | None = None,
          stop_step: int | None = None) -> TrainResult:
    """Train `model` in place until `config.total_steps`, `stop_step` (the schedule still
    spans `total_steps`) or the time budget; resume from `run_dir/state.pt` if there is one.

    The model's device is the training device; its weights stay fp32. `layout` gives the pad id
    (pads are never attended by real tokens nor scored, so 0 serves without one) and lets eval
    report accuracy per code level. Progress goes to a bar and to `run_dir/log.jsonl`.
    """
    if config.max_len > model.cfg.max_seq_len:
        raise ValueError(f"max_len={config.max_len} exceeds the model's rotary table "
                         f"(max_seq_len={model.cfg.max_seq_len})")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    model.float().requires_grad_(True).train()
    model.reset_rope()  # the tables may have been rounded by an earlier cast to 16 bits
    pad = layout.pad if layout else 0
    data = Batches(sequences, prompt_lengths, config.batch_tokens, config.max_len, pad)
    held = None if eval_sequences is None else Batches(
        eval_sequences, eval_prompt_lengths, config.batch_tokens, config.max_len, pad)
    return _Run(model, config, run_dir, data, held, layout).run(stop_step)
