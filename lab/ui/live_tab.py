"""Live tab: what the hardware is doing, next to what requests are experiencing.

A latency spike means little on its own; beside it, GPU utilization, memory-bandwidth use,
power and clocks say whether the device was saturated, starved or throttled. The tab polls
the telemetry sampler and the request event log about once a second while it is open.
Without a GPU it says so and shows the host's CPU and RAM instead.

The Benchmark tab's sweeps run through pipelines too; their requests are counted apart from
the users' (the event log names each request's source), so a sweep neither inflates the
request count nor drags the latency percentiles, yet its load is still visible beside them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr
import numpy as np

from lab.metrics.events import BENCHMARK, USER, events
from lab.ui import charts

if TYPE_CHECKING:
    from lab.metrics.telemetry import Sample
    from lab.ui.context import LabContext

WINDOW_S = 120
REFRESH_S = 1.0
REQUEST_GAP_S = 5.0
"""Idle seconds between two requests beyond which the chart does not join them."""


def _fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} {unit}"


def readings(sample: Sample | None, status: str) -> str:
    """The latest sample as a one-row table; GPU columns only when a GPU reports."""
    if sample is None:
        return f"**Telemetry:** {status}\n\nWaiting for the first sample…"
    host = (f"CPU {sample.cpu_percent:.0f}% · RAM {sample.ram_used_mb / 1024:.1f} / "
            f"{sample.ram_total_mb / 1024:.1f} GB")
    if sample.gpu_name is None:
        return f"**Telemetry:** {status}\n\n{host}"
    return (
        f"**Telemetry:** {status}\n\n"
        "| GPU util | memory | mem-bandwidth util | power | SM clock | memory clock |\n"
        "|---:|---:|---:|---:|---:|---:|\n"
        f"| {_fmt(sample.gpu_util_percent, '%')} "
        f"| {_fmt(sample.gpu_mem_used_mb, 'MB')} / {_fmt(sample.gpu_mem_total_mb, 'MB')} "
        f"| {_fmt(sample.gpu_mem_bw_percent, '%')} | {_fmt(sample.gpu_power_w, 'W', 1)} "
        f"| {_fmt(sample.gpu_sm_clock_mhz, 'MHz')} | {_fmt(sample.gpu_mem_clock_mhz, 'MHz')} |"
        f"\n\n{host}"
    )


def _many(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _done(recent: list[dict], source: str) -> list[dict]:
    return [e for e in recent
            if e.get("total_ms") is not None and e.get("source", USER) == source]


def request_summary(recent: list[dict]) -> str:
    """User requests' count and percentiles; benchmark runs counted on a line of their own."""
    done, bench = _done(recent, USER), _done(recent, BENCHMARK)
    if not done:
        line = f"No user requests in the last {WINDOW_S} s."
    else:
        total = [e["total_ms"] for e in done]
        ttfb = [e["ttfb_ms"] for e in done if e.get("ttfb_ms") is not None]
        line = (f"**{_many(len(done), 'user request')}** in the last {WINDOW_S} s · latency p50 "
                f"{np.percentile(total, 50):.0f} ms, p95 {np.percentile(total, 95):.0f} ms")
        if ttfb:
            line += f" · TTFB p50 {np.percentile(ttfb, 50):.0f} ms"
    if bench:
        line += (f"\n\nBenchmark traffic: **{_many(len(bench), 'request')}** in the same window "
                 "(not counted above; grey in the chart).")
    return line


def refresh(ctx: LabContext) -> tuple:
    """One tick: readings, telemetry chart, request summary and request chart."""
    samples = ctx.telemetry.history(WINDOW_S)
    latest = samples[-1] if samples else None
    has_gpu = latest is not None and latest.gpu_name is not None
    recent = events.recent(WINDOW_S, kind="synthesis")
    gap_s = 3 * ctx.telemetry.interval_s
    return (
        readings(latest, ctx.telemetry.gpu_status()),
        charts.telemetry([s.to_dict() for s in samples], has_gpu, gap_s=gap_s),
        request_summary(recent),
        charts.request_latency(recent, gap_s=REQUEST_GAP_S),
    )


def build(ctx: LabContext) -> gr.Timer:
    """Lay out the tab; returns its timer, which the app activates while the tab is shown."""
    now = refresh(ctx)
    status = gr.Markdown(now[0], elem_id="live-readings")
    hw_chart = gr.Plot(now[1], elem_id="live-telemetry")
    summary = gr.Markdown(now[2], elem_id="live-requests")
    req_chart = gr.Plot(now[3], elem_id="live-latency")
    timer = gr.Timer(REFRESH_S, active=False)
    timer.tick(lambda: refresh(ctx), None, [status, hw_chart, summary, req_chart],
               show_progress="hidden")
    return timer
