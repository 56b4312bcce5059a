"""What every tab that runs a pipeline shares: the example text, the progress tracker, the
config check before a run, the cached load, and the audio conversion for the players.

Keeping these apart from any one tab lets each tab import only what it shows, and keeps the
check of a panel's config (family, machine, dummy weights) the same on every tab.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr
import numpy as np

from lab.models.registry import family
from lab.ui.knobs import check_machine

if TYPE_CHECKING:
    from lab.config import PipelineConfig
    from lab.pipeline import Pipeline
    from lab.ui.context import LabContext
    from lab.ui.panel import Panel

EXAMPLE_TEXT = (
    "The lab measures every stage of speech synthesis. Faster is only better "
    "when it still sounds right."
)
PLAIN = gr.WaveformOptions(show_recording_waveform=False)
# Gradio hands each request its own tracker in place of this default. Tracking tqdm puts the
# bars of what runs inside (weight downloads, benchmark batches) in the browser, with an ETA.
PROGRESS = gr.Progress(track_tqdm=True)


def pcm16(audio: np.ndarray) -> np.ndarray:
    """Float audio to int16 without peak normalization, so levels stay true between chunks
    and between the two sides of an A/B pair."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def resolve_config(ctx: LabContext, panel: Panel, data: dict) -> PipelineConfig:
    """The panel's config, checked against the family and this machine (KnobError if not)."""
    cfg = panel.config(data)
    check_machine(cfg, ctx.cuda_available)
    warning = family(cfg.family).dummy_warning
    if cfg.weights == "dummy" and warning:
        gr.Warning(warning.capitalize() + ".")
    return cfg


def load(ctx: LabContext, cfg: PipelineConfig, progress: gr.Progress, steps: int = 1) -> Pipeline:
    """A cached pipeline; a load (weights, casts, compile warm-up) is step 0 of `steps`, its
    description the latest set-up stage (`lab.stages` indents nested ones for a log)."""
    return ctx.cache.get(cfg, on_load=lambda msg: progress((0, steps), desc=msg.strip(),
                                                           unit="step"))


def verdict_span(verdict: bool | str, text: str) -> str:
    """`text` coloured by a quality verdict, with "{verdict}" in it read as PASS, FAIL or
    INCONCLUSIVE; `verdict` is a report's `passed` or its `outcome`."""
    outcome = {True: "pass", False: "fail"}.get(verdict, verdict)
    if outcome not in ("pass", "fail", "inconclusive"):
        raise ValueError(f"unknown verdict {verdict!r}")
    word = str(outcome).upper()
    return f"<span class='verdict-{outcome}'>{text.replace('{verdict}', word)}</span>"
