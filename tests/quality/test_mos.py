"""The MOS proxies (DNSMOS and Distill-MOS): agreement with the reference procedure and
sensitivity to noise."""

import numpy as np
import pytest
from scipy.signal import resample_poly

from lab.quality import AudioError, MosScores, distill_mos, mos_scores
from tests.quality.conftest import buzz


def test_scores_match_the_reference_dnsmos_procedure():
    """Values from speechmos.dnsmos.run with librosa features on the same signal."""
    scores = mos_scores(buzz(), 16000)
    assert scores.sig == pytest.approx(1.8049736561857532, abs=2e-3)
    assert scores.bak == pytest.approx(1.624398574356503, abs=2e-3)
    assert scores.ovrl == pytest.approx(1.4794810683336206, abs=2e-3)
    assert scores.p808 == pytest.approx(2.195067882537842, abs=2e-3)
    assert scores.distill == distill_mos(buzz(), 16000)


def test_clean_speech_outscores_speech_in_noise(clean_scores, noisy_scores):
    clean, noisy = clean_scores[0].mos, noisy_scores.mos
    assert isinstance(clean, MosScores)
    for value in clean.to_dict().values():
        assert 1.0 <= value <= 5.0
    assert clean.ovrl > 2.8
    assert clean.ovrl > noisy.ovrl + 1.0
    assert clean.bak > noisy.bak + 1.5
    assert clean.p808 > noisy.p808
    assert clean.distill > noisy.distill + 1.0


def test_sample_rate_of_the_input_does_not_change_the_verdict(speech, clean_scores):
    """The same rendering at 44.1 kHz scores like it does at the voice's 22.05 kHz."""
    upsampled = resample_poly(speech.audio, 2, 1).astype(np.float32)
    assert speech.sample_rate * 2 == 44100
    scores = mos_scores(upsampled, 44100)
    assert scores.ovrl == pytest.approx(clean_scores[0].mos.ovrl, abs=0.05)
    assert scores.sig == pytest.approx(clean_scores[0].mos.sig, abs=0.05)
    assert scores.distill == pytest.approx(clean_scores[0].mos.distill, abs=0.05)


def test_silence_is_refused():
    with pytest.raises(AudioError, match="silent"):
        mos_scores(np.zeros(22050, np.float32), 22050)
