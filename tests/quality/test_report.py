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
    mos_fields,
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
    assert report.passed and report.outcome == "pass"
    assert {c.outcome for c in report.checks} == {"pass"}
    assert [c.metric for c in report.checks] == [*mos_fields(), "WER", "CER"]


def test_noisy_rendering_fails_on_one_sentence_as_a_point_comparison(clean_scores,
                                                                     noisy_scores):
    report = compare(noisy_scores, clean_scores[0])
    assert not report.passed and report.outcome == "fail"
    ovrl, wer_check = report.check("ovrl"), report.check("WER")
    assert ovrl.name == "DNSMOS OVRL within 5% of baseline" and ovrl.outcome == "fail"
    assert wer_check.name == "WER not worse by more than 2 points"
    assert ovrl.candidate == noisy_scores.mos.ovrl and ovrl.low == ovrl.high == ovrl.delta
    assert wer_check.baseline == clean_scores[0].wer
    markdown = report.to_markdown()
    assert "**Quality: FAIL** on 1 sentence; one sentence: no spread" in markdown
    assert "| DNSMOS OVRL within 5% of baseline | **fail** |" in markdown
    assert "(ASR floor)" in markdown and "| PESQ-WB |" in markdown
    assert "**Worst sentences**" in markdown and noisy_scores.text in markdown
    data = json.loads(json.dumps(report.to_dict()))
    assert data["passed"] is False and data["outcome"] == "fail"
    assert len(data["checks"]) == len(mos_fields()) + 2
    assert data["worst"][0]["text"] == noisy_scores.text


@pytest.mark.parametrize(
    ("cand_ovrl", "outcome"), [(3.0, "pass"), (2.85, "pass"), (2.849, "fail"), (3.6, "pass")]
)
def test_mos_check_threshold_is_five_percent(cand_ovrl, outcome):
    report = compare(_scores(ovrl=cand_ovrl), _scores(ovrl=3.0))
    assert report.check("ovrl").outcome == outcome


@pytest.mark.parametrize(
    ("cand_wer", "outcome"),
    [(0.10, "pass"), (0.12, "pass"), (0.121, "fail"), (0.0, "pass"), (0.5, "fail")],
)
def test_wer_check_allows_two_points(cand_wer, outcome):
    report = compare(_scores(wer=cand_wer), _scores(wer=0.10))
    assert report.check("WER").outcome == outcome
    assert report.outcome == outcome


def test_tolerances_can_be_tightened():
    report = compare(_scores(ovrl=2.95, wer=0.11), _scores(), mos_tolerance=0.01,
                     wer_points=0.005, cer_points=0.001)
    assert [report.check(m).outcome for m in ("ovrl", "WER", "CER")] == ["fail"] * 3
    assert report.check("ovrl").name == "DNSMOS OVRL within 1% of baseline"
    assert report.settings["mos_tolerance"] == 0.01


def test_every_mos_field_is_judged():
    """A proxy added to MosScores is judged without touching the verdict code."""
    base = [_scores(ovrl=3.0) for _ in range(4)]
    cand = [QualityScores(MosScores(2.0, 4.0, 3.0, 3.5, 3.8), 0.1, 0.05, "heard", None, "said")
            for _ in range(4)]
    report = compare(cand, base)
    assert report.check("sig").outcome == "fail" and report.check("bak").outcome == "pass"
    assert report.outcome == "fail"


def test_lists_are_paired_sentence_by_sentence():
    fid = Fidelity(4.0, 3.0, 0.9)
    mean = mean_scores([_scores(ovrl=2.0, wer=0.0, fidelity=fid), _scores(ovrl=4.0, wer=0.2)])
    assert mean.mos.ovrl == pytest.approx(3.0) and mean.wer == pytest.approx(0.1)
    assert mean.fidelity is None
    report = compare([_scores(ovrl=2.9), _scores(ovrl=3.1)], [_scores(), _scores()])
    assert report.sentences == 2 and report.candidate.mos.ovrl == pytest.approx(3.0)
    assert report.fidelity == []
    with_fid = compare([_scores(fidelity=fid)] * 3, [_scores()] * 3)
    assert [s.name for s in with_fid.fidelity] == ["MCD (dB)", "PESQ-WB", "STOI"]
    assert with_fid.fidelity[0].mean == with_fid.fidelity[0].low == 4.0


def test_mismatched_or_empty_sentence_lists_are_refused():
    with pytest.raises(ValueError, match="candidate has 2 sentences but baseline has 1"):
        compare([_scores(ovrl=2.9), _scores(ovrl=3.1)], [_scores()])
    with pytest.raises(ValueError, match="candidate holds no sentences"):
        compare([], _scores())
    with pytest.raises(TypeError, match="candidate must be QualityScores"):
        compare("scores", _scores())
    other = QualityScores(MosScores(3.2, 4.0, 3.0, 3.5, 3.8), 0.1, 0.05, "heard", None, "other")
    with pytest.raises(ValueError, match="sentence 1 differs"):
        compare([_scores(), _scores()], [_scores(), other])


def test_bad_requests_fail_before_any_model_runs(speech):
    with pytest.raises(TextCompareError, match="no words"):
        evaluate(speech.audio, speech.sample_rate, " ... ")
    with pytest.raises(AudioError, match="reference is too short"):
        evaluate(speech.audio, speech.sample_rate, speech.text, reference=speech.audio[:100])
    with pytest.raises(AudioError, match="audio is silent"):
        evaluate(np.zeros(22050, np.float32), 22050, speech.text)
