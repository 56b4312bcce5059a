"""What this device does per second, measured in well under a second.

Until a config has been measured, the estimate's times are first guesses built from four rates
of the device: memory bandwidth (a decode step reads every weight once), matmul rate, the cost
of one small op (what bounds a tiny model), and the rate at which dummy weights are filled with
random numbers. A family describes its work as `Phase`s; the probe turns them into seconds. On
a busy machine these rates, like real runs, move by several times, so each is the best of a few
short tries.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Phase:
    """Work done `count` times: each reads `bytes`, does `flops` and launches about `ops`
    small operations (what bounds a tiny model)."""

    count: float
    bytes: float = 0.0
    flops: float = 0.0
    ops: float = 0.0


@dataclass(frozen=True)
class Probe:
    """What this device does per second: bytes moved, matmul flops in the run dtype, small ops,
    and bytes of weights filled with random normals (how fast dummy weights load)."""

    bandwidth: float
    flops: float
    op_s: float
    fill: float

    def seconds(self, phase: Phase) -> float:
        """A phase is bound by memory or by compute, whichever is slower, plus its op count."""
        each = max(phase.bytes / self.bandwidth, phase.flops / self.flops) + phase.ops * self.op_s
        return phase.count * each


def _best(fn: Callable[[], object], sync: Callable[[], None], budget_s: float = 0.02) -> float:
    """Fastest of a few timed calls after one untimed call: the machine's capacity, not its
    noise."""
    fn()
    sync()
    best, spent = float("inf"), 0.0
    for _ in range(5):
        start = time.perf_counter()
        fn()
        sync()
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
        if spent > budget_s:
            break
    return max(best, 1e-9)


def _copy_time(n: int, dev: torch.device, sync: Callable[[], None]) -> float:
    src = torch.ones(n, device=dev)
    dst = torch.empty_like(src)
    return _best(lambda: dst.copy_(src), sync, budget_s=0.1)


@functools.lru_cache(maxsize=16)
def probe(device: str, dtype: torch.dtype, threads: int) -> Probe:
    """Measure the device once per (device, dtype, thread count) and process."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    n = (256 if cuda else 32) * 2**20 // 4
    bandwidth = 2 * n * 4 / _copy_time(n, dev, sync)
    # Grow the matmul until one takes 50 ms, so that thread wake-ups and stalls on a busy
    # machine do not dominate, unless the next size would take too long (emulated bf16).
    size, took = 256, 0.0
    while True:
        a = torch.randn(size, size, device=dev).to(dtype)
        took = _best(lambda a=a: a @ a, sync, budget_s=0.05)
        if took > 0.05 or 8 * took > 0.2 or size >= (8192 if cuda else 2048):
            break
        size *= 2
    flops = 2 * size**3 / took
    x = torch.zeros(16, device=dev)
    op_s = _best(lambda: [x.add_(1) for _ in range(100)], sync) / 100
    buf = torch.empty(2**20, device=dev, dtype=dtype)
    fill = buf.nbytes / _best(lambda: buf.normal_(0.0, 0.02), sync)
    return Probe(bandwidth, flops, op_s, fill)
