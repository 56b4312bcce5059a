"""The tabs' long actions drive a progress tracker, and the synth notes keep startup apart.

The tracker here is a real `gr.Progress(track_tqdm=True)` inside the context Gradio sets up
for one event, so what it records is what the browser would be sent: the explicit steps and
any tqdm bar opened underneath them.
"""

from __future__ import annotations

import inspect
import threading
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.context import LocalContext

from lab.bench.sweep import Sweep, runner_measure
from lab.config import PipelineConfig
from lab.models.registry import family
from lab.pipeline import Pipeline, describe_startup
from lab.ui import ab_tab, bench_tab, common, profile_tab, synth_tab
from lab.ui.context import LabContext
from lab.ui.pipelines import PipelineCache

LONG_ACTIONS = ("synth-go", "ab-render", "ab-vote-x", "ab-vote-same", "ab-vote-y", "bench-go",
                "profile-go")


class _Queue:
    def __init__(self) -> None:
        self.sent: list[list[tuple]] = []

    def set_progress(self, event_id: str, levels: list) -> None:
        self.sent.append([(lv.desc, lv.index, lv.length) for lv in levels])


@pytest.fixture
def tracker():
    """(progress, sent): a tracker as one event gets it, and every update it sent."""
    queue = _Queue()
    progress = gr.Progress(track_tqdm=True)
    tokens = [(LocalContext.blocks, LocalContext.blocks.set(SimpleNamespace(_queue=queue))),
              (LocalContext.event_id, LocalContext.event_id.set("test-event")),
              (LocalContext.progress, LocalContext.progress.set(progress))]
    yield progress, queue.sent
    for var, token in reversed(tokens):
        var.reset(token)


@pytest.fixture
def ctx(tmp_path, voice_pipeline):
    """A context whose cache 'loads' the session's voice: cheap, but it reports its stages
    as a real load does."""
    def factory(cfg, on_stage=None):
        if on_stage is not None:
            on_stage("loading the session's voice")
        return voice_pipeline

    return LabContext(tmp_path, cache=PipelineCache(factory=factory))


def _descs(sent: list[list[tuple]]) -> list[str]:
    return [level[0] for update in sent for level in update]


def test_every_long_action_tracks_tqdm(built_app):
    for elem_id in LONG_ACTIONS:
        (handler,) = built_app.handlers(elem_id, "click")
        defaults = [p.default for p in inspect.signature(handler.fn).parameters.values()]
        trackers = [d for d in defaults if isinstance(d, gr.Progress)]
        assert trackers and trackers[0].track_tqdm, f"{elem_id} shows no progress bar"


def test_each_stage_of_a_real_load_is_a_progress_step(tmp_path, tracker):
    progress, sent = tracker
    ctx = LabContext(tmp_path)
    common.load(ctx, PipelineConfig(device="cpu"), progress)
    assert [d for d in _descs(sent)] == [
        "loading piper-vits weights (default) onto cpu",
        "warming up (compile, graph capture, first-call kernels)"]
    common.load(ctx, PipelineConfig(device="cpu"), progress)
    assert len(sent) == 2, "a cached pipeline should not report a load"
    ctx.cache.clear()


def test_sweep_counts_points_with_the_runner_bar_nested(ctx, tracker):
    progress, sent = tracker
    measure = runner_measure(lambda cfg: ctx.cache.get(cfg), warmup=0)
    sweep = Sweep("batch_size", [1, 2], PipelineConfig(device="cpu"), ["Hello."], measure)
    updates = list(bench_tab.run_sweep(ctx, sweep, threading.Event(), progress))
    assert [u[2] for u in updates] == ["1/2 points", "2/2 points"]
    outer = [u[0] for u in sent if u[0][0] == "sweep over batch_size"]
    assert [index for _, index, _ in outer][-1] == 2 and {n for _, _, n in outer} == {2}
    nested = [u for u in sent if len(u) == 2]
    assert nested and nested[-1][1][0] == "batch 2", "the runner's tqdm bar was not tracked"


def test_profile_reports_its_steps(ctx, tracker):
    progress, sent = tracker
    profile_tab.run_profile(ctx, PipelineConfig(device="cpu"), "Hello.", progress)
    steps = [u[-1] for u in sent]
    assert [index for _, index, _ in steps] == [0, 1, 2, 3]
    assert {total for _, _, total in steps} == {profile_tab.STEPS}
    assert "warm-up run (not profiled)" in _descs(sent)


def test_ab_render_and_scoring_report_progress(ctx, tracker, monkeypatch):
    progress, sent = tracker
    cfg_a, cfg_b = PipelineConfig(device="cpu"), PipelineConfig(device="cpu", overlap=4)
    state, *_ = ab_tab.render(ctx, "Hello.", 0, None, cfg_a, cfg_b, progress)
    assert {"rendering A", "rendering B"} <= set(_descs(sent))
    scored = []

    def evaluate(audio, rate, text, reference=None):
        scored.append(_descs(sent)[-1])
        mos = SimpleNamespace(**dict.fromkeys(ab_tab.MOS_KEYS, 3.0))
        return SimpleNamespace(mos=mos)

    report = SimpleNamespace(passed=True, to_markdown=lambda: "report")
    monkeypatch.setattr(ab_tab, "evaluate", evaluate)
    monkeypatch.setattr(ab_tab, "compare", lambda cand, base: report)
    md, _ = ab_tab.reveal_quality(state, progress)
    assert "PASS" in md
    assert scored == ["scoring A (MOS proxies, ASR)", "scoring B against A"]


def _synthesis(fallbacks=()) -> SimpleNamespace:
    return SimpleNamespace(fallbacks=list(fallbacks), warnings=[])


def test_notes_show_startup_on_its_own_line():
    pipe = SimpleNamespace(device="cpu", memory_facts=lambda: {"weights": "60.0 MiB"},
                           startup={"load_ms": 1234.0, "warmup_ms": 420.0},
                           resolved=PipelineConfig())
    notes = synth_tab.notes_markdown(pipe, _synthesis())
    (line,) = [n for n in notes.splitlines() if n.startswith("**Startup:**")]
    assert "model load 1.23 s, warm-up 0.42 s" in line
    assert "not counted in request timings" in line


def test_notes_of_a_real_pipeline_read_its_startup(voice_pipeline):
    syn = voice_pipeline.synthesize("Hello.")
    notes = synth_tab.notes_markdown(voice_pipeline, syn)
    assert f"**Startup:** {describe_startup(voice_pipeline.startup)}." in notes
    assert "peak memory above: peak resident memory of the process during the request" in notes


def test_notes_show_the_config_that_ran_not_the_one_asked_for():
    pipe = Pipeline(PipelineConfig(device="cpu", dtype="fp16", stream=False))
    notes = synth_tab.notes_markdown(pipe, pipe.synthesize("Hi."))
    assert "with `bf16`" in notes and "`fp16`" not in notes


def test_piper_quant_declaration_matches_what_the_voice_does():
    """The note says int8 falls back on this voice; when it starts to act, the note must change."""
    assert "falls back" in family("piper-vits").quantization
    pipe = Pipeline(PipelineConfig(device="cpu", quant="int8-dynamic"))
    assert any(f.startswith("requested int8-dynamic, applied none (fp32)")
               for f in pipe.fallbacks), pipe.fallbacks


def test_every_tab_load_is_refused_with_numbers_when_it_would_not_fit(tmp_path):
    """Tabs load through the context's cache or its fresh builder; both estimate first."""
    ctx = LabContext(tmp_path)
    huge = PipelineConfig().replace(
        family="orpheus", weights="dummy", model="orpheus-3b", device="cpu", batch_size=256,
        kv_cache="static", decode_interval=1, overlap=2, crossfade_ms=0.0,
        sampling={"max_tokens": 8192})
    for load in (ctx.build_pipeline, ctx.cache.get):
        with pytest.raises(ValueError, match=r"Refused before loading: needs about .* GiB"):
            load(huge)
    assert huge not in ctx.cache
