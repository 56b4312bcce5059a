"""Assemble the lab's Gradio app from its tabs, around one shared `lab.ui.context`."""

from __future__ import annotations

import gradio as gr

from lab.data_dir import data_dir
from lab.ui import ab_tab, bench_tab, live_tab, profile_tab, serve_tab, synth_tab
from lab.ui.context import LabContext
from lab.ui.panel import PanelGroup

CSS = """
#dummy-warning, .dummy-warning h2 { color: #b00020; }
.verdict-pass { color: #1b7a2e; font-weight: 600; }
.verdict-fail { color: #b00020; font-weight: 600; }
.verdict-inconclusive { color: #8a5a00; font-weight: 600; }
.synth-heard { font-weight: 600; min-height: 1.4em; }
/* Tables keep their columns in a narrow window and scroll sideways instead of breaking
   every cell one letter per line. */
.prose table { display: block; overflow-x: auto; max-width: 100%; }
.prose th, .prose td { white-space: nowrap; }
"""


def build_app(ctx: LabContext | None = None) -> gr.Blocks:
    """The whole app: Synthesize, A/B, Benchmark, Live, Profile and Serve tabs.

    The knob panels of the tabs that run one config share their state, so a setting made on
    one tab is the setting on the others; A/B keeps its own two panels, one per side.
    """
    ctx = ctx or LabContext(data_dir())
    ctx.telemetry.start()
    with gr.Blocks(title="TTS Optimization Lab") as demo:
        gr.Markdown(
            "# TTS Optimization Lab\n"
            "Make text-to-speech fast and prove it still sounds right. "
            f"Data directory: `{ctx.data_dir}`"
        )
        shared = PanelGroup()  # Synthesize, Benchmark, Profile and Serve show one knob state
        with gr.Tabs():
            with gr.Tab("Synthesize", id="synth") as synth, shared.collect():
                synth_tab.build(ctx)
            with gr.Tab("A/B", id="ab") as ab:
                ab_tab.build(ctx, demo)
            with gr.Tab("Benchmark", id="bench") as bench, shared.collect():
                bench_tab.build(ctx)
            with gr.Tab("Live", id="live") as live:
                timer = live_tab.build(ctx)
            with gr.Tab("Profile", id="profile") as prof, shared.collect():
                profile_tab.build(ctx)
            with gr.Tab("Serve", id="serve") as serve, shared.collect():
                serve_tab.build(ctx)
        shared.link()
        live.select(lambda: gr.Timer(active=True), None, timer)
        for other in (synth, ab, bench, prof, serve):
            other.select(lambda: gr.Timer(active=False), None, timer)
    return demo
