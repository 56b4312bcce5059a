"""Synthesize tab: type text, pick a preset, hear it stream, see what each stage cost.

Audio plays as it is decoded, through the lab's own Web Audio player (`lab.ui.player`), and
the browser reports the time from the click to the first sound it scheduled, beside the
server's time to first byte, so the two can be compared run against run. The whole take is
also offered as a WAV once synthesis ends. Cancel stops the request on the pipeline's worker
at its next chunk, and so does closing the tab. For an autoregressive family the tab also
shows each decode step's time over the utterance next to what the KV cache holds. A quality
check renders the same text with the fp32 reference of the same config and seed and judges
the take against it with the lab's meters.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr
import numpy as np
import torch

from lab.estimate import Estimate, estimate, record_rate, require
from lab.frontend.validation import check_text
from lab.metrics import memory
from lab.pipeline import describe_startup
from lab.ui import charts
from lab.ui.common import EXAMPLE_TEXT, PLAIN, PROGRESS, load, pcm16, resolve_config
from lab.ui.panel import Panel, build_panel
from lab.ui.quality_check import QualityOutputs, wire_quality_check
from lab.worker import Cancelled

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from lab.config import PipelineConfig
    from lab.pipeline import Pipeline, Synthesis
    from lab.ui.context import LabContext
    from lab.ui.player import Channel

EXAMPLES = [
    EXAMPLE_TEXT,
    "Is the new build faster? Yes: 48 requests per second, up from 31.",
    "Dr. Okafor flew from Lisbon to Osaka on May 3rd, 2025, and landed at 6:40 in the "
    "morning.",
    "Quietly, the violinist tuned her strings while the audience found their seats.",
    "Short.",
]
STATUS_EVERY_S = 0.25  # how often the status line reports progress while audio streams
CANCEL_WAIT_S = 5.0  # how long Cancel waits to confirm that the worker let go


def metrics_markdown(syn: Synthesis, chunks: int) -> str:
    m = syn.metrics
    return (
        "| Time to first byte | Total latency | Audio | Real-time factor | Audio s / s "
        "| Peak memory (this request) |\n"
        "|---:|---:|---:|---:|---:|---:|\n"
        f"| {m.ttfb_ms:.0f} ms | {m.total_ms:.0f} ms | {m.audio_seconds:.2f} s | {m.rtf:.3f} "
        f"| {m.audio_seconds_per_second:.2f} | {m.peak_memory_mb:.0f} MB |\n\n"
        f"{chunks} chunks streamed. A real-time factor below 1 is faster than real time. "
        "Time to first byte is measured on the server; the player's line above says when the "
        "browser started sounding."
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
        "| Decode steps | ms / step | First ¼ (median) | Last ¼ (median) | Tokens / s "
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
    lines = ["**Fallbacks fired:** " + ("none" if not syn.fallbacks else "")]
    lines += [f"- {f}" for f in syn.fallbacks]
    lines += [f"- text note: {w}" for w in syn.warnings]
    lines.append(f"\nRan on `{pipe.device}` with `{ran.dtype}` / quant `{ran.quant}`, "
                 f"compile `{ran.compile}`.")
    lines += [f"- {name}: {value}" for name, value in pipe.memory_facts().items()]
    lines.append(f"- peak memory above: {memory.how(torch.device(pipe.device))}")
    lines.append(f"\n**Startup:** {describe_startup(pipe.startup)}.")
    return "\n".join(lines)


@dataclass(frozen=True)
class _End:
    synthesis: Synthesis | None
    error: BaseException | None = None


def _produce(pipe: Pipeline, text: str, cancel: threading.Event | None, out: queue.Queue,
             on_end: Callable[[], None]) -> None:
    """Run the stream on its own thread so its clock never includes the browser's pace."""
    stream = pipe.stream(text, cancel)
    try:
        while True:
            out.put(next(stream))
    except StopIteration as stop:
        out.put(_End(stop.value))
    except Exception as err:  # noqa: BLE001  handed to the consumer, which re-raises it
        out.put(_End(None, err))
    finally:
        on_end()


def stream_run(pipe: Pipeline, text: str, cancel: threading.Event | None = None,
               on_end: Callable[[], None] = lambda: None):
    """Yield audio as chunks arrive (merging any that queued up); return the Synthesis.

    The pipeline streams on a worker thread, so its time to first audio and total time are
    the model's, not the time the UI took to forward earlier chunks. Setting `cancel` ends
    the request at its next chunk with `Cancelled`. `on_end()` runs once the pipeline has
    let go of the request, whether or not anyone still reads this generator.
    """
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_produce, args=(pipe, text, cancel, inbox, on_end),
                     daemon=True).start()
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
    take: gr.Audio
    metrics: gr.Markdown
    engine: gr.Markdown
    chart: gr.Plot
    steps: gr.Plot
    notes: gr.Markdown
    status: gr.Markdown
    last: gr.State

    def all(self) -> list:
        return [self.take, self.metrics, self.engine, self.chart, self.steps, self.notes,
                self.status, self.last]

    def cleared(self, status: str) -> dict:
        """Every result emptied, so nothing from the last run sits under a new status."""
        blank = {c: None for c in (self.take, self.chart, self.steps, self.last)}
        return {**blank, self.metrics: "", self.engine: "", self.notes: "",
                self.status: status}


def _fail(out: SynthOutputs, message: str) -> dict:
    gr.Warning(message)
    return {out.status: f"⚠️ **{message}**"}


def _streamed(pipe: Pipeline, text: str, chan: Channel | None, out: SynthOutputs):
    """Forward chunks to the player; yield status lines; return (Synthesis, chunk count)."""
    runner = (stream_run(pipe, text) if chan is None
              else stream_run(pipe, text, chan.cancelled, chan.released))
    chunks, audio_s, said = 0, 0.0, 0.0
    try:
        while True:
            piece = next(runner)
            chunks += 1
            audio_s += len(piece) / pipe.sample_rate
            if chan is not None:
                chan.put(pcm16(piece).tobytes())
            if time.monotonic() - said > STATUS_EVERY_S:
                said = time.monotonic()
                yield {out.status: f"Synthesizing… {audio_s:.1f} s of audio in {chunks} "
                                   "chunks so far."}
    except StopIteration as stop:
        return stop.value, chunks


def judge(ctx: LabContext, cfg: PipelineConfig, text: str, fresh: bool, confirmed: bool
          ) -> Estimate:
    """Estimate memory and time before loading; refuse a run that would not fit, and one
    that would take minutes unless the user ticked the box that accepts it."""
    return require(estimate(cfg, len(text), rates_dir=ctx.data_dir, loaded=not fresh),
                   confirmed)


def synthesize(ctx: LabContext, out: SynthOutputs, panel: Panel, text: str, run_id: str,
               confirmed: bool, data: dict, progress: gr.Progress):
    """The Synthesize button: stream chunks to the player, then fill in the numbers."""
    yield out.cleared("Checking the request…")
    chan = ctx.player.channel(run_id) if run_id else None
    if chan is not None:
        chan.mark("handler_start")
    try:
        cfg = resolve_config(ctx, panel, data)
        check_text(text, cfg.max_chars)  # the pipeline's own refusal, before any estimate
        fresh = cfg not in ctx.cache
        guess = judge(ctx, cfg, text, fresh, confirmed)
        yield {out.status: f"{'Loading… ' if fresh else ''}Expected: {guess.summary()}"}
        pipe = load(ctx, cfg, progress)
        if chan is not None:
            chan.start(pipe.sample_rate)
        yield {out.status: "Synthesizing…"}
        syn, chunks = yield from _streamed(pipe, text, chan, out)
        record_rate(pipe.config, syn, rates_dir=ctx.data_dir,
                    startup=pipe.startup if fresh else None)
    except Cancelled:
        # Said here too: Gradio re-sends a generator's last update when it ends, which
        # would put back the "Synthesizing…" line over Cancel's own report.
        yield {out.status: cancelled_message(chan)}
        return
    except (ValueError, RuntimeError, OSError) as err:
        yield _fail(out, str(err))
        return
    finally:
        if chan is not None:
            chan.finish()
            chan.released()  # a no-op unless the run ended before it reached the pipeline
    yield {
        out.take: (syn.sample_rate, pcm16(syn.audio)),
        out.metrics: metrics_markdown(syn, chunks),
        out.engine: engine_markdown(pipe, syn),
        out.chart: charts.stage_timings(syn.metrics.stages, "Time per stage"),
        out.steps: step_chart(pipe, syn),
        out.notes: notes_markdown(pipe, syn),
        out.status: f"Done: {syn.metrics.audio_seconds:.2f} s of audio.",
        out.last: {"config": cfg, "text": text, "audio": syn.audio,
                   "sample_rate": syn.sample_rate},
    }


def cancel(ctx: LabContext, run_id: str) -> str:
    """The Cancel button: stop the run's request on its worker (the player has already
    stopped), and say how long the worker took to let go of it."""
    chan = ctx.player.cancel(run_id) if run_id else None
    if chan is None or chan.state == "done":
        return "Nothing to cancel: no run is in progress."
    return cancelled_message(chan)


def cancelled_message(chan: Channel) -> str:
    """How long the worker took to let go of a cancelled run, once it has."""
    if chan.ended.wait(CANCEL_WAIT_S):
        ms = chan.marks["released"] - chan.marks["cancelled"]
        return f"Cancelled: the worker let go of the request {ms:.0f} ms after Cancel."
    return ("Cancel requested: the model is still loading, and the request stops as soon as "
            "loading ends.")


BEGIN_JS = "() => window.labPlayer.begin()"
STOP_JS = "() => window.labPlayer.stop()"
COUNT_JS = "(t, m) => `${t.length} / ${m} characters`"


def _text_box(ctx: LabContext) -> tuple[gr.Textbox, gr.Markdown]:
    """The text, its example sentences and a character counter against the preset's limit.

    The box does not cut text at the limit: the pipeline refuses it with a message that
    says by how much, which a silently shortened text would not.
    """
    limit = ctx.default.max_chars
    text = gr.Textbox(EXAMPLE_TEXT, lines=3, label="Text", elem_id="synth-text")
    count = gr.Markdown(f"{len(EXAMPLE_TEXT)} / {limit} characters", elem_id="synth-count")
    limit_box = gr.Number(limit, visible=False)
    gr.Examples(EXAMPLES, inputs=text, label="Example texts", elem_id="synth-examples")
    text.change(None, [text, limit_box], count, js=COUNT_JS)
    return text, count


def build(ctx: LabContext) -> Panel:
    """Lay out the tab: text and preset first, knobs folded, then the results."""
    text, _ = _text_box(ctx)
    panel = build_panel(ctx.default, "synth", ctx.default_preset, folded=True)
    with gr.Row():
        go = gr.Button("Synthesize", variant="primary", elem_id="synth-go", scale=3)
        stop = gr.Button("Cancel", variant="stop", elem_id="synth-cancel", scale=1)
        slow = gr.Checkbox(False, label="Run even if it takes minutes", elem_id="synth-slow",
                           scale=1)
    run_id = gr.Textbox(visible=False, elem_id="synth-run")
    status = gr.Markdown(elem_id="synth-status")
    gr.HTML('<div id="synth-heard" class="synth-heard"></div>', elem_id="synth-player")
    take = gr.Audio(label="Whole take (WAV)", type="numpy", format="wav", interactive=False,
                    elem_id="synth-take", waveform_options=PLAIN)
    with gr.Column(elem_id="synth-results"):
        metrics = gr.Markdown(elem_id="synth-metrics")
        engine = gr.Markdown(elem_id="synth-engine")
        with gr.Row():
            chart = gr.Plot(label="Per-stage timing", elem_id="synth-chart")
            steps = gr.Plot(label="Per-step decode time", elem_id="synth-steps")
    notes = gr.Markdown(elem_id="synth-notes")
    out = SynthOutputs(take, metrics, engine, chart, steps, notes, status, gr.State(None))

    def handler(data: dict, progress=PROGRESS):
        yield from synthesize(ctx, out, panel, data[text], data[run_id], data[slow], data,
                              progress)

    started = go.click(None, None, run_id, js=BEGIN_JS)
    # A click during a run cancels it (the player drops its stream); the new run follows.
    started.then(handler, {text, run_id, slow, *panel.inputs()}, out.all(),
                       concurrency_limit=2, trigger_mode="always_last")
    # No `cancels=`: the handler ends by itself at the next chunk, so its last word is never
    # cut off mid-update, and Cancel reports once the worker has let go.
    stop.click(lambda rid: cancel(ctx, rid), run_id, status, js=STOP_JS)
    wire_quality_check(ctx, out.last, QualityOutputs.build())
    return panel
