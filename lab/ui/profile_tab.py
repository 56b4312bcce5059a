"""Profile tab: one synthesis under torch.profiler, its bottlenecks by stage and by operator.

Stage timings say where time goes; operators say why (convolutions, matmuls, copies). The
request is run once unprofiled first, so one-time costs such as lazy initialization or
compilation do not pose as bottlenecks. The chrome trace is offered for Perfetto.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import gradio as gr
import pandas as pd

from lab.metrics.profile import ProfileResult, profile_call
from lab.ui import charts
from lab.ui.common import EXAMPLE_TEXT, PROGRESS, load, resolve_config
from lab.ui.panel import build_panel

if TYPE_CHECKING:
    from lab.ui.context import LabContext

TOP = 3
STEPS = 4  # load, warm-up, profiled run, trace export


def bottlenecks(result: ProfileResult) -> str:
    """The top stages and operators in words, for a reader who will not open the trace."""
    lines = [f"**Wall time:** {result.wall_ms:.1f} ms", "", "**Top stages:**"]
    lines += [f"{n}. `{r.name}`: {r.total_ms:.1f} ms ({r.pct:.0f}% of the call)"
              for n, r in enumerate(result.stages[:TOP], start=1)]
    ops = result.device_operators or result.operators
    where = "GPU" if result.device_operators else "CPU"
    lines += ["", f"**Top operators ({where} self time):**"]
    lines += [f"{n}. `{r.name}`: {r.self_ms:.1f} ms ({r.pct:.0f}%), {r.calls} calls"
              for n, r in enumerate(ops[:TOP], start=1)]
    return "\n".join(lines)


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame([dataclasses.asdict(r) for r in rows]).round(3)


def run_profile(ctx: LabContext, cfg, text: str, progress) -> tuple[ProfileResult, str]:
    """Load, warm up, profile and export as counted steps, so the bar moves and has an ETA."""
    pipe = load(ctx, cfg, progress, STEPS)
    progress((1, STEPS), desc="warm-up run (not profiled)", unit="step")
    pipe.synthesize(text)
    progress((2, STEPS), desc="profiled run", unit="step")
    result = profile_call(lambda: pipe.synthesize(text), device=pipe.device, top=25)
    progress((3, STEPS), desc="writing the chrome trace", unit="step")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    trace = result.export_trace(ctx.data_dir / "profiles" / f"trace-{stamp}.json")
    return result, str(trace)


def build(ctx: LabContext) -> None:
    text = gr.Textbox(EXAMPLE_TEXT, lines=2, label="Text", elem_id="profile-text")
    panel = build_panel(ctx.default, "profile", ctx.default_preset)
    with gr.Row():
        go = gr.Button("Profile one synthesis", variant="primary", elem_id="profile-go",
                       scale=3)
        stop = gr.Button("Cancel", variant="stop", elem_id="profile-cancel", scale=1)
    status = gr.Markdown(elem_id="profile-status")
    summary = gr.Markdown(elem_id="profile-summary")
    with gr.Row():
        stage_chart = gr.Plot(elem_id="profile-stages")
        op_chart = gr.Plot(elem_id="profile-ops")
    with gr.Accordion("Tables", open=False):
        stages = gr.Dataframe(label="Stages", interactive=False)
        ops = gr.Dataframe(label="Operators", interactive=False)
    trace = gr.File(label="Chrome trace (open in Perfetto or chrome://tracing)",
                    elem_id="profile-trace")

    results = [summary, stage_chart, op_chart, stages, ops, trace]

    def on_profile(data: dict, progress=PROGRESS):
        yield {status: "Profiling…", **dict.fromkeys(results)}
        try:
            cfg = resolve_config(ctx, panel, data)
            result, path = run_profile(ctx, cfg, data[text], progress)
        except (ValueError, RuntimeError, OSError) as err:
            gr.Warning(str(err))
            yield {status: f"⚠️ **{err}**"}
            return
        op_rows = result.device_operators or result.operators
        yield {
            status: "Done.",
            summary: bottlenecks(result),
            stage_chart: charts.top_rows([dataclasses.asdict(r) for r in result.stages],
                                         "Stages (inclusive ms)", value="total_ms"),
            op_chart: charts.top_rows([dataclasses.asdict(r) for r in op_rows],
                                      "Operators (self ms)"),
            stages: _frame(result.stages),
            ops: _frame(op_rows),
            trace: path,
        }

    run = go.click(on_profile, {text, *panel.inputs()}, [status, *results],
                   concurrency_limit=1)
    # The profiled call itself cannot be interrupted; Cancel frees the tab and drops its result.
    stop.click(lambda: "Cancelled: the profile's result was dropped.", None, status,
               cancels=[run])
