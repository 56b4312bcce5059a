"""Fidelity to a reference rendering: MCD with DTW, PESQ wideband, STOI."""

import numpy as np
import pytest
from scipy.signal import resample

from lab.quality import AudioError, fidelity, mel_cepstral_distortion
from lab.quality.fidelity import dtw_path


def test_identical_audio_is_perfect(speech):
    same = fidelity(speech.audio, speech.audio, speech.sample_rate)
    assert same.mcd_db == pytest.approx(0.0, abs=1e-6)
    assert same.pesq_wb > 4.4
    assert same.stoi > 0.99


def test_every_meter_degrades_as_noise_grows(speech, noisy):
    scores = [
        fidelity(noisy(speech.audio, snr), speech.audio, speech.sample_rate) for snr in (30, 10, 0)
    ]
    mcd, pesq, stoi = ([getattr(s, name) for s in scores] for name in ("mcd_db", "pesq_wb", "stoi"))
    assert 0 < mcd[0] < mcd[1] < mcd[2]
    assert pesq[0] > pesq[1] > pesq[2]
    assert stoi[0] > stoi[1] > stoi[2]
    assert pesq[2] < 2.0


def test_mcd_aligns_time_and_ignores_volume(speech, renderings):
    audio, rate = speech.audio, speech.sample_rate
    stretched = resample(audio, int(audio.size * 1.1)).astype(np.float32)
    other_sentence = renderings[1].audio
    assert mel_cepstral_distortion(audio * 0.5, audio, rate) < 0.01
    stretch_mcd = mel_cepstral_distortion(stretched, audio, rate)
    assert 0.2 < stretch_mcd < mel_cepstral_distortion(other_sentence, audio, rate)


def test_constant_delay_and_unequal_lengths_are_handled(speech):
    """A candidate with 30 ms of extra leading silence and a shorter tail is the same speech."""
    rate = speech.sample_rate
    delayed = np.concatenate([np.zeros(int(0.03 * rate), np.float32), speech.audio[: -rate // 10]])
    scores = fidelity(delayed, speech.audio, rate)
    assert scores.stoi > 0.95
    assert scores.pesq_wb > 3.5


def test_reference_may_come_at_another_rate(speech):
    at_16k = resample(speech.audio, int(speech.audio.size * 16000 / speech.sample_rate))
    scores = fidelity(speech.audio, at_16k.astype(np.float32), speech.sample_rate, 16000)
    assert scores.pesq_wb > 4.0
    assert scores.stoi > 0.95


@pytest.mark.parametrize(
    ("candidate_seconds", "reference_seconds", "bad"),
    [(0.1, 1.0, "candidate"), (1.0, 0.2, "reference")],
)
def test_too_short_input_is_named(speech, candidate_seconds, reference_seconds, bad):
    rate = speech.sample_rate
    with pytest.raises(AudioError, match=f"{bad} is too short"):
        fidelity(
            speech.audio[: int(candidate_seconds * rate)],
            speech.audio[: int(reference_seconds * rate)],
            rate,
        )


def test_silent_or_empty_input_is_named(speech):
    silence = np.zeros_like(speech.audio)
    with pytest.raises(AudioError, match="candidate is silent"):
        fidelity(silence, speech.audio, speech.sample_rate)
    with pytest.raises(AudioError, match="reference is empty"):
        fidelity(speech.audio, np.zeros(0, np.float32), speech.sample_rate)


def _dtw_cost(cost):
    rows, cols = cost.shape
    total = np.full((rows + 1, cols + 1), np.inf)
    total[0, 0] = 0.0
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            step = min(total[i - 1, j - 1], total[i - 1, j], total[i, j - 1])
            total[i, j] = cost[i - 1, j - 1] + step
    return total[rows, cols]


def test_dtw_path_is_monotonic_and_optimal():
    rng = np.random.default_rng(0)
    for _ in range(50):
        cost = rng.random((rng.integers(1, 12), rng.integers(1, 12)))
        rows, cols = dtw_path(cost)
        assert (rows[0], cols[0]) == (0, 0)
        assert (rows[-1], cols[-1]) == (cost.shape[0] - 1, cost.shape[1] - 1)
        steps = np.stack([np.diff(rows), np.diff(cols)])
        assert ((steps >= 0) & (steps <= 1)).all() and (steps.sum(axis=0) >= 1).all()
        assert cost[rows, cols].sum() == pytest.approx(_dtw_cost(cost))
