"""A/B tab: a blind listening test between two configurations, then the numbers behind it.

Both sides render the same text with the same seed. The listener hears them as X and Y in a
random order and votes before learning which is which; the vote goes to the SQLite store
first, and only then are the labels, the MOS proxies, WER and fidelity revealed. Config A is
the baseline: B passes when its quality is within the lab's tolerance of A's.

As in the arenas, a vote counts only once both clips were heard: each player's play event is
recorded in the session's state on the server, the vote buttons open when both sides have
played, and the vote itself is refused before that, whatever the browser sends. A config's
label is its own (never shaped by its opponent) and the baseline stays the baseline, so one
pair is one row of the win table; the pair's running count sits beside the vote buttons.

Pairs add up: once the votes cover three or more configurations, they are ranked together
(Bradley-Terry on the Elo scale, `lab.listening.ranking`) with bootstrap intervals, and each
pair of neighbours says how many more head-to-head votes would separate it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gradio as gr
import numpy as np

from lab.bench.runner import config_label
from lab.config import LIMITS, PipelineConfig
from lab.listening import (
    BlindTrial,
    Contender,
    VoteError,
    matches_from_votes,
    new_session_id,
    new_trial,
    rank,
    unheard,
)
from lab.quality import compare, evaluate
from lab.ui import charts, tables
from lab.ui.common import EXAMPLE_TEXT, PLAIN, PROGRESS, pcm16, resolve_config, verdict_span
from lab.ui.panel import Panel, build_panel
from lab.ui.tables import PERCENT, Column

if TYPE_CHECKING:
    from lab.listening import WinRate
    from lab.pipeline import Pipeline, Synthesis
    from lab.ui.context import LabContext

WIN_COLUMNS = {
    "baseline": Column("Baseline"),
    "candidate": Column("Candidate"),
    "votes": Column("Votes"),
    "baseline_wins": Column("Baseline wins"),
    "ties": Column("Same"),
    "candidate_wins": Column("Candidate wins"),
    "candidate_win_rate": Column("Candidate win rate", PERCENT),
    "candidate_preference": Column("Candidate preference (ties half)", PERCENT),
    "preference_low": Column("95% CI low", PERCENT),
    "preference_high": Column("95% CI high", PERCENT),
    "p_value": Column("p (sign test vs 50%)"),
    "votes_to_settle": Column("More votes to settle"),
}
RANK_COLUMNS = {
    "rank": Column("Rank"),
    "config": Column("Config"),
    "elo": Column("Elo"),
    "elo_low": Column("95% CI low"),
    "elo_high": Column("95% CI high"),
    "votes": Column("Votes"),
    "wins": Column("Wins"),
    "ties": Column("Same"),
    "losses": Column("Losses"),
    "score": Column("Score (ties half)", PERCENT),
}
MIN_RANKED = 3
MOS_KEYS = ("ovrl", "sig", "bak", "p808", "distill")
DEFAULT_SEED = PipelineConfig().seed
CANCELLED = "Cancelled; render a new pair to vote."


class RenderCancelled(RuntimeError):
    """The listener cancelled the rendering of the pair."""


@dataclass
class Rendered:
    """A trial and the two takes behind it, held in the browser session until the vote,
    with the sides the listener has played so far."""

    trial: BlindTrial
    sample_rate: int
    audio_a: np.ndarray
    audio_b: np.ndarray
    voted: bool = False
    heard: set[str] = field(default_factory=set)

    @property
    def can_vote(self) -> bool:
        return not self.voted and not unheard(self.heard)


def label_of(cfg: PipelineConfig) -> str:
    """A config's name in votes and tables: its own knobs, whatever it is compared with.

    Both sides share the trial's seed, which is kept with the vote, so the label leaves it
    out: the same two configs make one pair whichever seed a trial used.
    """
    return config_label(cfg.replace(seed=DEFAULT_SEED))


def _take(pipe: Pipeline, text: str, cancel: threading.Event | None) -> Synthesis:
    """One rendering; a streaming config is read chunk by chunk so a cancel stops it."""
    if cancel is None or not pipe.config.stream:
        return pipe.synthesize(text)
    stream = pipe.stream(text)
    try:
        while True:
            if cancel.is_set():
                raise RenderCancelled("rendering cancelled")
            try:
                next(stream)
            except StopIteration as done:
                return done.value
    finally:
        stream.close()


def render(ctx: LabContext, text: str, seed: float, session: str | None,
           cfg_a: PipelineConfig, cfg_b: PipelineConfig, progress: gr.Progress,
           cancel: threading.Event | None = None):
    """Render both sides with one seed and shuffle them; returns (state, X, Y, session).

    Setting `cancel` stops the rendering between chunks (RenderCancelled).
    """
    cfg_a, cfg_b = cfg_a.replace(seed=int(seed)), cfg_b.replace(seed=int(seed))
    session = session or new_session_id()
    takes = []
    for n, cfg in enumerate((cfg_a, cfg_b)):
        if cancel is not None and cancel.is_set():
            raise RenderCancelled("rendering cancelled")
        progress((n, 2), desc=f"rendering {'AB'[n]}")
        pipe = ctx.cache.get(cfg, on_load=lambda msg, n=n: progress((n, 2), desc=msg.strip()))
        takes.append(_take(pipe, text, cancel))
    a = Contender(label_of(cfg_a), cfg_a)
    b = Contender(label_of(cfg_b), cfg_b)
    trial = new_trial(a, b, text, int(seed), session)
    state = Rendered(trial, takes[0].sample_rate, takes[0].audio, takes[1].audio)
    audio = {"A": takes[0].audio, "B": takes[1].audio}
    x, y = (audio["A"], audio["B"]) if trial.a_is_x else (audio["B"], audio["A"])
    rate = state.sample_rate
    return state, (rate, pcm16(x)), (rate, pcm16(y)), session


def reveal_quality(state: Rendered, progress: gr.Progress) -> tuple[str, object]:
    """Score both takes: B against A as reference, then B's verdict against A.

    Scoring runs the MOS proxies and ASR on each take (and loads them the first time), so it
    reports its two steps; any tqdm bar inside, such as a model download, nests under them.
    """
    trial = state.trial
    progress((0, 2), desc="scoring A (MOS proxies, ASR)", unit="take")
    base = evaluate(state.audio_a, state.sample_rate, trial.text)
    progress((1, 2), desc="scoring B against A", unit="take")
    cand = evaluate(state.audio_b, state.sample_rate, trial.text, reference=state.audio_a)
    report = compare(cand, base)
    md = (verdict_span(report.passed, f"Candidate B `{trial.b.label}` against baseline A "
                                      f"`{trial.a.label}`: {{verdict}}")
          + f"\n\n{report.to_markdown()}")
    mos = {f"{side} {label}": {k: getattr(s.mos, k) for k in MOS_KEYS}
           for side, label, s in (("A", trial.a.label, base), ("B", trial.b.label, cand))}
    return md, charts.quality_pair(mos)


def win_table(ctx: LabContext) -> tuple[object, object]:
    rows = [r.to_row() for r in ctx.votes.win_rates()]
    return tables.readable(rows, WIN_COLUMNS), charts.win_rates(rows)


def ranking_view(ctx: LabContext) -> tuple[object, object, str]:
    """The ranking table, its chart and, in words, what separates each pair of neighbours;
    before votes cover MIN_RANKED configurations, an empty table and what is missing."""
    votes = ctx.votes.votes()
    matches = matches_from_votes(votes)
    configs = {name for m in matches for name in (m.a, m.b)}
    if len(configs) < MIN_RANKED:
        note = (f"Rankings appear once votes cover {MIN_RANKED} or more configurations; so far "
                f"{len(configs)}. Vote on another pair (change config B) to add one.")
        return tables.readable([], RANK_COLUMNS), charts.ranking([], note), note
    ranking = rank(matches)
    rows = ranking.to_rows()
    lines = [f"{ranking.votes} votes over {len(rows)} configurations; intervals from "
             f"{ranking.resamples} resamples of the votes (seed {ranking.seed}). "
             "Neighbours in the ranking:"]
    lines += [f"- {gap.advice()}" for gap in ranking.gaps]
    return tables.readable(rows, RANK_COLUMNS), charts.ranking(rows), "\n".join(lines)


def _count(rate: WinRate) -> str:
    return f"{rate.total} vote{'s' * (rate.total != 1)}"


def tally_text(ctx: LabContext, state: Rendered | None) -> str:
    """The pair's running count, beside the vote buttons.

    Before the vote only the number of votes shows, so the split cannot sway the listener;
    after it, how the baseline and the candidate have fared.
    """
    if state is None:
        return f"**Votes stored:** {len(ctx.votes)} across {len(ctx.votes.win_rates())} pairs."
    trial = state.trial
    rate = ctx.votes.win_rate(trial.a.label, trial.b.label)
    if not state.voted:
        heard = " · ".join(f"{s.upper()} {'✓' if s in state.heard else '✗ not played'}"
                           for s in ("x", "y"))
        so_far = "no votes yet" if rate is None else f"{_count(rate)} so far"
        return f"**This pair:** {so_far}.  \n**Heard:** {heard}"
    if rate is None:  # the store lost the vote: say so rather than show an empty split
        return "**This pair:** no votes found in the store."
    wins = {rate.baseline: rate.baseline_wins, rate.candidate: rate.candidate_wins}
    return (f"**This pair:** {_count(rate)}  \nbaseline **{wins.get(trial.a.label, 0)}** · "
            f"same **{rate.ties}** · candidate **{wins.get(trial.b.label, 0)}**  \n"
            + confidence_text(rate))


def confidence_text(rate: WinRate) -> str:
    """What the split so far can and cannot say, in one line."""
    low, high = rate.interval
    said = (f"{rate.candidate} preferred {rate.preference:.0%} (95% CI {low:.0%}-{high:.0%}), "
            f"p = {rate.p_value:.2g}")
    more = rate.to_settle
    if more == 0:
        return f"{said}: a real preference."
    if more is None:
        return f"{said}: no preference either way so far."
    return f"{said}: not settled; about {more} more votes at this split would settle it."


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
    tally: gr.Markdown
    buttons: list
    rank_table: gr.Dataframe
    rank_chart: gr.Plot
    rank_notes: gr.Markdown


def mark_heard(ctx: LabContext, w: AbWidgets, side: str, state: Rendered | None) -> dict:
    """Record that `side` was played; the vote buttons open once both sides have been.

    A play only ever opens the buttons (the render closed them): when both clips start at
    once, the first play's answer can reach the page after the second's, and an answer that
    also closed them would shut the vote for good.
    """
    if state is None or state.voted:
        return {}
    state.heard.add(side)
    out = {w.state: state, w.tally: tally_text(ctx, state)}
    if state.can_vote:
        out[w.status] = "Both heard: vote now."
        out.update({b: gr.Button(interactive=True) for b in w.buttons})
    return out


def cast_vote(ctx: LabContext, w: AbWidgets, choice: str, state: Rendered | None,
              progress: gr.Progress):
    """Store the vote durably, then reveal labels and quality.

    Refused, with the reason, before a pair is rendered, after its vote, and before both
    clips have been played.
    """
    if state is None or state.voted:
        msg = "Render a new blind pair first." if state is None else "This pair has a vote."
        gr.Warning(msg)
        return {w.status: f"⚠️ **{msg}**"}
    try:
        vote = state.trial.vote(choice, heard=state.heard)
    except VoteError as err:
        msg = str(err)[0].upper() + str(err)[1:] + "."
        gr.Warning(msg)
        return {w.status: f"⚠️ **{msg}**", w.tally: tally_text(ctx, state)}
    stored = ctx.votes.record(vote)
    state.voted = True
    labels = state.trial.reveal()
    table, chart = win_table(ctx)
    rank_table, rank_chart, rank_notes = ranking_view(ctx)
    out = {
        w.state: state,
        w.status: f"Vote #{stored.id} saved ({choice}).",
        w.tally: tally_text(ctx, state),
        w.table: table,
        w.win_chart: chart,
        w.rank_table: rank_table,
        w.rank_chart: rank_chart,
        w.rank_notes: rank_notes,
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


def _listener(ctx: LabContext, w: AbWidgets, side: str):
    def on_play(state: Rendered | None):
        return mark_heard(ctx, w, side, state)

    return on_play


def _panel(side: str, cfg: PipelineConfig, preset: str | None) -> Panel:
    with gr.Column():
        gr.Markdown(f"### Config {side}" + (" (baseline)" if side == "A" else " (candidate)"))
        return build_panel(cfg, f"ab-{side.lower()}", preset)


def build(ctx: LabContext, demo: gr.Blocks) -> None:
    cancels: dict[str, threading.Event] = {}
    text = gr.Textbox(EXAMPLE_TEXT, lines=2, label="Text (same for both)", elem_id="ab-text")
    seed = gr.Number(0, precision=0, minimum=LIMITS["seed"][0], maximum=LIMITS["seed"][1],
                     label="Seed (same for both)", elem_id="ab-seed")
    with gr.Accordion("Configurations", open=False), gr.Row():
        panel_a = _panel("A", ctx.default, ctx.default_preset)
        panel_b = _panel("B", ctx.default.replace(decode_interval=8, overlap=4), None)
    with gr.Row():
        go = gr.Button("Render blind pair", variant="primary", elem_id="ab-render", scale=3)
        stop = gr.Button("Cancel", variant="stop", elem_id="ab-cancel", scale=1)
    status = gr.Markdown(elem_id="ab-status")
    with gr.Row():
        audio_x = gr.Audio(label="X", interactive=False, elem_id="ab-x", waveform_options=PLAIN)
        audio_y = gr.Audio(label="Y", interactive=False, elem_id="ab-y", waveform_options=PLAIN)
    with gr.Row(equal_height=True):
        with gr.Column(scale=3), gr.Row():
            buttons = [gr.Button(label, interactive=False, elem_id=f"ab-vote-{key}")
                       for key, label in (("x", "X is better"), ("same", "Same"),
                                          ("y", "Y is better"))]
        with gr.Column(scale=2):
            tally = gr.Markdown(elem_id="ab-tally")
    with gr.Row():
        with gr.Column(scale=3):
            reveal = gr.Markdown(elem_id="ab-reveal")
        with gr.Column(scale=2):
            quality_chart = gr.Plot(label="MOS proxies", elem_id="ab-quality-chart")
    gr.Markdown("### Win rates across all sessions")
    table = gr.Dataframe(headers=tables.headers(list(WIN_COLUMNS), WIN_COLUMNS),
                         interactive=False, elem_id="ab-win-table")
    win_chart = gr.Plot(elem_id="ab-win-chart")
    gr.Markdown("### Ranking across configurations")
    rank_table = gr.Dataframe(headers=tables.headers(list(RANK_COLUMNS), RANK_COLUMNS),
                              interactive=False, elem_id="ab-rank-table")
    rank_notes = gr.Markdown(elem_id="ab-rank-notes")
    rank_chart = gr.Plot(elem_id="ab-rank-chart")
    with gr.Row():
        export = gr.Button("Export votes as CSV", elem_id="ab-export")
        export_file = gr.File(label="votes.csv", visible=False, elem_id="ab-export-file")
    state, session = gr.State(None), gr.State(None)
    w = AbWidgets(state, reveal, quality_chart, table, win_chart, status, tally, buttons,
                  rank_table, rank_chart, rank_notes)

    def on_render(data: dict, request: gr.Request, progress=PROGRESS):
        """Clear the last pair at once (its vote buttons close with it), then render."""
        key = request.session_hash or "default"
        cancel = cancels[key] = threading.Event()
        closed = [gr.Button(interactive=False)] * 3
        yield [None, None, None, gr.skip(), "Rendering the pair…", "", tally_text(ctx, None),
               None, *closed]
        try:
            cfg_a = resolve_config(ctx, panel_a, data)
            cfg_b = resolve_config(ctx, panel_b, data)
            st, x, y, sess = render(ctx, data[text], data[seed], data[session], cfg_a, cfg_b,
                                    progress, cancel)
        except RenderCancelled:
            yield [gr.skip()] * 4 + [CANCELLED] + [gr.skip()] * 6
            return
        except (ValueError, RuntimeError, OSError) as err:
            gr.Warning(str(err))
            yield [gr.skip()] * 4 + [f"⚠️ **{err}**"] + [gr.skip()] * 6
            return
        finally:
            if cancels.get(key) is cancel:
                del cancels[key]
        yield [st, x, y, sess, "Play X and Y; the vote opens once you have heard both.", "",
               tally_text(ctx, st), gr.skip(), *closed]

    def on_cancel(request: gr.Request):
        event = cancels.get(request.session_hash or "default")
        if event is None:
            return "Nothing is rendering."
        event.set()
        return CANCELLED

    rendering = go.click(
        on_render, {text, seed, session, *panel_a.inputs(), *panel_b.inputs()},
        [state, audio_x, audio_y, session, status, reveal, tally, quality_chart, *buttons],
        concurrency_limit=1)
    stop.click(on_cancel, None, status, cancels=[rendering])
    heard_outputs = [state, tally, status, *buttons]
    # One play at a time across both players, so the tally's answers reach the page in the
    # order they were computed.
    for player, side in ((audio_x, "x"), (audio_y, "y")):
        player.play(_listener(ctx, w, side), state, heard_outputs, show_progress="hidden",
                    concurrency_limit=1, concurrency_id="ab-heard")
    outputs = [state, reveal, quality_chart, table, win_chart, status, tally, *buttons,
               rank_table, rank_chart, rank_notes]
    for button, choice in zip(buttons, ("x", "same", "y"), strict=True):
        button.click(_voter(ctx, w, choice), state, outputs)
    export.click(lambda: gr.File(export_votes(ctx), visible=True), None, export_file)
    demo.load(lambda: (*win_table(ctx), tally_text(ctx, None), *ranking_view(ctx)), None,
              [table, win_chart, tally, rank_table, rank_chart, rank_notes])
