"""Plotly figures for the app: stage timings, decode steps, sweeps, win rates, live telemetry,
profiles.

Figures are built from plain rows and dicts so that the notebooks can draw the same charts
from the same lab results, and a chart never needs a model loaded to be rendered.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.bench.complexity import fit_power_law

TEMPLATE = "plotly_white"
HEIGHT = 340


def _layout(fig: go.Figure, title: str, **layout: object) -> go.Figure:
    fig.update_layout(
        title=title, template=TEMPLATE, height=HEIGHT, margin=dict(l=60, r=20, t=50, b=50),
        legend=dict(orientation="h", y=-0.25),
    )
    return fig.update_layout(**layout)


def empty(title: str, message: str) -> go.Figure:
    """A blank chart that says why it is blank, instead of an empty box."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper",
                       yref="paper", font=dict(size=14, color="#666"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title)


def stage_timings(stages: dict[str, float], title: str = "Time per stage") -> go.Figure:
    """Horizontal bars, slowest stage on top, labelled with ms and share of the total."""
    if not stages:
        return empty(title, "no stage timings recorded")
    items = sorted(stages.items(), key=lambda kv: kv[1])
    total = sum(v for _, v in items) or 1.0
    fig = go.Figure(go.Bar(
        x=[v for _, v in items], y=[k for k, _ in items], orientation="h",
        text=[f"{v:.1f} ms ({100 * v / total:.0f}%)" for _, v in items],
        textposition="auto", marker_color="#4c78a8",
    ))
    return _layout(fig, title, xaxis_title="milliseconds")


def _moving_median(values: Sequence[float], window: int) -> list[float]:
    """Median of each value and the `window - 1` before it (fewer at the start): a step
    delayed by another thread should not bend the trend."""
    return [statistics.median(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def step_times(step_ms: Sequence[float], title: str = "Time per decode step",
               blank: str = "no decode steps recorded") -> go.Figure:
    """Each decode step's time over the utterance, with a moving median through the noise.

    Without a KV cache every step recomputes the whole prefix, so the trend climbs with the
    utterance; with one it stays flat. The y axis stops at twice the trend's peak, so a few
    stalled steps cannot flatten the curve; how many were cut is written under the title.
    `blank` says why a chart has no steps to show.
    """
    if not step_ms:
        return empty(title, blank)
    steps = list(range(len(step_ms)))
    window = max(3, len(step_ms) // 20)
    trend = _moving_median(step_ms, window)
    cap = 2 * max(trend)
    cut = sum(v > cap for v in step_ms)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=list(step_ms), mode="lines", name="each step",
                             line=dict(color="#9ecae9", width=1)))
    fig.add_trace(go.Scatter(x=steps, y=trend, mode="lines", name=f"median of {window} steps",
                             line=dict(color="#4c78a8", width=2.5)))
    if cut:
        title = f"{title}<br><sup>{cut} step(s) above {cap:.0f} ms are off the chart</sup>"
    return _layout(fig, title, xaxis_title="decode step", yaxis_title="ms",
                   yaxis_range=[0, cap])


def _xy(rows: Sequence[dict], x: str, y: str) -> tuple[list, list]:
    pairs = [(r[x], r[y]) for r in rows if r.get(y) is not None and r.get(x) is not None]
    pairs.sort(key=lambda p: p[0])
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _ticks(rows: Sequence[dict]) -> dict:
    """Ticks at the swept values only: a batch size of 1.5 does not exist."""
    values = sorted({r["value"] for r in rows if isinstance(r.get("value"), (int, float))})
    return dict(tickmode="array", tickvals=values) if values else {}


def latency_vs_batch(rows: Sequence[dict]) -> go.Figure:
    fig = go.Figure()
    for col, name in (("latency_p50_ms", "p50"), ("latency_p95_ms", "p95")):
        xs, ys = _xy(rows, "value", col)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"latency {name}"))
    return _layout(fig, "Latency vs batch size", xaxis=dict(title="batch size", **_ticks(rows)),
                   yaxis_title="ms per request")


def throughput_vs_batch(rows: Sequence[dict]) -> go.Figure:
    xs, ys = _xy(rows, "value", "audio_s_per_s")
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", name="throughput"))
    return _layout(fig, "Throughput vs batch size", xaxis=dict(title="batch size", **_ticks(rows)),
                   yaxis_title="audio seconds per second")


def ttfb_vs_interval(rows: Sequence[dict]) -> go.Figure:
    fig = go.Figure()
    for col, name in (("ttfb_p50_ms", "TTFB p50"), ("ttfb_p95_ms", "TTFB p95")):
        xs, ys = _xy(rows, "value", col)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name))
    return _layout(fig, "Time to first audio vs decode interval",
                   xaxis=dict(title="decode interval (frames)", **_ticks(rows)), yaxis_title="ms")


def by_setting(rows: Sequence[dict], axis: str) -> go.Figure:
    """Latency and throughput side by side for a categorical axis (dtype, quant, compile)."""
    labels = [str(r["value"]) for r in rows if r.get("latency_p50_ms") is not None]
    ok = [r for r in rows if r.get("latency_p50_ms") is not None]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("latency p50 (ms)", "audio s per s"))
    fig.add_trace(go.Bar(x=labels, y=[r["latency_p50_ms"] for r in ok], name="latency"), 1, 1)
    fig.add_trace(go.Bar(x=labels, y=[r["audio_s_per_s"] for r in ok], name="throughput"), 1, 2)
    return _layout(fig, f"Speed by {axis}", showlegend=False)


def latency_vs_length(rows: Sequence[dict]) -> go.Figure:
    """Log-log latency against input length with the fitted power law and its exponent."""
    xs, ys = _xy(rows, "n_chars", "latency_p50_ms")
    title = "Latency vs input length (log-log)"
    if len(set(xs)) < 2:
        return empty(title, "need at least two input lengths to fit an exponent")
    fit = fit_power_law(xs, ys)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="measured p50"))
    fig.add_trace(go.Scatter(x=xs, y=list(fit.predict(xs)), mode="lines",
                             name=f"fit: n^{fit.k:.2f} (R² {fit.r2:.2f})"))
    return _layout(fig, f"{title}: exponent k = {fit.k:.2f}", xaxis_type="log",
                   yaxis_type="log", xaxis_title="input length (characters)",
                   yaxis_title="latency p50 (ms)")


def sweep_figures(axis: str, rows: Sequence[dict]) -> list[go.Figure]:
    """The two charts that answer the question a sweep over `axis` asks."""
    ok = [r for r in rows if not r.get("error")]
    if not ok:
        return [empty("Sweep", "no point finished"), empty("Sweep", "no point finished")]
    if axis == "batch_size":
        return [latency_vs_batch(ok), throughput_vs_batch(ok)]
    if axis == "decode_interval":
        return [ttfb_vs_interval(ok), latency_vs_batch(ok).update_layout(
            title="Latency vs decode interval", xaxis_title="decode interval (frames)")]
    if axis == "input_length":
        return [latency_vs_length(ok), throughput_vs_batch(ok).update_layout(
            title="Throughput vs input length", xaxis_title="input length (characters)")]
    return [by_setting(ok, axis), ttfb_vs_interval(ok).update_layout(
        title=f"TTFB by {axis}", xaxis_title=axis)]


def win_rates(rows: Sequence[dict]) -> go.Figure:
    """Stacked bars per config pair: share won by each side and share of ties."""
    title = "Blind A/B win rates"
    if not rows:
        return empty(title, "no votes yet")
    pairs = [f"{r['config_a']}<br>vs {r['config_b']} (n={r['votes']})" for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=pairs, x=[r["a_win_rate"] for r in rows], name="first wins",
                         orientation="h", marker_color="#4c78a8"))
    fig.add_trace(go.Bar(y=pairs, x=[r["ties"] / r["votes"] for r in rows], name="same",
                         orientation="h", marker_color="#bab0ac"))
    fig.add_trace(go.Bar(y=pairs, x=[r["b_win_rate"] for r in rows], name="second wins",
                         orientation="h", marker_color="#f58518"))
    return _layout(fig, title, barmode="stack", xaxis=dict(range=[0, 1], title="share"),
                   legend_traceorder="normal")


def quality_pair(scores: dict[str, dict[str, float | None]]) -> go.Figure:
    """MOS-proxy bars for the revealed pair, one group per MOS axis."""
    fig = go.Figure()
    for label, values in scores.items():
        keys = [k for k, v in values.items() if v is not None]
        fig.add_trace(go.Bar(x=keys, y=[values[k] for k in keys], name=label))
    return _layout(fig, "MOS proxy (DNSMOS, 1-5)", barmode="group", yaxis=dict(range=[1, 5]))


def _times(stamps: Sequence[float]) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(t) for t in stamps]


def telemetry(samples: Sequence[dict], has_gpu: bool) -> go.Figure:
    """Utilization, memory and power over time; host CPU/RAM when there is no GPU."""
    title = "GPU telemetry" if has_gpu else "Host telemetry (no GPU)"
    if not samples:
        return empty(title, "waiting for the first sample")
    t = _times([s["time"] for s in samples])
    if not has_gpu:
        fig = make_subplots(rows=1, cols=2, subplot_titles=("CPU %", "RAM used (MB)"))
        fig.add_trace(go.Scatter(x=t, y=[s["cpu_percent"] for s in samples], name="CPU %"), 1, 1)
        fig.add_trace(go.Scatter(x=t, y=[s["ram_used_mb"] for s in samples], name="RAM MB"), 1, 2)
        return _layout(fig, title)
    fig = make_subplots(rows=1, cols=4, subplot_titles=(
        "utilization %", "memory used (MB)", "power (W)", "clocks (MHz)"))
    for key, name in (("gpu_util_percent", "SM util"), ("gpu_mem_bw_percent", "mem-bandwidth")):
        fig.add_trace(go.Scatter(x=t, y=[s[key] for s in samples], name=name), 1, 1)
    fig.add_trace(go.Scatter(x=t, y=[s["gpu_mem_used_mb"] for s in samples], name="memory"), 1, 2)
    fig.add_trace(go.Scatter(x=t, y=[s["gpu_power_w"] for s in samples], name="power"), 1, 3)
    for key, name in (("gpu_sm_clock_mhz", "SM clock"), ("gpu_mem_clock_mhz", "memory clock")):
        fig.add_trace(go.Scatter(x=t, y=[s[key] for s in samples], name=name), 1, 4)
    return _layout(fig, title)


def request_latency(events: Sequence[dict]) -> go.Figure:
    title = "Requests: total latency and TTFB"
    points = [e for e in events if e.get("total_ms") is not None]
    if not points:
        return empty(title, "no synthesis requests in this window yet")
    t = _times([e["time"] for e in points])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=t, y=[e["total_ms"] for e in points], mode="markers+lines",
                             name="total ms"))
    fig.add_trace(go.Scatter(x=t, y=[e.get("ttfb_ms") for e in points], mode="markers+lines",
                             name="TTFB ms"))
    return _layout(fig, title, yaxis_title="ms")


def top_rows(rows: Sequence[dict], title: str, value: str = "self_ms", n: int = 12) -> go.Figure:
    """Horizontal bars of the `n` costliest profile rows (stages or operators)."""
    if not rows:
        return empty(title, "nothing recorded")
    picked = sorted(rows, key=lambda r: r[value], reverse=True)[:n][::-1]
    names = [r["name"] if len(r["name"]) <= 40 else r["name"][:37] + "..." for r in picked]
    fig = go.Figure(go.Bar(x=[r[value] for r in picked], y=names, orientation="h",
                           text=[f"{r['pct']:.1f}%" for r in picked], textposition="auto",
                           marker_color="#e45756"))
    return _layout(fig, title, xaxis_title=value.replace("_", " "))
