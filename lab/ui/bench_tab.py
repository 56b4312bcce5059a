"""Benchmark tab: sweep one knob over a sentence set, chart it, keep the report.

A sweep answers one question per axis: batch size against latency and throughput, decode
interval against time to first audio, precision or quantization against speed, input length
against latency on log-log axes with the fitted exponent. Each finished point is written to
the data directory at once, so cancelling keeps everything measured so far; Cancel stops the
sweep at its next request, and the point it interrupts is dropped, not half-reported.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import gradio as gr
from pandas.io.formats.style import Styler

from lab.bench.report import write_report
from lab.bench.runner import BenchError
from lab.bench.sweep import INPUT_LENGTH, Sweep, runner_measure, streaming_measure
from lab.config import to_dict
from lab.frontend import list_sentence_sets, sentence_set
from lab.ui import charts, tables
from lab.ui.common import PROGRESS, resolve_config
from lab.ui.panel import build_panel
from lab.ui.tables import INT, MS, ONE, RATIO, Column

if TYPE_CHECKING:
    from lab.config import PipelineConfig
    from lab.ui.context import LabContext

AXES = {
    "batch size": ("batch_size", "1, 2, 4"),
    "decode interval": ("decode_interval", "8, 16, 32, 64"),
    "precision": ("dtype", "fp32, bf16"),
    "quantization": ("quant", "none, int8-dynamic"),
    "input length": (INPUT_LENGTH, "40, 80, 160, 320"),
}
CHART_MIN_WIDTH = 420
VALUE_HEADERS = {"batch_size": "Batch size", "decode_interval": "Decode interval (frames)",
                 "dtype": "Precision", "quant": "Quantization",
                 INPUT_LENGTH: "Input length (characters asked)"}
COLUMNS = {
    "value": Column("Value"),
    "n_chars": Column("Characters", INT),
    "config": Column("Config (as run)"),
    "latency_p50_ms": Column("Latency p50 (ms)", MS),
    "latency_p95_ms": Column("Latency p95 (ms)", MS),
    "ttfb_p50_ms": Column("TTFB p50 (ms)", MS),
    "rtf": Column("RTF", RATIO),
    "audio_s_per_s": Column("Audio s per s", ONE),
    "peak_memory_mb": Column("Peak memory (MB)", INT),
    "fallbacks": Column("Fallbacks"),
    "error": Column("Error"),
}


def parse_values(axis: str, raw: str) -> list:
    """Comma-separated sweep values: integers for numeric axes, names for the others."""
    items = [v.strip() for v in raw.split(",") if v.strip()]
    if not items:
        raise BenchError("give at least one value to sweep, separated by commas")
    if axis in ("dtype", "quant"):
        return items
    try:
        return [int(v) for v in items]
    except ValueError as err:
        raise BenchError(f"{axis} values must be whole numbers, got {raw!r}") from err


def make_sweep(ctx: LabContext, cfg: PipelineConfig, axis_name: str, raw: str,
               text_set: str, n_texts: int, repeats: int,
               cancel: threading.Event | None = None) -> Sweep:
    axis = AXES[axis_name][0]
    texts = sentence_set(text_set)[: int(n_texts)]
    if axis == "decode_interval":
        measure = streaming_measure(ctx.build_pipeline, int(repeats), cancel=cancel)
    else:
        measure = runner_measure(ctx.build_pipeline, repeats=int(repeats), warmup=1,
                                 cancel=cancel)
    return Sweep(axis, parse_values(axis, raw), cfg, texts, measure)


def table(rows: list[dict], axis: str | None = None) -> Styler:
    """The sweep's rows with named headers; the value column is named for the axis."""
    axis = axis or next((r["axis"] for r in rows if r.get("axis")), None)
    value = Column(VALUE_HEADERS.get(axis, "Value"))
    return tables.readable(rows, {**COLUMNS, "value": value})


def run_sweep(ctx: LabContext, sweep: Sweep, cancel: threading.Event, progress):
    """Yield (rows, report paths, status) after each point, saving the report every time.

    The points are the outer level of `progress`; the runner's per-batch tqdm bar nests
    under it, so the browser shows both how far the sweep is and how far this point is.
    """
    stem = f"sweep-{sweep.axis}-{time.strftime('%Y%m%d-%H%M%S')}"
    meta = {"axis": sweep.axis, "values": sweep.values, "config": to_dict(sweep.base_config)}
    rows: list[dict] = []
    total = len(sweep.values)
    points = progress.tqdm(sweep.points(cancel), desc=f"sweep over {sweep.axis}",
                           total=total, unit="point")
    for done, point in enumerate(points, start=1):
        rows += point.records()
        paths = write_report(rows, ctx.data_dir / "bench", stem, meta=meta,
                             title=f"Sweep over {sweep.axis}")
        note = f" ({point.error})" if point.error else ""
        yield rows, [str(paths.csv), str(paths.json)], f"{done}/{total} points{note}"


def _cancelled(ctx: LabContext) -> str:
    return (f"Cancelled. Every point finished before the cancel is saved under "
            f"`{ctx.data_dir / 'bench'}`; the point under way was dropped.")


def build(ctx: LabContext) -> None:
    cancels: dict[str, threading.Event] = {}
    panel = build_panel(ctx.default, "bench", ctx.default_preset)
    with gr.Row():
        axis = gr.Radio(list(AXES), value="batch size", label="Sweep axis", elem_id="bench-axis")
        values = gr.Textbox(AXES["batch size"][1], label="Values (comma-separated)",
                            elem_id="bench-values")
    with gr.Row():
        sets = list_sentence_sets()
        text_set = gr.Dropdown(sets, value="short" if "short" in sets else sets[0],
                               label="Sentence set")
        n_texts = gr.Slider(1, 12, value=4, step=1, label="Texts used", elem_id="bench-n")
        repeats = gr.Slider(1, 5, value=1, step=1, label="Repeats")
    with gr.Row():
        go = gr.Button("Run sweep", variant="primary", elem_id="bench-go")
        stop = gr.Button("Cancel", variant="stop", elem_id="bench-cancel")
    status = gr.Markdown(elem_id="bench-status")
    with gr.Row():
        # Side by side when there is room; stacked, each at a readable width, when not.
        chart_a = gr.Plot(elem_id="bench-chart-a", min_width=CHART_MIN_WIDTH)
        chart_b = gr.Plot(elem_id="bench-chart-b", min_width=CHART_MIN_WIDTH)
    results = gr.Dataframe(label="Results", interactive=False, elem_id="bench-table")
    files = gr.File(label="Report (CSV / JSON, also saved under the data directory)",
                    file_count="multiple", elem_id="bench-files")
    axis.change(lambda a: AXES[a][1], axis, values)

    def on_run(data: dict, request: gr.Request, progress=PROGRESS):
        key = request.session_hash or "default"
        cancel = cancels[key] = threading.Event()
        cleared = {results: None, chart_a: None, chart_b: None, files: None}
        try:
            cfg = resolve_config(ctx, panel, data)
            sweep = make_sweep(ctx, cfg, data[axis], data[values], data[text_set],
                               data[n_texts], data[repeats], cancel)
        except ValueError as err:
            cancels.pop(key, None)
            gr.Warning(str(err))
            yield {**cleared, status: f"⚠️ **{err}**"}
            return
        try:
            yield {**cleared, status: f"Running {len(sweep.values)} points…"}
            for rows, paths, note in run_sweep(ctx, sweep, cancel, progress):
                fig_a, fig_b = charts.sweep_figures(sweep.axis, rows)
                yield {results: table(rows, sweep.axis), chart_a: fig_a, chart_b: fig_b,
                       files: paths, status: f"Sweep over {data[axis]}: {note}"}
            if cancel.is_set():
                yield {status: _cancelled(ctx)}
        finally:
            if cancels.get(key) is cancel:
                del cancels[key]

    def on_cancel(request: gr.Request):
        event = cancels.get(request.session_hash or "default")
        if event is None:
            return "No sweep is running."
        event.set()
        return _cancelled(ctx)

    inputs = {axis, values, text_set, n_texts, repeats, *panel.inputs()}
    # Progress shows on the status line only, so each point's charts stay in view as they come.
    run = go.click(on_run, inputs, [status, results, chart_a, chart_b, files],
                   concurrency_limit=1, show_progress_on=[status])
    stop.click(on_cancel, None, status, cancels=[run])
