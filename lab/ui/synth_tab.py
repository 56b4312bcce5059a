"""Synthesize tab: type text, turn knobs, hear it stream, see what each stage cost.

Audio is played as it is decoded (the pipeline's `stream`), so the time to first audio the
tab reports is the one the listener experiences. The whole take is also offered as a WAV
for download and comparison once synthesis ends. For an autoregressive family the tab also
shows each decode step's time over the utterance next to what the KV cache holds, so engine
settings (a KV cache or none) can be compared run against run.
"""

from __future__ import annotations

import queue
import shutil
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr
import numpy as np

from lab.pipeline import describe_startup
from lab.ui import charts
from lab.ui.common import EXAMPLE_TEXT, PLAIN, PROGRESS, load, pcm16, resolve_config
from lab.ui.knobs import Panel, build_panel

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from lab.pipeline import Pipeline, Synthesis
    from lab.ui.blocks import LabContext

STREAMING = shutil.which("ffmpeg") is not None


def metrics_markdown(syn: Synthesis, chunks: int) -> str:
    m = syn.metrics
    return (
        "| TTFB | total latency | audio | RTF | audio s / s | peak memory |\n"
        "|---:|---:|---:|---:|---:|---:|\n"
        f"| {m.ttfb_ms:.0f} ms | {m.total_ms:.0f} ms | {m.audio_seconds:.2f} s | {m.rtf:.3f} "
        f"| {m.audio_seconds_per_second:.2f} | {m.peak_memory_mb:.0f} MB |\n\n"
        f"{chunks} chunks streamed. RTF below 1 is faster than real time."
    )


def engine_markdown(pipe: Pipeline, syn: Synthesis) -> str:
    """Decode-step costs and the KV cache, side by side, for comparing engine settings."""
    if not pipe.family.autoregressive:
        return f"**Decode steps:** n/a ({pipe.family.name} is not autoregressive)."
    m = syn.metrics
    kv = pipe.memory_facts().get("KV cache", "n/a")
    tps = "n/a" if m.tokens_per_second is None else f"{m.tokens_per_second:.1f}"
    if not m.step_ms:
        return f"**Decode steps:** none ran. Tokens / s: {tps}. KV cache: {kv}."
    first, last = m.step_quarters
    return (
        "| decode steps | ms / step | first ¼ (median) | last ¼ (median) | tokens / s "
        "| KV cache |\n"
        "|---:|---:|---:|---:|---:|:---|\n"
        f"| {len(m.step_ms)} | {m.ms_per_step:.2f} ms | {first:.2f} ms | {last:.2f} ms "
        f"| {tps} | {kv} |"
    )


def step_chart(pipe: Pipeline, syn: Synthesis) -> go.Figure:
    """Per-step decode time over the utterance, or a blank chart saying why there is none."""
    fam = pipe.family
    blank = "no decode steps ran" if fam.autoregressive else f"{fam.name} is not autoregressive"
    return charts.step_times(syn.metrics.step_ms, "ms per decode step", blank)


def notes_markdown(pipe: Pipeline, syn: Synthesis) -> str:
    """Fallbacks, text notes, the config as it really ran (after fallbacks) and memory."""
    ran = pipe.resolved
    fallbacks = syn.fallbacks
    warnings = syn.warnings
    lines = ["**Fallbacks fired:** " + ("none" if not fallbacks else "")]
    lines += [f"- {f}" for f in fallbacks]
    lines += [f"- text note: {w}" for w in warnings]
    lines.append(f"\nRan on `{pipe.device}` with `{ran.dtype}` / quant `{ran.quant}`, "
                 f"compile `{ran.compile}`.")
    lines += [f"- {name}: {value}" for name, value in pipe.memory_facts().items()]
    lines.append(f"\n**Startup:** {describe_startup(pipe.startup)}.")
    return "\n".join(lines)


def _produce(pipe: Pipeline, text: str, out: queue.Queue) -> None:
    """Run the stream on its own thread so its clock never includes the browser's pace."""
    stream = pipe.stream(text)
    try:
        while True:
            out.put(next(stream))
    except StopIteration as stop:
        out.put(_End(stop.value))
    except Exception as err:  # noqa: BLE001  handed to the consumer, which re-raises it
        out.put(_End(None, err))


@dataclass(frozen=True)
class _End:
    synthesis: Synthesis | None
    error: Exception | None = None


def stream_run(pipe: Pipeline, text: str):
    """Yield audio as chunks arrive (merging any that queued up); return the Synthesis.

    The pipeline streams on a worker thread, so its time to first audio and total time are
    the model's, not the time the UI took to forward earlier chunks.
    """
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_produce, args=(pipe, text, inbox), daemon=True).start()
    end = None
    while end is None:
        got = [inbox.get()]
        while not inbox.empty():
            got.append(inbox.get())
        if isinstance(got[-1], _End):
            end = got.pop()
        if got:
            yield np.concatenate([c.audio for c in got])
    if end.error is not None:
        raise end.error
    return end.synthesis


@dataclass
class SynthOutputs:
    stream: gr.Audio
    take: gr.Audio
    metrics: gr.Markdown
    engine: gr.Markdown
    chart: gr.Plot
    steps: gr.Plot
    notes: gr.Markdown
    status: gr.Markdown

    def all(self) -> list:
        return [self.stream, self.take, self.metrics, self.engine, self.chart, self.steps,
                self.notes, self.status]


def _fail(out: SynthOutputs, message: str) -> dict:
    gr.Warning(message)
    return {out.status: f"⚠️ **{message}**"}


def synthesize(ctx: LabContext, out: SynthOutputs, panel: Panel, text: str, data: dict,
               progress: gr.Progress):
    """The Synthesize button: stream chunks to the player, then fill in the numbers."""
    try:
        cfg = resolve_config(ctx, panel, data)
        pipe = load(ctx, cfg, progress)
    except (ValueError, RuntimeError, OSError) as err:
        yield _fail(out, str(err))
        return
    yield {out.status: "Synthesizing…", out.stream: None, out.take: None}
    runner = stream_run(pipe, text)
    chunks = 0
    try:
        while True:
            piece = next(runner)
            chunks += 1
            if STREAMING:
                yield {out.stream: (pipe.sample_rate, pcm16(piece))}
    except StopIteration as stop:
        syn = stop.value
    except (ValueError, RuntimeError) as err:
        yield _fail(out, f"Synthesis failed: {err}")
        return
    yield {
        out.take: (syn.sample_rate, pcm16(syn.audio)),
        out.metrics: metrics_markdown(syn, chunks),
        out.engine: engine_markdown(pipe, syn),
        out.chart: charts.stage_timings(syn.metrics.stages, "Time per stage"),
        out.steps: step_chart(pipe, syn),
        out.notes: notes_markdown(pipe, syn),
        out.status: f"Done: {syn.metrics.audio_seconds:.2f} s of audio.",
    }


def build(ctx: LabContext) -> Panel:
    """Lay out the tab and wire the Synthesize button."""
    text = gr.Textbox(EXAMPLE_TEXT, lines=3, label="Text", elem_id="synth-text")
    panel = build_panel(ctx.default, "synth", ctx.default_preset)
    go = gr.Button("Synthesize", variant="primary", elem_id="synth-go")
    status = gr.Markdown(elem_id="synth-status")
    with gr.Row():
        stream = gr.Audio(label="Streaming playback", streaming=True, autoplay=True,
                          interactive=False, visible=STREAMING, elem_id="synth-stream")
        take = gr.Audio(label="Whole take (WAV)", type="numpy", format="wav",
                        interactive=False, elem_id="synth-take", waveform_options=PLAIN)
    if not STREAMING:
        gr.Markdown("Streaming playback needs `ffmpeg` on the server; the whole take plays "
                    "when synthesis ends.")
    with gr.Column(elem_id="synth-results"):
        metrics = gr.Markdown(elem_id="synth-metrics")
        engine = gr.Markdown(elem_id="synth-engine")
        with gr.Row():
            chart = gr.Plot(label="Per-stage timing", elem_id="synth-chart")
            steps = gr.Plot(label="Per-step decode time", elem_id="synth-steps")
    notes = gr.Markdown(elem_id="synth-notes")
    out = SynthOutputs(stream, take, metrics, engine, chart, steps, notes, status)

    def handler(data: dict, progress=PROGRESS):
        yield from synthesize(ctx, out, panel, data[text], data, progress)

    go.click(handler, {text, *panel.inputs()}, out.all(), concurrency_limit=2)
    return panel
