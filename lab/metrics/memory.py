"""Peak memory of one request, not of the process's whole life.

A lifetime peak only ever rises: run after run it grows whatever the config, so an int8 run
that follows an fp32 one looks larger. Each request therefore resets the peak when it starts
and reads it when it ends. On CUDA that is the allocator's peak statistics. On Linux the kernel
lets a process reset its resident-set high-water mark (writing 5 to /proc/self/clear_refs) and
reports it as VmHWM; elsewhere only the lifetime peak exists, and `how()` says so.

The peak is process-wide: requests that overlap in time share it, and each reports the peak
since the latest reset among them. On a CPU the pipeline keeps the heap its requests free, for
speed (`lab.malloc`), so a short request after a long one on the same pipeline still holds the
long one's pages; a new pipeline hands them back before it loads.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import torch

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")


def _can_reset_rss() -> bool:
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


RSS_RESETS = sys.platform.startswith("linux") and _can_reset_rss()


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif RSS_RESETS:
        CLEAR_REFS.write_text("5")


def _rss_high_water_mb() -> float:
    for line in STATUS.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("VmHWM missing from /proc/self/status")


def peak_mb(device: torch.device) -> float:
    """Peak since the last `reset_peak`: device memory allocated on CUDA, resident memory on
    a CPU (the lifetime peak where it cannot be reset)."""
    if device.type == "cuda":
        return _cuda_peak_bytes(device) / 2**20
    if RSS_RESETS:
        return _rss_high_water_mb()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def _cuda_peak_bytes(device: torch.device) -> int:
    """`torch.cuda.max_memory_allocated` without its cost: that call flattens every allocator
    statistic into a sorted dict in Python, which a server finishing fifty requests a second
    paid on its serving thread; the nested dict it starts from already holds the peak."""
    return torch.cuda.memory_stats_as_nested_dict(device)["allocated_bytes"]["all"]["peak"]


def how(device: torch.device) -> str:
    """What `peak_mb` measures here, in words for a table's footnote."""
    if device.type == "cuda":
        return "peak CUDA memory allocated during the request"
    if RSS_RESETS:
        return ("peak resident memory of the process during the request (with the heap kept "
                "from this pipeline's earlier requests)")
    return "peak resident memory of the process since it started (this OS cannot reset it)"
