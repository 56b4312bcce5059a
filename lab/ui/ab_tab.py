"""A/B tab: a blind listening test between two configurations, then the numbers behind it.

Both sides render the same text with the same seed. The listener hears them as X and Y in a
random order and votes before learning which is which; the vote goes to the SQLite store
first, and only then are the labels, the MOS proxy, WER and fidelity revealed. Config A is
the baseline: B passes when its quality is within the lab's tolerance of A's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr
import numpy as np

from lab.bench.runner import config_label
from lab.config import LIMITS, PipelineConfig, to_dict
from lab.listening import BlindTrial, Contender, new_session_id, new_trial
from lab.quality import compare, evaluate
from lab.ui import charts
from lab.ui.common import EXAMPLE_TEXT, PLAIN, PROGRESS, pcm16, resolve_config
from lab.ui.knobs import Panel, build_panel

if TYPE_CHECKING:
    from lab.ui.blocks import LabContext

WIN_COLUMNS = ["config_a", "config_b", "votes", "a_wins", "b_wins", "ties", "a_win_rate",
               "b_win_rate"]
MOS_KEYS = ("ovrl", "sig", "bak", "p808")


@dataclass
class Rendered:
    """A trial and the two takes behind it, held in the browser session until the vote."""

    trial: BlindTrial
    sample_rate: int
    audio_a: np.ndarray
    audio_b: np.ndarray
    voted: bool = False


def _label(cfg: PipelineConfig, other: PipelineConfig) -> str:
    """A table label: the speed knobs, plus whichever other fields tell the two sides apart."""
    mine, theirs = to_dict(cfg), to_dict(other)
    extra = [f"{k}={v}" for k, v in mine.items() if v != theirs[k] and k != "seed"]
    shown = config_label(cfg)
    extra = [e for e in extra if e.split("=", 1)[1] not in shown.split()]
    return " ".join([shown, *extra])


def render(ctx: LabContext, text: str, seed: float, session: str | None,
           cfg_a: PipelineConfig, cfg_b: PipelineConfig, progress: gr.Progress):
    """Render both sides with one seed and shuffle them; returns (state, X, Y, session)."""
    cfg_a, cfg_b = cfg_a.replace(seed=int(seed)), cfg_b.replace(seed=int(seed))
    session = session or new_session_id()
    takes = []
    for n, cfg in enumerate((cfg_a, cfg_b)):
        progress((n, 2), desc=f"rendering {'AB'[n]}")
        pipe = ctx.cache.get(cfg, on_load=lambda msg, n=n: progress((n, 2), desc=msg))
        takes.append(pipe.synthesize(text))
    a = Contender(_label(cfg_a, cfg_b), cfg_a)
    b = Contender(_label(cfg_b, cfg_a), cfg_b)
    trial = new_trial(a, b, text, int(seed), session)
    state = Rendered(trial, takes[0].sample_rate, takes[0].audio, takes[1].audio)
    audio = {"A": takes[0].audio, "B": takes[1].audio}
    x, y = (audio["A"], audio["B"]) if trial.a_is_x else (audio["B"], audio["A"])
    rate = state.sample_rate
    return state, (rate, pcm16(x)), (rate, pcm16(y)), session


def reveal_quality(state: Rendered, progress: gr.Progress) -> tuple[str, object]:
    """Score both takes: B against A as reference, then B's verdict against A.

    Scoring runs the MOS proxy and ASR on each take (and loads them the first time), so it
    reports its two steps; any tqdm bar inside, such as a model download, nests under them.
    """
    trial = state.trial
    progress((0, 2), desc="scoring A (MOS proxy, ASR)", unit="take")
    base = evaluate(state.audio_a, state.sample_rate, trial.text)
    progress((1, 2), desc="scoring B against A", unit="take")
    cand = evaluate(state.audio_b, state.sample_rate, trial.text, reference=state.audio_a)
    report = compare(cand, base)
    verdict = "PASS" if report.passed else "FAIL"
    css = "verdict-pass" if report.passed else "verdict-fail"
    md = (f"<span class='{css}'>Candidate B `{trial.b.label}` against baseline A "
          f"`{trial.a.label}`: {verdict}</span>\n\n{report.to_markdown()}")
    mos = {f"{side} {label}": {k: getattr(s.mos, k) for k in MOS_KEYS}
           for side, label, s in (("A", trial.a.label, base), ("B", trial.b.label, cand))}
    return md, charts.quality_pair(mos)


def win_table(ctx: LabContext) -> tuple[list[list], object]:
    rows = [r.to_row() for r in ctx.votes.win_rates()]
    return [[r[c] for c in WIN_COLUMNS] for r in rows], charts.win_rates(rows)


def export_votes(ctx: LabContext) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return str(ctx.votes.export_csv(ctx.data_dir / "exports" / f"votes-{stamp}.csv"))


@dataclass
class AbWidgets:
    state: gr.State
    reveal: gr.Markdown
    quality_chart: gr.Plot
    table: gr.Dataframe
    win_chart: gr.Plot
    status: gr.Markdown
    buttons: list


def cast_vote(ctx: LabContext, w: AbWidgets, choice: str, state: Rendered | None,
              progress: gr.Progress):
    """Store the vote durably, then reveal labels and quality."""
    if state is None or state.voted:
        msg = "Render a new blind pair first." if state is None else "This pair has a vote."
        gr.Warning(msg)
        return {w.status: f"⚠️ **{msg}**"}
    stored = ctx.votes.record(state.trial.vote(choice))
    state.voted = True
    labels = state.trial.reveal()
    table, chart = win_table(ctx)
    out = {
        w.state: state,
        w.status: f"Vote #{stored.id} saved ({choice}).",
        w.table: table,
        w.win_chart: chart,
        w.reveal: f"**X** was `{labels['X']}` · **Y** was `{labels['Y']}` · you chose "
                  f"**{ {'x': 'X', 'y': 'Y', 'same': 'same'}[choice] }**",
        **{b: gr.Button(interactive=False) for b in w.buttons},
    }
    try:
        md, qchart = reveal_quality(state, progress)
    except (ValueError, RuntimeError) as err:
        out[w.reveal] += f"\n\n⚠️ Quality scores unavailable: {err}"
        return out
    out[w.reveal] += "\n\n" + md
    out[w.quality_chart] = qchart
    return out


def _voter(ctx: LabContext, w: AbWidgets, choice: str):
    """The click handler of one vote button (Gradio finds the tracker by its default)."""

    def on_vote(state: Rendered | None, progress=PROGRESS):
        return cast_vote(ctx, w, choice, state, progress)

    return on_vote


def _panel(side: str, cfg: PipelineConfig, preset: str | None) -> Panel:
    with gr.Column():
        gr.Markdown(f"### Config {side}" + (" (baseline)" if side == "A" else " (candidate)"))
        return build_panel(cfg, f"ab-{side.lower()}", preset)


def build(ctx: LabContext, demo: gr.Blocks) -> None:
    text = gr.Textbox(EXAMPLE_TEXT, lines=2, label="Text (same for both)", elem_id="ab-text")
    seed = gr.Number(0, precision=0, minimum=LIMITS["seed"][0], maximum=LIMITS["seed"][1],
                     label="Seed (same for both)", elem_id="ab-seed")
    with gr.Accordion("Configurations", open=False), gr.Row():
        panel_a = _panel("A", ctx.default, ctx.default_preset)
        panel_b = _panel("B", ctx.default.replace(decode_interval=8, overlap=4), None)
    go = gr.Button("Render blind pair", variant="primary", elem_id="ab-render")
    status = gr.Markdown(elem_id="ab-status")
    with gr.Row():
        audio_x = gr.Audio(label="X", interactive=False, elem_id="ab-x", waveform_options=PLAIN)
        audio_y = gr.Audio(label="Y", interactive=False, elem_id="ab-y", waveform_options=PLAIN)
    with gr.Row():
        buttons = [gr.Button(label, interactive=False, elem_id=f"ab-vote-{key}")
                   for key, label in (("x", "X is better"), ("same", "Same"),
                                      ("y", "Y is better"))]
    with gr.Row():
        with gr.Column(scale=3):
            reveal = gr.Markdown(elem_id="ab-reveal")
        with gr.Column(scale=2):
            quality_chart = gr.Plot(label="MOS proxy", elem_id="ab-quality-chart")
    gr.Markdown("### Win rates across all sessions")
    table = gr.Dataframe(headers=WIN_COLUMNS, interactive=False, elem_id="ab-win-table")
    win_chart = gr.Plot(elem_id="ab-win-chart")
    with gr.Row():
        export = gr.Button("Export votes as CSV", elem_id="ab-export")
        export_file = gr.File(label="votes.csv", visible=False, elem_id="ab-export-file")
    state, session = gr.State(None), gr.State(None)
    w = AbWidgets(state, reveal, quality_chart, table, win_chart, status, buttons)

    def on_render(data: dict, progress=PROGRESS):
        try:
            cfg_a = resolve_config(ctx, panel_a, data)
            cfg_b = resolve_config(ctx, panel_b, data)
            st, x, y, sess = render(ctx, data[text], data[seed], data[session], cfg_a, cfg_b,
                                    progress)
        except (ValueError, RuntimeError, OSError) as err:
            gr.Warning(str(err))
            return [gr.skip()] * 4 + [f"⚠️ **{err}**", ""] + [gr.skip()] * 3
        enable = [gr.Button(interactive=True)] * 3
        return [st, x, y, sess, "Listen to X and Y, then vote.", "", *enable]

    go.click(on_render, {text, seed, session, *panel_a.inputs(), *panel_b.inputs()},
             [state, audio_x, audio_y, session, status, reveal, *buttons],
             concurrency_limit=1)
    outputs = [state, reveal, quality_chart, table, win_chart, status, *buttons]
    for button, choice in zip(buttons, ("x", "same", "y"), strict=True):
        button.click(_voter(ctx, w, choice), state, outputs)
    export.click(lambda: gr.File(export_votes(ctx), visible=True), None, export_file)
    demo.load(lambda: win_table(ctx), None, [table, win_chart])
