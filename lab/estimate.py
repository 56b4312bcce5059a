"""Before a pipeline loads: will it fit in memory here, and how long will it take?

Loading is the slow and memory-hungry part, so the check must come before it, from the config
alone: an autoregressive model on a CPU at batch 32 otherwise loads for over a minute, then
synthesizes for minutes at 14 GB of resident memory before anyone learns it was a bad idea.

Memory is counted from shapes: each family sizes itself (`Backend.size`, found through the
registry) without loading its weights. Time comes from measured rates: after a real run the
caller records what it measured (`record_rate`) in the rate book (`lab.metrics.rates`). Until a
config has been measured, the time is a first guess from a quick probe of this device
(`lab.metrics.probe`). The estimate says which figures are first guesses: on a busy machine the
probes, like the runs, move by several times. This module weighs the figures against the memory
available and gives the verdict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from lab.config import PipelineConfig
from lab.device import resolve_device
from lab.metrics.probe import Phase, Probe, probe
from lab.metrics.rates import (
    EstimateError,
    Measured,
    RateBook,
    device_label,
    rate_key,
    record_rate,
)
from lab.models.registry import backend_class
from lab.models.sizing import Plan, Work
from lab.quant.plan import run_dtype

__all__ = [
    "CONFIRM_S", "HEADROOM", "AUDIO_S_PER_CHAR", "VERDICTS", "Estimate", "EstimateError",
    "Measured", "Phase", "Plan", "Probe", "RateBook", "Work", "available_bytes",
    "device_label", "estimate", "gib", "host_available", "probe", "rate_key", "record_rate",
    "require",
]

CONFIRM_S = 60.0
"""Load plus synthesis at or above this asks for confirmation: it would take minutes."""
HEADROOM = 0.9
"""Refuse when the estimate exceeds this share of the available memory."""
AUDIO_S_PER_CHAR = 0.065
"""Seconds of speech per character of text (about 15 characters a second) until measured."""
VERDICTS = ("run", "confirm", "refuse")


def gib(n: float) -> str:
    """Bytes for a person: GiB from 1 GiB up, MiB from 1 MiB up, else KiB."""
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    return f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"


@dataclass(frozen=True)
class Estimate:
    """Memory and time of one run, before loading, and what to do about it.

    Memory parts are bytes on the device the model runs on: `weights` (voice or LM),
    `kv_cache`, `activations` (the peak working set, codec's included), `codec` (codec or
    vocoder weights). `host_bytes` is RAM a GPU run needs while loading. `load_s` covers load
    and warm-up (with any compile; 0 when `loaded`); `synth_s` is `texts` texts of `chars`
    characters at the config's batch size. `first_guess` is True when a time comes from
    probes, not a measured run; `basis` says which.
    """

    device: str
    chars: int
    texts: int
    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int
    codec_bytes: int
    total_bytes: int
    available_bytes: int
    memory_kind: str
    host_bytes: int
    load_s: float
    synth_s: float
    audio_s: float
    verdict: str
    reason: str
    first_guess: bool
    basis: str
    notes: tuple[str, ...] = ()
    loaded: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """Two lines for a terminal: the figures, then the verdict and its reason."""
        parts = ", ".join(f"{name} {gib(n)}" for name, n in self._parts() if n)
        return (f"estimate on {self.device}: {gib(self.total_bytes)} ({parts}) of "
                f"{gib(self.available_bytes)} {self.memory_kind} available; load "
                f"{_duration(self.load_s)}, synthesis {_duration(self.synth_s)} for "
                f"{self._work()} ({self.basis})\n{self.verdict}: {self.reason}")

    def markdown(self) -> str:
        rows = [*((name, gib(n)) for name, n in self._parts()),
                ("total", f"**{gib(self.total_bytes)}**"),
                (f"available {self.memory_kind}", gib(self.available_bytes)),
                ("load and warm-up", _duration(self.load_s)),
                (f"synthesis of {self._work()}", _duration(self.synth_s))]
        lines = ["| estimate | value |", "| --- | ---: |", *(f"| {k} | {v} |" for k, v in rows)]
        lines += ["", f"**{self.verdict}**: {self.reason}", "", f"_Times: {self.basis}._"]
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def _parts(self) -> list[tuple[str, int]]:
        return [("weights", self.weights_bytes), ("KV cache", self.kv_cache_bytes),
                ("activations", self.activations_bytes), ("codec/vocoder", self.codec_bytes)]

    def _work(self) -> str:
        each = f"{self.chars} characters"
        return each if self.texts == 1 else f"{self.texts} texts of {each}"


def available_bytes(device: torch.device) -> tuple[int, str]:
    """Free memory where the model will live: GPU memory on CUDA, else RAM (MemAvailable,
    lowered to a container's limit when one is set)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), "GPU memory"
    return host_available(), "RAM"


def host_available() -> int:
    """Bytes of RAM a new allocation can take without swapping."""
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except OSError:
        pass
    if free is None:
        import psutil

        free = int(psutil.virtual_memory().available)
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            free = min(free, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(free, 0)


def _check(cfg: object, chars: object, texts: object) -> None:
    if not isinstance(cfg, PipelineConfig):
        raise EstimateError(f"estimate needs a PipelineConfig, got {type(cfg).__name__}")
    for name, value in (("chars", chars), ("texts", texts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EstimateError(f"{name}={value!r} must be a whole number >= 1")


def estimate(cfg: PipelineConfig, chars: int, device: str | torch.device | None = None,
             rates_dir: str | Path | None = None, *, texts: int = 1,
             loaded: bool = False) -> Estimate:
    """Size and time `texts` texts of `chars` characters for `cfg` on `device` (default: the
    config's) without loading anything; `rates_dir` holds the rate book (None: first guesses
    only). `loaded=True` when the pipeline is already loaded (an app's cache): its weights and
    cache already sit in memory, so only the activations and the synthesis time are to come.
    """
    from lab.pipeline import WARMUP_TEXTS

    _check(cfg, chars, texts)
    dev = resolve_device(device or cfg.device)
    dtype = run_dtype(cfg.dtype, dev)
    book = RateBook(rates_dir).rates(rate_key(cfg, dev)) if rates_dir is not None else {}
    per_char = book.get("audio_s_per_char", AUDIO_S_PER_CHAR)
    work = Work(cfg, dev, dtype, chars, texts, per_char, WARMUP_TEXTS)
    plan = backend_class(cfg.family).size(work)
    guessed = [part for part, known in (("load", loaded or {"load_s", "warmup_s"} <= set(book)),
                                        ("synthesis", "rtf" in book)) if not known]
    p = probe(str(dev), dtype, torch.get_num_threads()) if guessed else None
    if loaded:
        load_s = 0.0
    elif "load" not in guessed:
        load_s = book["load_s"] + book["warmup_s"]
    else:
        load_s = plan.load_fixed_s + plan.fill_bytes / p.fill + plan.read_bytes / (
            p.bandwidth / 20) + sum(p.seconds(ph) for ph in plan.warmup)
    if "synthesis" not in guessed:
        synth_s = book["rtf"] * plan.audio_s
    else:
        synth_s = sum(p.seconds(ph) for ph in plan.synth)
    basis = ("measured rates of this config here" if p is None else
             f"first guess for {' and '.join(guessed)} from a probe of this device "
             f"({p.bandwidth / 1e9:.1f} GB/s, {p.flops / 1e9:.0f} GFLOP/s); a real run "
             "records measured rates")
    total = plan.weights + plan.kv_cache + plan.activations + plan.codec
    avail, kind = available_bytes(dev)
    host = plan.host if dev.type == "cuda" and not loaded else 0
    verdict, reason = _verdict(cfg, chars, dev, plan, loaded, avail, kind, host,
                               load_s, synth_s)
    return Estimate(str(dev), chars, texts, plan.weights, plan.kv_cache, plan.activations,
                    plan.codec, total, avail, kind, host, load_s, synth_s, plan.audio_s,
                    verdict, reason, bool(guessed), basis, plan.notes, loaded)


def _verdict(cfg, chars, dev, plan, loaded, avail, kind, host, load_s, synth_s):
    if chars > cfg.max_chars:
        return "refuse", (f"the text has {chars} characters and this config accepts at most "
                          f"max_chars={cfg.max_chars}")
    total = plan.weights + plan.kv_cache + plan.activations + plan.codec
    if loaded and plan.activations > HEADROOM * avail:
        return "refuse", (f"the loaded pipeline needs about {gib(plan.activations)} more for "
                          f"activations but only {gib(avail)} of {kind} is available on {dev}")
    if not loaded and total > HEADROOM * avail:
        return "refuse", (
            f"needs about {gib(total)} ({gib(plan.weights)} weights, {gib(plan.kv_cache)} "
            f"KV cache, {gib(plan.activations)} activations, {gib(plan.codec)} codec) but "
            f"only {gib(avail)} of {kind} is available on {dev}; lower batch_size or "
            "sampling.max_tokens, pick a smaller model, a lower dtype or a GPU")
    if host:
        free = host_available()
        if host > HEADROOM * free:
            return "refuse", (f"loading onto the GPU stages {gib(host)} of weights in RAM but "
                              f"only {gib(free)} of RAM is available")
    if load_s + synth_s >= CONFIRM_S:
        load = f"{_duration(load_s)} to load and " if load_s else ""
        return "confirm", (f"would take about {load}{_duration(synth_s)} to synthesize on "
                           f"{dev} (uses {gib(total)} of {gib(avail)} {kind})")
    return "run", (f"fits ({gib(total)} of {gib(avail)} {kind}) and takes about "
                   f"{_duration(load_s + synth_s)}")


def require(guess: Estimate, confirmed: bool = True) -> Estimate:
    """Raise EstimateError (a ValueError) for a run the estimate refuses, and for one that
    would take minutes unless `confirmed`: the one rule every face that loads applies."""
    if guess.verdict == "refuse":
        raise EstimateError(f"Refused before loading: {guess.reason}")
    if guess.verdict == "confirm" and not confirmed:
        raise EstimateError(f"This run would take minutes: {guess.reason}. Tick “Run even if "
                            "it takes minutes” to run it anyway.")
    return guess
