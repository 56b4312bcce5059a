"""Plotly figures for the app: stage timings, decode steps, sweeps, win rates and rankings, live
telemetry, profiles.

Figures are built from plain rows and dicts so that the notebooks can draw the same charts
from the same lab results, and a chart never needs a model loaded to be rendered.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.bench.complexity import MIN_POINTS, fit_power_law
from lab.metrics.events import BENCHMARK, USER

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


def number(value: float) -> str:
    """A tick or cell number as people write it: 1,200 and 85, not 1.2k or 85.00001."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _log_ticks(values: Sequence[float], max_ticks: int = 8, pad: float = 1.15) -> dict:
    """A log axis over the data (widened by `pad` each way) with ticks at round numbers
    inside it, labelled in full.

    Plotly's own log ticks label a short range with bare mantissas ("2", "5") between
    decade labels, which reads as noise; round values (1-2-5 steps, finer when the range
    is narrow) keep every label a number a reader can use. The range is set here so that
    every tick chosen is on screen.
    """
    lo, hi = min(values), max(values)
    if lo <= 0:
        return {}
    lo_edge, hi_edge = lo / pad, hi * pad
    ticks: list[float] = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
        decades = range(math.floor(math.log10(lo_edge)), math.ceil(math.log10(hi_edge)) + 1)
        ticks = [m * 10.0**e for e in decades for m in mantissas]
        ticks = [t for t in ticks if lo_edge <= t <= hi_edge]
        if len(ticks) >= 3:
            break
    if len(ticks) < 2 or len(ticks) > max_ticks:
        ticks = sorted({lo, hi})
    return dict(tickmode="array", tickvals=ticks, ticktext=[number(t) for t in ticks],
                range=[math.log10(lo_edge), math.log10(hi_edge)])


def _at_values(values: Sequence[float], max_ticks: int = 8) -> dict:
    """A log axis with ticks at the measured values when few enough to read, else round
    ticks."""
    ticks = _log_ticks(values, max_ticks)
    distinct = sorted(set(values))
    if len(distinct) <= max_ticks:
        ticks.update(tickvals=distinct, ticktext=[number(v) for v in distinct])
    return ticks


def latency_vs_length(rows: Sequence[dict]) -> go.Figure:
    """Log-log latency against input length, with the fitted power law and its exponent once
    there are enough lengths for a fit to mean something (`MIN_POINTS`)."""
    xs, ys = _xy(rows, "n_chars", "latency_p50_ms")
    title = "Latency vs input length (log-log)"
    if not xs:
        return empty(title, "no input length finished")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="measured p50",
                             marker=dict(size=9)))
    lengths = len(set(xs))
    if lengths < MIN_POINTS:
        title = (f"{title}<br><sup>no exponent fitted: {lengths} input length(s), "
                 f"a fit needs at least {MIN_POINTS}</sup>")
    else:
        fit = fit_power_law(xs, ys)
        fig.add_trace(go.Scatter(x=xs, y=list(fit.predict(xs)), mode="lines",
                                 name=f"fit: n^{fit.k:.2f} (R² {fit.r2:.2f}, {lengths} lengths)"))
        title = f"{title}: exponent k = {fit.k:.2f}"
    return _layout(fig, title,
                   xaxis=dict(type="log", title="input length (characters)", **_at_values(xs)),
                   yaxis=dict(type="log", title="latency p50 (ms)", **_log_ticks(ys)))


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
    """Stacked bars per config pair: share won by the baseline, ties, and the candidate; over
    them, the candidate's preference (ties half) with its 95% Wilson interval. An interval
    that crosses the 50% line is no preference yet."""
    title = "Blind A/B win rates"
    if not rows:
        return empty(title, "no votes yet")
    pairs = [f"{r['candidate']}<br>vs {r['baseline']} (n={r['votes']})" for r in rows]
    fig = go.Figure()
    for key, name, color in (("baseline_win_rate", "baseline wins", "#4c78a8"),
                             ("tie_rate", "same", "#bab0ac"),
                             ("candidate_win_rate", "candidate wins", "#f58518")):
        fig.add_trace(go.Bar(y=pairs, x=[r[key] for r in rows], name=name, orientation="h",
                             marker_color=color))
    if all("preference_low" in r for r in rows):
        prefs = [r["candidate_preference"] for r in rows]
        above = [r["preference_high"] - r["candidate_preference"] for r in rows]
        below = [r["candidate_preference"] - r["preference_low"] for r in rows]
        fig.add_trace(go.Scatter(
            y=pairs, x=prefs, mode="markers", name="candidate preference, 95% CI",
            marker=dict(color="black", size=9, symbol="diamond"),
            error_x=dict(type="data", symmetric=False, array=above, arrayminus=below,
                         color="black", thickness=2)))
        fig.add_vline(x=0.5, line_dash="dot", line_color="#444")
    return _layout(fig, title, barmode="stack", legend_traceorder="normal",
                   xaxis=dict(range=[0, 1], title="share of votes", tickformat=".0%"))


def ranking(rows: Sequence[dict], advice: str | None = None) -> go.Figure:
    """Configurations best first on the Elo scale, each with its bootstrap interval; the dotted
    line is the average configuration. Intervals that overlap are not separated yet."""
    title = "Ranking across configurations (Bradley-Terry, Elo scale, 95% bootstrap interval)"
    if len(rows) < 3:
        return empty(title, advice or "ranks need votes on three or more configurations")
    rows = sorted(rows, key=lambda r: r["rank"], reverse=True)  # plotly draws bottom-up
    names = [f"{r['rank']}. {r['config']} (n={r['votes']})" for r in rows]
    fig = go.Figure(go.Scatter(
        x=[r["elo"] for r in rows], y=names, mode="markers", name="Elo",
        text=[f"{r['elo']} ({r['elo_low']}-{r['elo_high']})" for r in rows],
        hovertemplate="%{y}: %{text}<extra></extra>",
        marker=dict(color="#4c78a8", size=11),
        error_x=dict(type="data", symmetric=False, thickness=3, color="#4c78a8",
                     array=[r["elo_high"] - r["elo"] for r in rows],
                     arrayminus=[r["elo"] - r["elo_low"] for r in rows]),
    ))
    fig.add_vline(x=1000, line_dash="dot", line_color="#888")
    return _layout(fig, title, showlegend=False, title_font_size=14,
                   height=max(HEIGHT, 80 + 45 * len(rows)),
                   xaxis_title="Elo (+100 = wins about 64% against the other)")


def quality_pair(scores: dict[str, dict[str, float | None]]) -> go.Figure:
    """MOS-proxy bars for the revealed pair, one group per MOS axis."""
    fig = go.Figure()
    for label, values in scores.items():
        keys = [k for k, v in values.items() if v is not None]
        fig.add_trace(go.Bar(x=keys, y=[values[k] for k in keys], name=label))
    return _layout(fig, "MOS proxies (DNSMOS, Distill-MOS; 1-5)", barmode="group",
                   yaxis=dict(range=[1, 5]))


def _times(stamps: Sequence[float]) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(t) for t in stamps]


def gapped(rows: Sequence[dict], keys: Sequence[str], gap_s: float,
           start: str | None = None) -> tuple[list, dict[str, list]]:
    """(times, {key: values}) with a blank wherever nothing happened for over `gap_s`.

    A line drawn from the last point before an idle spell to the first one after it looks
    like a measurement across the gap; plotly breaks a line at a None, so one goes in
    between. `start`, when given, names a field holding how long before its `time` each
    row began (a request's duration in ms), so the gap is idle time, not time between ends.
    """
    times: list = []
    values: dict[str, list] = {k: [] for k in keys}
    last_end = None
    for row in sorted(rows, key=lambda r: r["time"]):
        began = row["time"] - (row.get(start) or 0) / 1000 if start else row["time"]
        if last_end is not None and began - last_end > gap_s:
            times.append(dt.datetime.fromtimestamp((last_end + began) / 2))
            for k in keys:
                values[k].append(None)
        times.append(dt.datetime.fromtimestamp(row["time"]))
        for k in keys:
            values[k].append(row.get(k))
        last_end = row["time"]
    return times, values


def telemetry(samples: Sequence[dict], has_gpu: bool, gap_s: float = 3.0) -> go.Figure:
    """Utilization, memory and power over time; host CPU/RAM when there is no GPU.

    Lines break where no sample came for over `gap_s` (the sampler was stopped or stalled).
    """
    title = "GPU telemetry" if has_gpu else "Host telemetry (no GPU)"
    if not samples:
        return empty(title, "waiting for the first sample")
    if not has_gpu:
        t, v = gapped(samples, ("cpu_percent", "ram_used_mb"), gap_s)
        fig = make_subplots(rows=1, cols=2, subplot_titles=("CPU %", "RAM used (MB)"))
        fig.add_trace(go.Scatter(x=t, y=v["cpu_percent"], name="CPU %"), 1, 1)
        fig.add_trace(go.Scatter(x=t, y=v["ram_used_mb"], name="RAM MB"), 1, 2)
        return _layout(fig, title)
    keys = ("gpu_util_percent", "gpu_mem_bw_percent", "gpu_mem_used_mb", "gpu_power_w",
            "gpu_sm_clock_mhz", "gpu_mem_clock_mhz")
    t, v = gapped(samples, keys, gap_s)
    fig = make_subplots(rows=1, cols=4, subplot_titles=(
        "utilization %", "memory used (MB)", "power (W)", "clocks (MHz)"))
    for key, name in (("gpu_util_percent", "SM util"), ("gpu_mem_bw_percent", "mem-bandwidth")):
        fig.add_trace(go.Scatter(x=t, y=v[key], name=name), 1, 1)
    fig.add_trace(go.Scatter(x=t, y=v["gpu_mem_used_mb"], name="memory"), 1, 2)
    fig.add_trace(go.Scatter(x=t, y=v["gpu_power_w"], name="power"), 1, 3)
    for key, name in (("gpu_sm_clock_mhz", "SM clock"), ("gpu_mem_clock_mhz", "memory clock")):
        fig.add_trace(go.Scatter(x=t, y=v[key], name=name), 1, 4)
    return _layout(fig, title)


def request_latency(events: Sequence[dict], gap_s: float = 5.0) -> go.Figure:
    """User requests' latency and TTFB over time, and benchmark runs apart in grey.

    A line joins requests only within a burst: it breaks where the service sat idle for
    over `gap_s` between one request's end and the next one's start.
    """
    title = "Requests: total latency and TTFB"
    points = [e for e in events if e.get("total_ms") is not None]
    if not points:
        return empty(title, "no synthesis requests in this window yet")
    user = [e for e in points if e.get("source", USER) == USER]
    bench = [e for e in points if e.get("source", USER) == BENCHMARK]
    fig = go.Figure()
    t, v = gapped(user, ("total_ms", "ttfb_ms"), gap_s, start="total_ms")
    fig.add_trace(go.Scatter(x=t, y=v["total_ms"], mode="markers+lines", name="total ms",
                             line=dict(color="#4c78a8")))
    fig.add_trace(go.Scatter(x=t, y=v["ttfb_ms"], mode="markers+lines", name="TTFB ms",
                             line=dict(color="#f58518")))
    if bench:
        t, v = gapped(bench, ("total_ms",), gap_s, start="total_ms")
        fig.add_trace(go.Scatter(x=t, y=v["total_ms"], mode="markers+lines",
                                 name="benchmark requests, total ms",
                                 line=dict(color="#bab0ac", dash="dot"),
                                 marker=dict(symbol="x", size=6)))
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
