"""Operator-level profile of one call, with the pipeline's stage labels kept visible.

Stage timers say which stage is slow; this says why: which operators (convolutions,
matmuls, copies, kernel launches) eat the time inside it. The pipeline wraps its stages in
`torch.profiler.record_function(name)`, so the same run yields both views, and the chrome
trace opens in Perfetto for a timeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from lab.device import resolve_device


@dataclass(frozen=True)
class OpRow:
    """One line of a profile table; `pct` is the share of the call's wall time (or, for
    device operators, of the GPU's busy time)."""

    name: str
    calls: int
    self_ms: float
    total_ms: float
    pct: float


@dataclass
class ProfileResult:
    """What `profile_call` saw: tables sorted slowest first, and the call's return value.

    On a GPU, CPU-side stage times only measure how long launching took; `device_stages`
    holds the GPU time spent inside each label, which is what a CUDA user wants to read.
    """

    wall_ms: float
    operators: list[OpRow]
    stages: list[OpRow]
    device_operators: list[OpRow]
    device_stages: list[OpRow]
    value: object = None
    _profiler: profile | None = field(default=None, repr=False)

    def export_trace(self, path: str | Path) -> Path:
        """Write a chrome trace (JSON) for chrome://tracing or Perfetto."""
        if self._profiler is None:
            raise ValueError("this result holds no profiler trace to export")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._profiler.export_chrome_trace(str(path))
        return path

    def to_markdown(self, top: int = 15) -> str:
        parts = [f"Wall time: {self.wall_ms:.2f} ms", ""]
        for title, rows in (
            ("Stages (GPU time)", self.device_stages),
            ("Stages (CPU time)", self.stages),
            ("Operators (CPU self time)", self.operators),
            ("Operators (GPU self time)", self.device_operators),
        ):
            if rows:
                parts += [f"### {title}", "", _markdown_rows(rows[:top]), ""]
        return "\n".join(parts).rstrip() + "\n"


def _short(name: str, width: int = 80) -> str:
    """Kernel names run to hundreds of characters of template arguments; keep the head."""
    return name if len(name) <= width else name[: width - 3] + "..."


def _markdown_rows(rows: list[OpRow]) -> str:
    lines = ["| name | calls | self ms | total ms | % |", "| --- | ---: | ---: | ---: | ---: |"]
    lines += [
        f"| `{_short(r.name)}` | {r.calls} | {r.self_ms:.3f} | {r.total_ms:.3f} | {r.pct:.1f} |"
        for r in rows
    ]
    return "\n".join(lines)


def profile_call(
    fn: Callable[[], object],
    *,
    device: str | torch.device,
    top: int = 20,
    record_shapes: bool = False,
) -> ProfileResult:
    """Run `fn()` once under torch.profiler and summarise it.

    CUDA activity is recorded when `device` is a CUDA device; the GPU is synchronised before
    the profiler stops so that queued kernels are counted against this call.
    """
    if top < 1:
        raise ValueError(f"top={top} must be >= 1")
    dev = resolve_device(device)
    on_gpu = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    # A pipeline runs its requests on its own worker thread, so the profiler must follow
    # every thread, not only the caller's.
    every_thread = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with profile(activities=activities, record_shapes=record_shapes,
                 experimental_config=every_thread) as prof:
        start = time.perf_counter()
        value = fn()
        if on_gpu:
            torch.cuda.synchronize(dev)
        wall_ms = (time.perf_counter() - start) * 1e3
    averages = prof.key_averages()
    return ProfileResult(
        wall_ms=wall_ms,
        operators=_summary(averages, device=False, stages=False, by="self", base_ms=wall_ms)[:top],
        stages=_summary(averages, device=False, stages=True, by="total", base_ms=wall_ms)[:top],
        device_operators=_summary(averages, device=True, stages=False, by="self",
                                base_ms=_gpu_busy_ms(averages))[:top] if on_gpu else [],
        device_stages=_summary(averages, device=True, stages=True, by="total",
                             base_ms=wall_ms)[:top] if on_gpu else [],
        value=value,
        _profiler=prof,
    )


def _is_cpu(avg) -> bool:
    return avg.device_type == torch.autograd.DeviceType.CPU


def _summary(averages, *, device: bool, stages: bool, by: str, base_ms: float) -> list[OpRow]:
    """Rows of one kind (CPU or GPU; operators or record_function stages), largest first.

    `by` is "self" or "total": the time the rows are sorted by and shown as a share of
    `base_ms`. Operators rank by self time; stages by inclusive time, since a stage's own
    time is mostly Python.
    """
    rows = []
    for a in averages:
        if _is_cpu(a) == device or a.is_user_annotation != stages:
            continue
        self_us = a.self_device_time_total if device else a.self_cpu_time_total
        total_us = a.device_time_total if device else a.cpu_time_total
        if device and not stages and self_us <= 0:
            continue
        shown = self_us if by == "self" else total_us
        rows.append(OpRow(name=a.key, calls=a.count, self_ms=self_us / 1e3,
                          total_ms=total_us / 1e3,
                          pct=100.0 * shown / 1e3 / base_ms if base_ms > 0 else 0.0))
    return sorted(rows, key=lambda r: r.self_ms if by == "self" else r.total_ms, reverse=True)


def _gpu_busy_ms(averages) -> float:
    """All GPU kernel and copy time: the base for each kernel's share."""
    return sum(a.self_device_time_total for a in averages
               if not _is_cpu(a) and not a.is_user_annotation) / 1e3
