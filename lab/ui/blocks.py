"""Assemble the lab's Gradio app from its tabs, around one shared context.

The context holds what outlives a request: the pipeline cache, the vote store under the data
directory and the telemetry sampler. Tabs receive it instead of reaching for globals, so a
test can build an app on a temporary data directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import torch

from lab.config import PipelineConfig, list_presets, load_preset
from lab.data_dir import data_dir
from lab.estimate import estimate, require
from lab.listening import VoteStore
from lab.metrics.telemetry import TelemetrySampler
from lab.pipeline import Pipeline
from lab.ui import ab_tab, bench_tab, live_tab, profile_tab, serve_tab, synth_tab
from lab.ui.panel import PanelGroup
from lab.ui.pipelines import PipelineCache
from lab.ui.player import StreamHub

DEFAULT_PRESET = "cpu-default"
GUARD_CHARS = 200  # the text length a load is judged for when no request text is known yet

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


def default_config() -> PipelineConfig:
    """The shipped CPU preset when present, so the app opens on something that runs anywhere."""
    return load_preset(DEFAULT_PRESET) if DEFAULT_PRESET in list_presets() else PipelineConfig()


@dataclass
class LabContext:
    """Long-lived state shared by every tab and every browser session."""

    data_dir: Path
    cache: PipelineCache | None = None
    votes: VoteStore | None = None
    telemetry: TelemetrySampler = field(default_factory=TelemetrySampler)
    player: StreamHub = field(default_factory=StreamHub)
    cuda_available: bool = field(default_factory=torch.cuda.is_available)
    default: PipelineConfig = field(default_factory=default_config)
    default_preset: str | None = DEFAULT_PRESET if DEFAULT_PRESET in list_presets() else None

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.votes is None:
            self.votes = VoteStore(self.data_dir)
        if self.cache is None:
            self.cache = PipelineCache(factory=self.build_pipeline)

    def build_pipeline(self, cfg: PipelineConfig,
                       on_stage: Callable[[str], None] | None = None) -> Pipeline:
        """A fresh pipeline (benchmarks use it uncached, so they share no warm state), built
        only after an estimate says it fits: every tab's load is refused with the numbers,
        before any weights load, when it would not."""
        require(estimate(cfg, GUARD_CHARS, rates_dir=self.data_dir))
        return Pipeline(cfg, on_stage)


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
