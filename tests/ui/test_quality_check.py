"""The Synthesize tab's quality check: a paired verdict with intervals over the take's
sentences, the ASR floor, the worst sentences with both renderings, and the reference's scores
cached for the next check. Real meters; the candidate is the session's voice with noise added,
so the check has something to find."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
from gradio.context import LocalContext

from lab.config import PipelineConfig
from lab.ui import quality_check
from lab.ui.context import LabContext
from lab.ui.pipelines import PipelineCache

TEXT = ("The kettle clicked off just as the phone rang. Please leave the blue folder on my "
        "desk. Our train was twenty minutes late again.")


class _Noisy:
    """The session's voice with white noise at 5 dB SNR on every sentence: a take that is
    clearly worse than its reference, without loading a second model."""

    def __init__(self, pipe) -> None:
        self.pipe = pipe

    def __getattr__(self, name: str):
        return getattr(self.pipe, name)

    def synthesize(self, text: str):
        result = self.pipe.synthesize(text)
        power = float(np.mean(result.audio ** 2))
        noise = np.random.default_rng(len(text)).normal(0, np.sqrt(power / 10 ** 0.5),
                                                        result.audio.size)
        audio = np.clip(result.audio + noise, -1, 1).astype(np.float32)
        return SimpleNamespace(audio=audio, sample_rate=result.sample_rate, text=text)


@pytest.fixture
def progress():
    queue = SimpleNamespace(sent=[])
    queue.set_progress = lambda _id, levels: queue.sent.append([lv.desc for lv in levels])
    tracker = gr.Progress(track_tqdm=True)
    tokens = [(LocalContext.blocks, LocalContext.blocks.set(SimpleNamespace(_queue=queue))),
              (LocalContext.event_id, LocalContext.event_id.set("test-event")),
              (LocalContext.progress, LocalContext.progress.set(tracker))]
    yield tracker, queue.sent
    for var, token in reversed(tokens):
        var.reset(token)


@pytest.fixture
def ctx(tmp_path, voice_pipeline):
    loads = []

    def factory(cfg, on_stage=None):
        loads.append(cfg.dtype)
        return _Noisy(voice_pipeline) if cfg.dtype == "bf16" else voice_pipeline

    context = LabContext(tmp_path, cache=PipelineCache(factory=factory))
    context.loads = loads
    return context


def test_check_judges_sentences_with_intervals_and_lists_the_worst(ctx, progress):
    tracker, sent = progress
    cfg = PipelineConfig(device="cpu", stream=False, dtype="bf16")
    last = {"config": cfg, "text": TEXT, "audio": None, "sample_rate": 22050}
    md, reference, *slots = quality_check.check(ctx, last, quality_check.NO_SET, tracker)
    assert "Quality FAIL" in md or "Quality INCONCLUSIVE" in md
    assert "on 3 sentences" in md and "rendered and scored now" in md
    assert "95% paired bootstrap intervals" in md and "(ASR floor)" in md
    assert "| MCD (dB) |" in md, "the take's noise is seeded like its reference's: paired"
    assert "**Worst sentences**" in md
    rate, audio = reference
    assert rate == 22050 and audio.dtype == np.int16 and audio.size > rate
    rows = [slots[i:i + 4] for i in range(0, len(slots), 4)]
    shown = [r for r in rows if r[0]["visible"]]
    assert shown, "the worst sentences must come with players"
    for _, caption, base, take in shown:
        assert "fp32 heard" in caption and base[1].size > 0 and take[1].size > 0
    descs = {d for update in sent for d in update}
    assert {"rendering the baseline", "scoring the baseline",
            "scoring the candidate"} <= descs, "scoring must show a progress bar"

    ctx.cache.clear()
    ctx.loads.clear()
    md, *_ = quality_check.check(ctx, last, quality_check.NO_SET, tracker)
    assert "cached" in md and "rendered and scored now" not in md
    assert ctx.loads == ["bf16"], "a cached reference needs no fp32 pipeline"


def test_sentences_to_judge_add_the_chosen_set_once_and_only_what_asr_can_read():
    own = quality_check.sentences_to_judge("Hello there. Hello there.", quality_check.NO_SET)
    assert own == ["Hello there."]
    more = quality_check.sentences_to_judge("Hello there.", "short")
    assert more[0] == "Hello there." and len(more) == 13
    edge = quality_check.sentences_to_judge("Привет, как дела? ...", "edge")
    assert "???" not in edge and not any("Привет" in t for t in edge) and len(edge) == 13


def test_a_take_with_nothing_to_judge_is_refused_before_any_work(ctx, progress):
    last = {"config": PipelineConfig(device="cpu"), "text": "Привет, как дела?",
            "audio": None, "sample_rate": 22050}
    with pytest.raises(gr.Error, match="recogniser reads US English"):
        quality_check.check(ctx, last, quality_check.NO_SET, progress[0])
    assert ctx.loads == []
