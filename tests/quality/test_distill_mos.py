"""Distill-MOS: the shipped weights load into the lab's network, score like the package's model,
and rank clean speech above the same speech in noise."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from lab.quality import AudioError, distill_mos
from lab.quality.distill_mos import CROP, MAX_HOP, WEIGHTS, crops_of, load_model
from tests.quality.conftest import buzz

NOISE_SNRS_DB = (20, 10, 5, 0)


def test_every_tensor_of_the_checkpoint_has_its_place():
    """strict=True in load_model already refuses a missing or extra key; shapes must agree too."""
    stored = load_file(WEIGHTS)
    model = load_model()
    assert set(stored) == set(model.state_dict())
    assert all(torch.equal(stored[k], v) for k, v in model.state_dict().items())
    assert not model.training


def test_scores_match_the_distillmos_package():
    """Values from distillmos 0.9.1's ConvTransformerSQAModel on the same signals (one padded
    crop, and six crops of a 12 s clip)."""
    assert distill_mos(buzz(), 16000) == pytest.approx(2.2887558937072754, abs=1e-5)
    assert distill_mos(np.tile(buzz(), 4), 16000) == pytest.approx(1.320284366607666, abs=1e-5)


@pytest.mark.parametrize(("seconds", "count"), [(0.5, 1), (CROP / 16000, 1), (12.0, 6)])
def test_crops_cover_the_clip(seconds, count):
    samples = np.arange(int(seconds * 16000), dtype=np.float32) + 1
    crops = crops_of(samples)
    assert crops.shape == (count, CROP)
    if samples.size <= CROP:
        assert np.array_equal(crops[0, : samples.size], samples)
        assert not crops[0, samples.size :].any()
    else:
        starts = crops[:, 0] - 1
        assert starts[0] == 0 and starts[-1] == samples.size - CROP
        assert np.diff(starts).max() <= MAX_HOP


def test_clean_speech_outscores_the_same_speech_in_noise(renderings, noisy):
    """On each of the lab voice's sentences: clean well above 5 dB SNR, falling as noise grows."""
    for r in renderings:
        clean = distill_mos(r.audio, r.sample_rate)
        in_noise = [distill_mos(noisy(r.audio, snr), r.sample_rate) for snr in NOISE_SNRS_DB]
        assert 3.0 < clean <= 5.0
        assert clean > in_noise[NOISE_SNRS_DB.index(5)] + 1.0
        assert in_noise == sorted(in_noise, reverse=True)
        assert all(1.0 <= score for score in in_noise)


def test_the_score_is_deterministic(speech):
    first = distill_mos(speech.audio, speech.sample_rate)
    assert distill_mos(speech.audio.copy(), speech.sample_rate) == first


def test_the_input_rate_is_honoured(speech):
    """The voice's 22.05 kHz clip, and the same clip resampled to 16 kHz, score alike."""
    from lab.quality.audio import prepare

    at_16k = prepare(speech.audio, speech.sample_rate)
    native = distill_mos(speech.audio, speech.sample_rate)
    assert distill_mos(at_16k, 16000) == pytest.approx(native, abs=1e-4)


@pytest.mark.parametrize(
    ("audio", "rate", "message"),
    [
        (np.zeros(0, np.float32), 16000, "empty"),
        (np.full(16000, np.nan, np.float32), 16000, "NaN"),
        (np.zeros(16000, np.float32), 16000, "silent"),
        (buzz(0.1), 16000, "too short"),
        (buzz(), 16000.0, "sample rate"),
        (buzz(), 0, "sample rate"),
        (np.array(["a", "b"]), 16000, "float or signed integer"),
    ],
)
def test_bad_input_is_refused_with_the_reason(audio, rate, message):
    with pytest.raises(AudioError, match=message):
        distill_mos(audio, rate)
