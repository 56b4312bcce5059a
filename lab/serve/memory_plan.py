"""How many streams a server runs at once, and how many positions each may hold, from the
memory free when it starts.

A server that admits more streams than its memory holds fails mid-request with out-of-memory;
one that admits fewer leaves memory idle. So the plan asks the sizer `lab.estimate` uses (the
family's `Backend.size`, given `Work(served=True)`: n streamed sentences held at once) what n
concurrent streams take: weights, codec, a KV cache of n slots, activations of n rows. It takes
the largest n that fits the free memory, up to a ceiling that memory does not set.

An autoregressive family's cache length is what one request may use: `sampling.max_tokens`
plus the family's prompt room, at most the LM's context, which is the length its engine
allocates. The plan keeps that length: shortening it to admit more streams would cut every
request's audio short. When not even one slot of that length fits, the plan refuses with the
numbers and the `sampling.max_tokens` that would fit. The engine's slots follow the plan
through the config's `batch_size` (`MemoryPlan.apply`); the engine never sees the plan.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from lab.config import LIMITS, PipelineConfig
from lab.device import resolve_device
from lab.estimate import AUDIO_S_PER_CHAR, HEADROOM, available_bytes, gib
from lab.models.registry import backend_class
from lab.models.sizing import SENTENCE_CHARS, Plan, Work
from lab.pipeline import WARMUP_TEXTS, Pipeline
from lab.quant.plan import run_dtype

FRAGMENTATION = 0.10
"""Activations are planned this share above their live peak. They are freed and allocated
anew every step in changing sizes (prompts of any length, rows joining and leaving), and
PyTorch's caching allocator rounds blocks up and keeps freed ones that a larger request cannot
reuse. Weights and a static KV cache are allocated once and are not inflated. The share of free
memory left unplanned is `lab.estimate.HEADROOM`'s rest (10%): the estimate refuses a run
above it, and it covers what sizing does not count (CUDA-graph pools, compile and cuBLAS
workspaces, other processes' growth)."""
CUDA_CONTEXT_BYTES = 2**30
"""What a card holds before the first tensor: the CUDA context, PyTorch's kernels and the
cuBLAS handles, about 0.5 to 1 GiB on an H100. A starting server reads free memory after its
context exists; a card's nominal size does not, so this comes off it (`plan_for_card`)."""
INTERLEAVED_STREAMS = 4
"""Ceiling for a family without a batched decode step (the Piper voice): the worker renders
one window of one stream at a time, so each of n streams gets 1/n of the voice's speed and
memory is not what runs out first. A few keep the voice near real time on a CPU."""
MAX_SLOTS = int(LIMITS["batch_size"][1])
"""Ceiling for an autoregressive family on a GPU: the most slots a config's `batch_size`
takes. A GPU decode step reads the weights once for every row, so rows are nearly free until
memory runs out; whether they all stay real time is the load test's question. Once a server is
full they do not: every slot past what its rounds carry in real time lengthens every round,
and the server finishes fewer requests (on one H200, Orpheus-3B's shape finished the most with
192 slots of 128-256; docs/serving.md), unless a round ceiling (`admit_round_ms`) holds new
streams back while the rounds are slow (the same shape kept 99.5-99.8% of its streams in real
time with 512 slots and a 7 ms ceiling). So a plan that chose the slots itself, for an engine
without that ceiling, says so (`SIZE_UNDER_LOAD`)."""
ASKED = "the slots asked for"
SIZE_UNDER_LOAD = ("a full server with more slots than its rounds carry in real time slows "
                   "every stream: set a round ceiling (--set admit_round_ms=7 held 512 slots on "
                   "an H200) or find how many slots hold with `lab loadtest` and pass --slots N "
                   "(docs/serving.md, \"Sizing a GPU server\")")
CARDS: dict[str, int] = {"24 GB": 24564 * 2**20, "40 GB": 40960 * 2**20,
                         "80 GB": 81559 * 2**20, "141 GB": 143771 * 2**20}
"""Cards by the total nvidia-smi reports for one of each class: RTX 4090, A100 40GB, H100 SXM
80GB, H200 141GB (NVIDIA's "GB" are close to GiB)."""


class MemoryPlanError(ValueError):
    """The preset cannot hold one stream (or the slots asked for) in the memory free."""


@dataclass(frozen=True)
class MemoryPlan:
    """Slots and cache length for a server, and the bytes behind them.

    `free_bytes` is what the device had free (GPU memory or RAM); the plan may fill `HEADROOM`
    of it (`budget`). `weights`, `codec`, `kv_cache` (all `slots` of `cache_len` positions)
    and `activations` (with the fragmentation margin) are the sizer's figures at `slots`;
    `planned` is what counts against the budget: activations alone when `loaded`, since the
    rest already sits in memory, outside `free_bytes`. `ceiling` is the most slots anything
    but memory allows, and `ceiling_reason` says what. `paced`: the engine holds new streams
    back while its rounds are slow (`admit_round_ms` > 0), so its slots need no sizing.
    """

    family: str
    device: str
    memory_kind: str
    free_bytes: int
    autoregressive: bool
    slots: int
    ceiling: int
    ceiling_reason: str
    cache_len: int
    weights: int
    codec: int
    kv_cache: int
    activations: int
    loaded: bool = False
    paced: bool = False

    @property
    def budget(self) -> int:
        return int(HEADROOM * self.free_bytes)

    @property
    def planned(self) -> int:
        resident = 0 if self.loaded else self.weights + self.codec + self.kv_cache
        return resident + self.activations

    @property
    def kv_per_slot(self) -> int:
        return self.kv_cache // self.slots

    @property
    def kv_per_position(self) -> int:
        return self.kv_per_slot // self.cache_len if self.cache_len else 0

    @property
    def bound(self) -> str:
        """What stopped the slots from growing."""
        return "memory" if self.slots < self.ceiling else self.ceiling_reason

    def summary(self) -> str:
        """Two lines for a terminal: the slots, then the bytes that chose them; a third when
        the plan chose a batched GPU engine's slots itself (`_hint`)."""
        each = f" of {self.cache_len} positions" if self.cache_len else ""
        what = ("slot" if self.autoregressive else "stream") + ("s" if self.slots > 1 else "")
        state = " (loaded: weights and cache already in memory)" if self.loaded else ""
        parts = [] if self.loaded else [f"weights {gib(self.weights)}", f"codec {gib(self.codec)}"]
        if self.cache_len and not self.loaded:
            parts.append(f"KV cache {gib(self.kv_cache)} ({gib(self.kv_per_slot)} a slot, "
                         f"{gib(self.kv_per_position)} a position)")
        parts.append(f"activations {gib(self.activations)}")
        return (f"memory plan for {self.family} on {self.device}{state}: {self.slots} {what}"
                f"{each} (bound by {self.bound})\n  {' + '.join(parts)} = {gib(self.planned)} "
                f"of the {gib(self.budget)} it may use ({HEADROOM:.0%} of {gib(self.free_bytes)} "
                f"free {self.memory_kind})" + self._hint())

    def _hint(self) -> str:
        """A batched engine on a GPU whose slots nobody chose, and that no round ceiling
        paces, gets the load test's warning."""
        settled = self.loaded or self.ceiling_reason == ASKED or self.paced
        gpu_engine = self.autoregressive and self.device.startswith("cuda")
        return "" if settled or not gpu_engine else f"\n  {SIZE_UNDER_LOAD}"

    def apply(self, cfg: PipelineConfig) -> PipelineConfig:
        """The config to load: an autoregressive family's engine gets the plan's slots as its
        `batch_size`; its cache length is already the config's."""
        if not self.autoregressive or cfg.batch_size == self.slots:
            return cfg
        return cfg.replace(batch_size=self.slots)


def plan_memory(cfg: PipelineConfig, *, slots: int | None = None, free_bytes: int | None = None,
                device: str | torch.device | None = None, loaded: bool = False) -> MemoryPlan:
    """The plan for serving `cfg`: `slots` when given (refused if they do not fit), else the
    most that fit. By default the config's device is measured now; `free_bytes` with `device`
    plans for memory that is not here (`plan_for_card`). `loaded`: the pipeline already sits in
    memory (a server handed a loaded one), so only its activations are still to come."""
    if free_bytes is None:
        dev = resolve_device(device or cfg.device)
        free, kind = available_bytes(dev)
    else:
        dev = torch.device(device or cfg.device)
        free, kind = free_bytes, "GPU memory" if dev.type == "cuda" else "RAM"
    ar = backend_class(cfg.family).family.autoregressive
    top, why = _ceiling(cfg, dev, ar, slots, loaded)
    size = _sizer(cfg, dev, ar)
    budget = int(HEADROOM * free)
    fit = _most(lambda n: _need(size(n), loaded) <= budget, top)
    if fit < (slots or 1):
        raise MemoryPlanError(_refusal(cfg, dev, size, slots or 1, fit, free, kind, loaded))
    p = size(fit)
    return MemoryPlan(cfg.family, str(dev), kind, free, ar, fit, top, why, p.cache_len,
                      p.weights, p.codec, p.kv_cache, _margin(p.activations), loaded,
                      paced=ar and cfg.admit_round_ms > 0)


def plan_loaded(pipeline: Pipeline) -> MemoryPlan:
    """The plan for a pipeline that is already loaded: a server handed one without `slots`."""
    return plan_memory(pipeline.config, device=pipeline.device, loaded=True)


def plan_for_card(cfg: PipelineConfig, card_bytes: int) -> MemoryPlan:
    """The plan on a GPU of `card_bytes` that is not here: free is what its context leaves."""
    return plan_memory(cfg, free_bytes=card_bytes - CUDA_CONTEXT_BYTES, device="cuda")


def _ceiling(cfg: PipelineConfig, dev: torch.device, ar: bool, slots: int | None,
             loaded: bool) -> tuple[int, str]:
    if slots is not None:
        if slots < 1:
            raise MemoryPlanError(f"slots={slots} must be >= 1")
        if ar and slots > MAX_SLOTS:
            raise MemoryPlanError(f"slots={slots}: an engine holds at most {MAX_SLOTS} slots "
                                  "(the largest batch_size)")
        return slots, ASKED
    if not ar:
        return INTERLEAVED_STREAMS, "interleaving: n streams get 1/n of the voice's speed each"
    if loaded:
        return cfg.batch_size, "the loaded engine's slots (its batch_size)"
    if dev.type == "cuda":
        return MAX_SLOTS, f"the largest batch_size, {MAX_SLOTS}"
    return cfg.batch_size, "the config's batch_size: on a CPU every row costs compute"


def _sizer(cfg: PipelineConfig, dev: torch.device, ar: bool) -> Callable[[int], Plan]:
    """What `lab.estimate`'s sizer counts for n concurrent streams of `cfg` on `dev`."""
    size, dtype = backend_class(cfg.family).size, run_dtype(cfg.dtype, dev)

    @functools.cache
    def at(n: int) -> Plan:
        run = cfg.replace(batch_size=n) if ar else cfg
        return size(Work(run, dev, dtype, SENTENCE_CHARS, n, AUDIO_S_PER_CHAR, WARMUP_TEXTS,
                         served=True))

    return at


def _margin(activations: int) -> int:
    return math.ceil(activations * (1 + FRAGMENTATION))


def _need(p: Plan, loaded: bool) -> int:
    resident = 0 if loaded else p.weights + p.codec + p.kv_cache
    return resident + _margin(p.activations)


def _most(fits: Callable[[int], bool], high: int) -> int:
    """The largest n in 1..high for which `fits` (true up to some n, false after) holds, or 0."""
    if fits(high):
        return high
    low = 0
    high -= 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _refusal(cfg: PipelineConfig, dev: torch.device, size: Callable[[int], Plan], wanted: int,
             fit: int, free: int, kind: str, loaded: bool) -> str:
    """Why the plan refuses, with every figure, and what would fit instead."""
    p, budget = size(wanted), int(HEADROOM * free)
    parts = [] if loaded else [f"weights {gib(p.weights)}", f"codec {gib(p.codec)}"]
    if p.cache_len and not loaded:
        parts.append(f"KV cache {gib(p.kv_cache)} ({wanted} x {p.cache_len} positions)")
    parts.append(f"activations {gib(_margin(p.activations))}")
    what = "one stream" if wanted == 1 else f"{wanted} slots"
    text = (f"the memory plan cannot fit {what} of {cfg.family} on {dev}: {' + '.join(parts)} "
            f"= {gib(_need(p, loaded))}, but it may use {gib(budget)} ({HEADROOM:.0%} of "
            f"{gib(free)} free {kind})")
    if fit:
        return f"{text}; at most {fit} fit"
    tokens = _longest_fitting(cfg, dev, budget) if p.cache_len and not loaded else 0
    if tokens:
        text += f"; one slot fits with --set sampling.max_tokens={tokens}"
    return f"{text}; or pick a lower dtype or quant, a smaller model, or more memory"


def _longest_fitting(cfg: PipelineConfig, dev: torch.device, budget: int) -> int:
    """The largest `sampling.max_tokens` whose cache fits one slot, 0 if none does."""
    def fits(tokens: int) -> bool:
        run = cfg.replace(**{"sampling.max_tokens": tokens})
        return _need(_sizer(run, dev, True)(1), False) <= budget

    return _most(fits, cfg.sampling.max_tokens - 1) if cfg.sampling.max_tokens > 1 else 0
