"""End to end on the real voice and the real meters: a known degradation moves the paired
verdict from inconclusive to fail as it reaches more sentences, and an identical rendering
passes with zero distance to the baseline."""

from __future__ import annotations

import numpy as np
import pytest

from lab.config import PipelineConfig
from lab.frontend import sentence_set
from lab.quality.score_cache import Scored
from lab.quality.verdicts import (
    Takes,
    judge,
    judge_takes,
    lossy_changes,
    reference_config,
    render_takes,
    renderer,
)

SNR_DB = 0.0


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return sentence_set("short")[:6]


@pytest.fixture(scope="module")
def baseline(voice_pipeline, texts) -> Scored:
    from lab.quality.scoring import score_many

    takes = render_takes(renderer(voice_pipeline), texts)
    scores = score_many(takes.audio, takes.sample_rate, takes.texts, workers=1)
    return Scored(takes.texts, takes.audio, takes.sample_rate, scores)


@pytest.fixture(scope="module")
def all_noisy(baseline, noisy):
    """Every sentence under white noise at 0 dB SNR, judged against the clean baseline."""
    audio = [noisy(a, SNR_DB, seed=i) for i, a in enumerate(baseline.audio)]
    return judge_takes(Takes(baseline.texts, audio, baseline.sample_rate), baseline,
                       paired_waveforms=False, workers=1)


def test_noise_on_two_of_six_sentences_is_inconclusive(baseline, all_noisy):
    # The noisy sentences score as in the all-noisy run (same audio, same meters), the clean
    # ones as the baseline; re-scoring them would measure nothing new.
    from lab.quality import compare

    scores = [all_noisy.candidates[i] if i < 2 else baseline.scores[i] for i in range(6)]
    report = compare(scores, baseline.scores)
    ovrl = report.check("ovrl")
    assert ovrl.outcome == "inconclusive", ovrl.detail
    assert ovrl.low < ovrl.limit < ovrl.high and ovrl.settle > 6
    assert "sentences would settle it" in ovrl.verdict
    assert report.outcome == "inconclusive"
    assert "fail" not in {c.outcome for c in report.checks}, "four clean sentences of six " \
        "leave a resample with no change in every interval"
    assert {w.index for w in report.worst(2)} <= {0, 1}


def test_noise_on_every_sentence_fails(all_noisy):
    assert all_noisy.outcome == "fail"
    ovrl = all_noisy.check("ovrl")
    assert ovrl.outcome == "fail" and ovrl.high < ovrl.limit
    assert all_noisy.check("WER").baseline == pytest.approx(
        np.mean([s.wer for s in all_noisy.baselines]))  # the ASR floor, beside the candidate
    assert "**Quality: FAIL** on 6 sentences" in all_noisy.to_markdown()


def test_identical_rendering_passes_with_zero_distance(voice_pipeline, baseline, texts):
    again = render_takes(renderer(voice_pipeline), texts)
    report = judge_takes(again, baseline, paired_waveforms=True, workers=1)
    assert report.outcome == "pass", report.to_markdown()
    assert all(c.low == c.high == 0.0 for c in report.checks)
    mcd = report.fidelity[0]
    assert mcd.name == "MCD (dB)" and mcd.high == pytest.approx(0.0, abs=1e-6)
    assert report.worst() == []


def test_parallel_scoring_matches_serial(baseline):
    from lab.quality.scoring import score_many

    two = slice(0, 2)
    parallel = score_many(baseline.audio[two], baseline.sample_rate, baseline.texts[two],
                          workers=2)
    assert parallel == baseline.scores[two]


def test_bad_sentence_lists_are_refused_before_any_work(voice_pipeline, baseline, texts):
    def never() -> None:
        raise AssertionError("nothing may render for a request that is refused")

    with pytest.raises(ValueError, match="sentence list is empty"):
        judge(renderer(voice_pipeline), [], baseline=never, baseline_config={}, seed=0,
              paired_waveforms=True)
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        judge(renderer(voice_pipeline), ["Hello there.", "  "], baseline=never,
              baseline_config={}, seed=0, paired_waveforms=True)
    with pytest.raises(TypeError, match="not one string"):
        render_takes(renderer(voice_pipeline), "Hello there.")
    shorter = Takes(texts[:5], baseline.audio[:5], baseline.sample_rate)
    with pytest.raises(ValueError, match="different sentences"):
        judge_takes(shorter, baseline, paired_waveforms=False)


def test_the_reference_undoes_every_lossy_knob_and_keeps_the_rest():
    tuned = PipelineConfig(family="ar-voice", dtype="bf16", quant="int8-weight",
                           compile="default", kv_dtype="fp8-e4m3", mixed_prefill=16, seed=7)
    ref = reference_config(tuned)
    assert (ref.dtype, ref.quant, ref.compile, ref.kv_dtype) == ("fp32", "none", "none", "auto")
    assert (ref.family, ref.mixed_prefill, ref.seed) == ("ar-voice", 16, 7)
    assert lossy_changes(tuned, ref) == {"dtype": "bf16", "quant": "int8-weight",
                                         "compile": "default", "kv_dtype": "fp8-e4m3"}
    assert lossy_changes(ref, ref) == {}
