"""evaluate() on real renderings and compare()'s pass/fail verdict."""

import json

import numpy as np
import pytest

from lab.quality import (
    AudioError,
    Fidelity,
    MosScores,
    QualityScores,
    TextCompareError,
    compare,
    evaluate,
    mean_scores,
)


def _scores(ovrl=3.0, wer=0.1, fidelity=None):
    mos = MosScores(3.2, 4.0, ovrl, 3.5, 3.8)
    return QualityScores(mos, wer, wer / 2, "heard", fidelity, "said")


def test_evaluate_fills_every_meter(clean_scores, noisy_scores):
    clean = clean_scores[0]
    assert clean.fidelity is None
    assert isinstance(noisy_scores.fidelity, Fidelity)
    assert noisy_scores.fidelity.pesq_wb < 2.0
    assert 0 <= clean.cer <= clean.wer + 0.5
    assert json.loads(json.dumps(clean.to_dict()))["mos"]["ovrl"] == clean.mos.ovrl


def test_identical_rendering_passes(speech, clean_scores):
    again = evaluate(speech.audio, speech.sample_rate, speech.text, reference=speech.audio)
    assert again.mos == clean_scores[0].mos
    assert again.transcript == clean_scores[0].transcript
    assert again.fidelity.mcd_db == pytest.approx(0.0, abs=1e-6)
    report = compare(again, clean_scores[0])
    assert report.passed
    assert [c.passed for c in report.checks] == [True, True]


def test_noisy_rendering_fails_both_checks(clean_scores, noisy_scores):
    report = compare(noisy_scores, clean_scores[0])
    assert not report.passed
    mos_check, wer_check = report.checks
    assert mos_check.name == "MOS proxy within 5% of baseline" and not mos_check.passed
    assert wer_check.name == "WER not worse by more than 2 points" and not wer_check.passed
    assert mos_check.candidate == noisy_scores.mos.ovrl
    assert wer_check.baseline == clean_scores[0].wer
    markdown = report.to_markdown()
    assert "**Quality: FAIL**" in markdown
    assert "| MOS proxy within 5% of baseline | FAIL |" in markdown
    assert "| PESQ-WB |" in markdown
    data = json.loads(json.dumps(report.to_dict()))
    assert data["passed"] is False and len(data["checks"]) == 2


@pytest.mark.parametrize(
    ("cand_ovrl", "passed"), [(3.0, True), (2.85, True), (2.849, False), (3.6, True)]
)
def test_mos_check_threshold_is_five_percent(cand_ovrl, passed):
    report = compare(_scores(ovrl=cand_ovrl), _scores(ovrl=3.0))
    assert report.checks[0].passed is passed


@pytest.mark.parametrize(
    ("cand_wer", "passed"), [(0.10, True), (0.12, True), (0.121, False), (0.0, True), (0.5, False)]
)
def test_wer_check_allows_two_points(cand_wer, passed):
    report = compare(_scores(wer=cand_wer), _scores(wer=0.10))
    assert report.checks[1].passed is passed
    assert report.passed is passed


def test_tolerances_can_be_tightened():
    report = compare(_scores(ovrl=2.95, wer=0.11), _scores(), mos_tolerance=0.01, wer_points=0.005)
    assert [c.passed for c in report.checks] == [False, False]
    assert report.checks[0].name == "MOS proxy within 1% of baseline"


def test_lists_are_averaged_before_comparing():
    fid = Fidelity(4.0, 3.0, 0.9)
    mean = mean_scores([_scores(ovrl=2.0, wer=0.0, fidelity=fid), _scores(ovrl=4.0, wer=0.2)])
    assert mean.mos.ovrl == pytest.approx(3.0) and mean.wer == pytest.approx(0.1)
    assert mean.fidelity is None
    assert compare([_scores(ovrl=2.9), _scores(ovrl=3.1)], [_scores()]).passed
    with pytest.raises(ValueError, match="at least one"):
        compare([], _scores())
    with pytest.raises(TypeError, match="candidate must be QualityScores"):
        compare("scores", _scores())


def test_bad_requests_fail_before_any_model_runs(speech):
    with pytest.raises(TextCompareError, match="no words"):
        evaluate(speech.audio, speech.sample_rate, " ... ")
    with pytest.raises(AudioError, match="reference is too short"):
        evaluate(speech.audio, speech.sample_rate, speech.text, reference=speech.audio[:100])
    with pytest.raises(AudioError, match="audio is silent"):
        evaluate(np.zeros(22050, np.float32), 22050, speech.text)
