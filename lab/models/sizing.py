"""What a family is asked before it loads, and the shape of its answer.

`lab.estimate` must say whether a run fits and how long it takes before anything loads, so each
family sizes itself from shapes alone (`Backend.size`): given the `Work` (config, device, dtype
and how much text), it returns a `Plan` of bytes per part and the `Phase`s of its synthesis and
warm-up, which the estimate turns into seconds with measured rates or a probe of the device.
This module holds only what every family's sizer shares, so that models never import the
estimate above them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from lab.config import PipelineConfig
from lab.metrics.probe import Phase

SENTENCE_CHARS = 100
"""A typical sentence: a text of n characters is about n / 100 units of work."""
BASE_LOAD_S = 1.5
"""Imports and module construction: the part of loading that is not moving weights."""
COMPILE_GUESS_S = 45.0
"""First guess at torch.compile's share of a warm-up, per config."""
CONV_EFFICIENCY = 0.5
"""Share of the matmul rate that convolutions (vocoder, codec) reach."""


@dataclass(frozen=True)
class Work:
    """What a sizer is asked: `texts` texts of `chars` characters for `cfg` on `device`, and
    the texts the pipeline warms up on when it loads. `served`: the texts are a server's
    concurrent requests, each streamed on its own and all held at once (a server streams
    whatever the config's `stream`), which is what its memory plan sizes."""

    cfg: PipelineConfig
    device: torch.device
    dtype: torch.dtype
    chars: int
    texts: int
    audio_s_per_char: float
    warmup_texts: tuple[str, ...]
    served: bool = False

    @property
    def units(self) -> int:
        return self.texts * math.ceil(self.chars / SENTENCE_CHARS)

    @property
    def unit_chars(self) -> int:
        return min(self.chars, SENTENCE_CHARS)

    @property
    def streaming(self) -> bool:
        """Each text streams on its own: a lone text of a streaming config, or a server's."""
        return self.served or (self.cfg.stream and self.texts == 1)

    @property
    def rows(self) -> int:
        """Units rendered at once: one per text when each streams, else up to the batch."""
        if self.streaming:
            return self.texts
        return min(self.units, self.cfg.batch_size)

    @property
    def nbytes(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class Plan:
    """A family's answer: bytes of each part, seconds of audio, the phases of synthesis and of
    warm-up, and what loading moves (bytes read from files, filled at random, staged in RAM).
    `cache_len`: the positions each slot's KV cache holds, 0 for a family without one."""

    weights: int
    kv_cache: int
    activations: int
    codec: int
    audio_s: float
    synth: tuple[Phase, ...]
    warmup: tuple[Phase, ...]
    host: int = 0
    read_bytes: int = 0
    fill_bytes: int = 0
    load_fixed_s: float = BASE_LOAD_S
    notes: tuple[str, ...] = ()
    cache_len: int = 0


def load_fixed_s(cfg: PipelineConfig) -> float:
    """The part of loading that does not scale with the weights, with a compile's first guess."""
    return BASE_LOAD_S + (COMPILE_GUESS_S if cfg.compile != "none" else 0.0)


def param_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def conv_flops(model: torch.nn.Module, run: Callable[[], object]) -> float:
    """Flops (two per multiply-add) of every convolution and linear as `run()` drives `model`,
    counted by hooks: torch's flop counter costs seconds of one-time set-up."""
    nn, total = torch.nn, 0.0

    def count(module, inputs, out) -> None:
        nonlocal total
        if isinstance(module, nn.ConvTranspose1d):
            per = module.out_channels // module.groups * module.kernel_size[0]
            total += 2 * inputs[0].numel() * per
        elif isinstance(module, nn.Conv1d):
            per = module.in_channels // module.groups * module.kernel_size[0]
            total += 2 * out.numel() * per
        else:
            total += 2 * out.numel() * module.in_features

    kinds = (nn.Conv1d, nn.ConvTranspose1d, nn.Linear)
    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, kinds)]
    try:
        with torch.inference_mode():
            run()
    finally:
        for hook in hooks:
            hook.remove()
    return total
