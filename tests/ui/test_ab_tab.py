"""The A/B tab's rules, driven through its handlers on the real voice: labels that belong to
their config, a vote refused until both clips were played, counts beside the buttons, one
row per pair, a ranking once three configs have votes, and a render that stops when
cancelled."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import gradio as gr
import pytest

from lab.config import PipelineConfig
from lab.listening import Vote
from lab.pipeline import Pipeline
from lab.ui import ab_tab
from lab.ui.ab_tab import AbWidgets, RenderCancelled, label_of
from lab.ui.context import LabContext
from lab.ui.pipelines import PipelineCache

BASE = PipelineConfig(device="cpu", stream=False)
CAND = BASE.replace(dtype="bf16")


def _progress(*args, **kwargs) -> None:
    return None


@pytest.fixture
def ctx(tmp_path, voice_pipeline):
    return LabContext(tmp_path, cache=PipelineCache(factory=lambda *_: voice_pipeline))


@pytest.fixture
def widgets() -> AbWidgets:
    with gr.Blocks():
        return AbWidgets(gr.State(), gr.Markdown(), gr.Plot(), gr.Dataframe(), gr.Plot(),
                         gr.Markdown(), gr.Markdown(), [gr.Button() for _ in range(3)],
                         gr.Dataframe(), gr.Plot(), gr.Markdown())


@pytest.fixture
def no_scoring(monkeypatch):
    """The reveal's MOS proxy and ASR are tested in lab.quality; here they stand still."""
    mos = SimpleNamespace(**dict.fromkeys(ab_tab.MOS_KEYS, 3.0))
    monkeypatch.setattr(ab_tab, "evaluate", lambda *a, **k: SimpleNamespace(mos=mos))
    report = SimpleNamespace(passed=True, to_markdown=lambda: "report")
    monkeypatch.setattr(ab_tab, "compare", lambda cand, base: report)


def test_a_label_names_its_config_whatever_the_opponent_and_the_seed():
    other = BASE.replace(stream=True, overlap=4)
    assert label_of(CAND) == label_of(CAND.replace(seed=7))
    assert "seed" not in label_of(CAND.replace(seed=7))
    assert label_of(BASE) != label_of(CAND) and "bf16" in label_of(CAND)
    assert label_of(other).endswith("overlap=4") and "overlap" not in label_of(BASE)


def test_the_render_keeps_the_baseline_as_a(ctx):
    for _ in range(6):
        state, *_ = ab_tab.render(ctx, "Hi.", 3, None, BASE, CAND, _progress)
        assert state.trial.a.label == label_of(BASE) and state.trial.b.label == label_of(CAND)
        assert state.trial.a.config.seed == 3 == state.trial.b.config.seed


def _buttons(out: dict, w: AbWidgets) -> set[bool]:
    return {out[b].interactive for b in w.buttons}


@pytest.mark.filterwarnings("ignore:(Listen to both|This pair has a vote):UserWarning")
def test_a_vote_counts_only_after_both_clips_were_played(ctx, widgets, no_scoring):
    w = widgets
    state, *_ = ab_tab.render(ctx, "Hi.", 0, None, BASE, CAND, _progress)
    refused = ab_tab.cast_vote(ctx, w, "x", state, _progress)
    assert "not played yet: X, Y" in refused[w.status] and len(ctx.votes) == 0
    assert "X ✗ not played" in refused[w.tally]

    heard_x = ab_tab.mark_heard(ctx, w, "x", state)
    assert not set(w.buttons) & set(heard_x) and "X ✓" in heard_x[w.tally]
    assert "not played yet: Y" in ab_tab.cast_vote(ctx, w, "y", state, _progress)[w.status]
    heard_y = ab_tab.mark_heard(ctx, w, "y", state)
    assert _buttons(heard_y, w) == {True} and "vote now" in heard_y[w.status]

    out = ab_tab.cast_vote(ctx, w, "y", state, _progress)
    assert "saved" in out[w.status] and _buttons(out, w) == {False}
    (vote,) = ctx.votes.votes()
    assert vote.baseline == label_of(BASE)
    assert ab_tab.mark_heard(ctx, w, "x", state) == {}, "a voted pair takes no more plays"
    assert "has a vote" in ab_tab.cast_vote(ctx, w, "x", state, _progress)[w.status]


def test_counts_sit_beside_the_buttons_and_a_pair_is_one_row(ctx, widgets, no_scoring):
    w = widgets
    assert ab_tab.tally_text(ctx, None).startswith("**Votes stored:** 0")
    for seed, choice in ((0, "x"), (1, "y"), (2, "same")):
        state, *_ = ab_tab.render(ctx, "Hi.", seed, None, BASE, CAND, _progress)
        if seed == 0:
            assert "no votes yet" in ab_tab.tally_text(ctx, state)
        state.heard |= {"x", "y"}
        out = ab_tab.cast_vote(ctx, w, choice, state, _progress)
    assert "**This pair:** 3 votes" in out[w.tally] and "same **1**" in out[w.tally]
    (rate,) = ctx.votes.win_rates()
    assert (rate.baseline, rate.candidate) == (label_of(BASE), label_of(CAND))
    assert rate.total == 3 and rate.ties == 1
    table = out[w.table].data
    assert list(table.columns)[:2] == ["Baseline", "Candidate"] and len(table) == 1
    shown = out[w.table].to_html()
    assert "%" in shown and "_" not in "".join(table.columns)
    *bars, preference = out[w.win_chart].data
    assert len(bars) == 3 and preference.x[0] == pytest.approx(rate.preference, abs=1e-3)
    low, high = rate.interval
    assert preference.error_x.arrayminus[0] == pytest.approx(rate.preference - low, abs=1e-3)
    assert preference.error_x.array[0] == pytest.approx(high - rate.preference, abs=1e-3)


def _record(ctx, x: str, y: str, choice: str, times: int = 1) -> None:
    for _ in range(times):
        ctx.votes.record(Vote(session="s", text="Hi.", seed=0, config_x=x, config_y=y,
                              choice=choice, baseline=x))


def test_the_ranking_waits_for_three_configs_then_shows_intervals(ctx):
    _record(ctx, "fp32", "bf16", "x", 3)
    table, chart, notes = ab_tab.ranking_view(ctx)
    assert table.data.empty and "3 or more configurations; so far 2" in notes
    assert "so far 2" in chart.layout.annotations[0].text

    _record(ctx, "bf16", "int8", "x", 4)
    _record(ctx, "int8", "bf16", "same", 2)
    table, chart, notes = ab_tab.ranking_view(ctx)
    frame = table.data
    assert list(frame["Config"]) == ["fp32", "bf16", "int8"] and list(frame["Rank"]) == [1, 2, 3]
    assert (frame["95% CI low"] <= frame["Elo"]).all()
    assert (frame["Elo"] <= frame["95% CI high"]).all()
    assert "9 votes over 3 configurations" in notes and "1000 resamples" in notes
    assert "`fp32` over `bf16`: not separated; 3 head-to-head votes" in notes
    assert "`bf16` over `int8`" in notes and "more votes at this split would" in notes
    (trace,) = chart.data
    assert list(trace.error_x.array) and list(trace.y)[-1].startswith("1. fp32")

    _record(ctx, "int8", "int4", "y", 2)
    notes = ab_tab.ranking_view(ctx)[2]
    assert "no head-to-head votes" in notes, "neighbours that never met are told so"


class CancelAfterChecks(threading.Event):
    """A cancel event that reads as set from its `n`-th check on."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.checks = n, 0

    def is_set(self) -> bool:
        self.checks += 1
        return self.checks >= self.n or super().is_set()


@pytest.fixture(scope="module")
def streaming_voice() -> Pipeline:
    return Pipeline(PipelineConfig(device="cpu", stream=True, decode_interval=8))


def test_a_cancelled_render_stops_between_chunks_and_frees_the_voice(tmp_path, streaming_voice):
    ctx = LabContext(tmp_path, cache=PipelineCache(factory=lambda *_: streaming_voice))
    cfg = streaming_voice.config
    cancel = CancelAfterChecks(n=4)
    text = "A long sentence that streams in many small windows. " * 4
    with pytest.raises(RenderCancelled):
        ab_tab.render(ctx, text, 0, None, cfg, cfg, _progress, cancel)
    assert cancel.checks == 4, "the render went on after the cancel"
    assert streaming_voice.synthesize("Still here.").audio.size > 0
    set_before = threading.Event()
    set_before.set()
    with pytest.raises(RenderCancelled):
        ab_tab.render(ctx, "Hi.", 0, None, cfg, cfg, _progress, set_before)


def test_plays_answered_out_of_order_leave_the_vote_open(ctx, widgets):
    """Both clips started at once: the first play's answer, computed before the second play
    arrived, may reach the page last, and must not close what the second one opened."""
    w = widgets
    state, *_ = ab_tab.render(ctx, "Hi.", 0, None, BASE, CAND, _progress)
    first = ab_tab.mark_heard(ctx, w, "x", state)
    second = ab_tab.mark_heard(ctx, w, "y", state)
    page = {b: False for b in w.buttons}
    for answer in (second, first):
        page.update({b: answer[b].interactive for b in w.buttons if b in answer})
    assert set(page.values()) == {True}


def test_the_players_open_the_vote_and_cancel_stops_the_render(built_app):
    plays = [built_app.handlers(f"ab-{side}", "play") for side in ("x", "y")]
    for (play,) in plays:
        assert built_app.component("ab-vote-x") in play.outputs
    (x,), (y,) = plays
    assert x.concurrency_id == y.concurrency_id and x.concurrency_limit == 1, \
        "the two players' plays must queue one behind the other"
    for cancel, run in (("ab-cancel", "ab-render"), ("bench-cancel", "bench-go")):
        (target,) = built_app.handlers(run, "click")
        index = next(i for i, fn in built_app.demo.fns.items() if fn is target)
        stops = [fn for fn in built_app.handlers(cancel, "click") if fn.cancels]
        assert stops and index in stops[0].cancels, f"{cancel} does not cancel {run}"
