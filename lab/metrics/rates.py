"""The rate book: what real runs of a config cost here, so the next estimate need not guess.

After a real run the caller records what it measured (`record_rate`) in a small JSON file in a
directory it chooses, keyed by what sets the speed (family, model, device, dtype, quant, batch
and the decode knobs). A few samples are kept per figure and the estimate reads their median:
on a busy machine one run can be several times slower than the next.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from lab.config import PipelineConfig
from lab.device import resolve_device
from lab.models.registry import family as family_of

BOOK_NAME = "rates.json"
KEEP = 5
"""Samples kept per figure in the rate book; the estimate uses their median."""


class EstimateError(ValueError):
    """An estimate was asked for with inputs it cannot size, or the rate book is unreadable.

    One error for the whole estimate (`lab.estimate` re-exports it): the rate book here and
    each family's sizer raise it, and a caller catches it to go on without an estimate."""


def device_label(device: torch.device) -> str:
    """The device as the rate book keys it: a CPU with its thread count (its kernels scale with
    it), a GPU by name."""
    if device.type == "cuda":
        return f"cuda/{torch.cuda.get_device_name(device)}"
    return f"cpu/{torch.get_num_threads()} threads"


def rate_key(cfg: PipelineConfig, device: torch.device) -> str:
    """What sets the speed of a run, as the rate book's key."""
    mode = (f"stream={cfg.stream}/{cfg.decode_interval} compile={cfg.compile} "
            f"graphs={cfg.cuda_graphs}")
    if family_of(cfg.family).autoregressive:
        mode += f" kv={cfg.kv_cache} max_tokens={cfg.sampling.max_tokens}"
    return (f"{cfg.family}:{cfg.model} weights={cfg.weights} device={device_label(device)} "
            f"dtype={cfg.dtype} quant={cfg.quant} batch={cfg.batch_size} {mode}")


class RateBook:
    """Measured rates, a few samples per figure and key, in `<directory>/rates.json`."""

    _lock = threading.Lock()

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise EstimateError(f"rates directory {str(directory)!r} is a file; give a folder")
        self.path = self.directory / BOOK_NAME

    def _read(self) -> dict:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as err:
            raise EstimateError(f"rate book {self.path} is unreadable ({err}); delete it to "
                                "start a new one") from err
        rates = data.get("rates") if isinstance(data, dict) else None
        if not isinstance(rates, dict):
            raise EstimateError(f"rate book {self.path} holds no 'rates' mapping; delete it "
                                "to start a new one")
        return rates

    def rates(self, key: str) -> dict[str, float]:
        """The median of each figure recorded under `key` ({} when never measured)."""
        entry = self._read().get(key, {})
        return {name: statistics.median(values) for name, values in entry.items()
                if isinstance(values, list) and values}

    def add(self, key: str, figures: dict[str, float]) -> dict[str, float]:
        """Append finite figures to their last `KEEP` samples; return the new medians."""
        with self._lock:
            book = self._read()
            entry = book.setdefault(key, {})
            for name, value in figures.items():
                if value is not None and math.isfinite(value) and value >= 0:
                    entry[name] = [*entry.get(name, []), float(value)][-KEEP:]
            self.directory.mkdir(parents=True, exist_ok=True)
            stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": 1, "updated": stamp, "rates": book},
                                      indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.path)
        return self.rates(key)


@dataclass(frozen=True)
class Measured:
    """What one real call cost: characters in, seconds of synthesis, seconds of audio out, and
    the pipeline's one-time load and warm-up (None when not measured this time)."""

    chars: int
    synth_s: float
    audio_s: float
    load_s: float | None = None
    warmup_s: float | None = None

    @classmethod
    def of(cls, results, startup: dict[str, float] | None = None) -> Measured:
        """From the Synthesis (or the list of them) that one call returned, and the pipeline's
        `startup` ({"load_ms", "warmup_ms"}). A batch's results share its wall time."""
        results = results if isinstance(results, Sequence) else [results]
        if not results:
            raise EstimateError("record_rate needs at least one result")
        startup = startup or {}
        return cls(chars=sum(len(r.text) for r in results),
                   synth_s=max(r.metrics.total_ms for r in results) / 1000,
                   audio_s=sum(r.metrics.audio_seconds for r in results),
                   load_s=_seconds(startup.get("load_ms")),
                   warmup_s=_seconds(startup.get("warmup_ms")))


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


def record_rate(cfg: PipelineConfig, measured, *, rates_dir: str | Path,
                startup: dict[str, float] | None = None,
                device: str | torch.device | None = None) -> dict[str, float]:
    """Add a real run to the rate book and return the rates now on record for its key.

    `measured` is a `Measured`, or what one call returned (a Synthesis or a batch's list of
    them), with the pipeline's `startup` for load and warm-up. Pass the config the caller asked
    for (`pipe.config`), since the estimate looks rates up before anything resolves. Speech per
    character is learned only from real weights: random weights stop at random.
    """
    if not isinstance(measured, Measured):
        measured = Measured.of(measured, startup)
    dev = resolve_device(device or cfg.device)
    figures = {"load_s": measured.load_s, "warmup_s": measured.warmup_s}
    if measured.audio_s > 0:
        figures["rtf"] = measured.synth_s / measured.audio_s
        if cfg.weights == "real" and measured.chars > 0:
            figures["audio_s_per_char"] = measured.audio_s / measured.chars
    return RateBook(rates_dir).add(rate_key(cfg, dev), figures)
