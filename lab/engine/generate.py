"""The plain generation loop behind parity checks and the speed ladder.

One prompt batch, a fixed number of new tokens, one cache mode, and a timestamp per step, so
the same loop shows what each rung (no cache, growing cache, static cache, CUDA graph) costs.
Serving with many requests of different lengths is the scheduler's job, not this loop's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from lab.engine.cache import DynamicKVCache, StaticKVCache
from lab.engine.kv_modes import KV_MODES
from lab.engine.llm import LMConfig

Sampler = Callable[[torch.Tensor], torch.Tensor]


def make_cache(
    mode: str,
    cfg: LMConfig,
    n_slots: int,
    max_len: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> StaticKVCache | DynamicKVCache | None:
    """The cache for one of the ladder's modes: 'none', 'dynamic' or 'static'."""
    if mode == "none":
        return None
    if mode == "dynamic":
        return DynamicKVCache(cfg.n_layers)
    if mode == "static":
        if max_len > cfg.max_seq_len:
            raise ValueError(
                f"max_len={max_len} is longer than the model's rotary table ({cfg.max_seq_len})"
            )
        return StaticKVCache(
            cfg.n_layers, n_slots, max_len, cfg.n_kv_heads, cfg.head_dim, dtype, device
        )
    raise ValueError(f"cache mode {mode!r} is not valid; choose one of {list(KV_MODES)}")


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The most likely next token per row: [B, V] -> [B]."""
    return logits.argmax(dim=-1)


class StepClock:
    """Timestamps without stalling the GPU: CUDA events on a GPU, a host clock on CPU.

    Events are read once at the end, so timing adds no synchronisation between steps.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def tick(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def intervals_ms(self) -> list[float]:
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks[:-1], self.marks[1:], strict=True)]
        return [(b - a) * 1e3 for a, b in zip(self.marks[:-1], self.marks[1:], strict=True)]


@dataclass
class GenerationResult:
    """Prompt plus continuation, with the time of the prefill and of each later decode step."""

    tokens: torch.Tensor
    prompt_len: int
    prefill_ms: float
    step_ms: list[float] = field(default_factory=list)
    label: str = ""

    @property
    def new_tokens(self) -> torch.Tensor:
        return self.tokens[:, self.prompt_len :]

    @property
    def ms_per_step(self) -> float:
        """Median decode step, robust to a stray slow step (allocator growth, a clock change)."""
        return statistics.median(self.step_ms) if self.step_ms else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.tokens.shape[0] * 1e3 / self.ms_per_step

    def summary(self) -> dict:
        return {
            "label": self.label,
            "batch": self.tokens.shape[0],
            "prompt_len": self.prompt_len,
            "new_tokens": self.tokens.shape[1] - self.prompt_len,
            "prefill_ms": self.prefill_ms,
            "ms_per_step": self.ms_per_step,
            "tokens_per_second": self.tokens_per_second,
        }


@torch.inference_mode()
def generate(
    model,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    cache_mode: str = "static",
    sample: Sampler | None = None,
    *,
    decoder=None,
    max_len: int | None = None,
) -> GenerationResult:
    """Extend each prompt row by `max_new_tokens` tokens (no early stop).

    `sample` maps last-position logits [B, V] to tokens [B] (greedy when None). With a
    `GraphedDecoder` as `decoder`, the prompt is prefilled into its static cache and every
    decode step goes through it (CUDA graph, compiled or eager, whatever it settled on), reading
    the cache up to the step's position rounded up to one of its key buckets.
    """
    sample = sample or greedy
    b, t = _check_prompt(prompt_ids, max_new_tokens, cache_mode)
    device = prompt_ids.device
    cfg = model.cfg
    total = t + max_new_tokens
    if total > cfg.max_seq_len:
        raise ValueError(f"prompt + new tokens = {total} exceeds max_seq_len={cfg.max_seq_len}")
    if decoder is not None:
        if cache_mode != "static":
            raise ValueError("a GraphedDecoder needs cache_mode='static'")
        cache = decoder.cache
    else:
        dtype = model.embed.weight.dtype
        cache = make_cache(cache_mode, cfg, b, max_len or total, dtype, device)
    if isinstance(cache, StaticKVCache) and (total > cache.max_len or b > cache.n_slots):
        raise ValueError(
            f"{b} rows x {total} positions do not fit the static cache "
            f"({cache.n_slots} slots x {cache.max_len})"
        )
    step = decoder if decoder is not None else (lambda tok, pos, _: model(tok, pos, cache))
    positions = torch.arange(t, device=device).expand(b, t)
    out = torch.empty(b, total, dtype=torch.long, device=device)
    out[:, :t] = prompt_ids
    clock = StepClock(device)
    clock.tick()
    logits = model(prompt_ids, positions, cache, last_only=True)
    out[:, t] = sample(logits[:, -1])
    clock.tick()
    for i in range(t, total - 1):
        if cache is None:
            seq = out[:, : i + 1]
            pos = torch.arange(i + 1, device=device).expand(b, i + 1)
            logits = model(seq, pos, None, last_only=True)
        else:
            pos = torch.full((b, 1), i, dtype=torch.long, device=device)
            logits = step(out[:, i : i + 1], pos, i + 1)
        out[:, i + 1] = sample(logits[:, -1])
        clock.tick()
    times = clock.intervals_ms()
    return GenerationResult(out, t, times[0], times[1:], label=f"lab {cache_mode}")


def _check_prompt(prompt_ids: torch.Tensor, max_new_tokens: int, cache_mode: str):
    if cache_mode not in KV_MODES:
        raise ValueError(f"cache mode {cache_mode!r} is not valid; choose one of {list(KV_MODES)}")
    if prompt_ids.dim() != 2 or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids must be [B, T] with T >= 1; got {tuple(prompt_ids.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
    return prompt_ids.shape
