"""Preparing audio for the meters: validation, mono, resampling, mel features."""

import numpy as np
import pytest

from lab.mel import mel_filterbank
from lab.quality.audio import (
    METER_RATE,
    AudioError,
    power_spectrogram,
    prepare,
    to_pcm16,
)


def _tone(freq, rate, seconds=1.0, amplitude=0.5):
    t = np.arange(int(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _peak_hz(samples, rate):
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return np.fft.rfftfreq(samples.size, 1 / rate)[np.argmax(spectrum)]


def test_voice_rate_becomes_16k_mono_float32():
    out = prepare(_tone(440, 22050), 22050)
    assert out.dtype == np.float32
    assert out.ndim == 1
    assert out.size == 16000
    assert _peak_hz(out, METER_RATE) == pytest.approx(440, abs=2)


def test_resampling_filters_what_16k_cannot_hold():
    """A 10 kHz tone is above the 8 kHz Nyquist limit: it must vanish, not fold down to 6 kHz."""
    speechband = prepare(_tone(1000, 44100), 44100)
    ultrasonic = prepare(_tone(10000, 44100), 44100)
    assert np.sqrt(np.mean(speechband**2)) > 0.3
    assert np.sqrt(np.mean(ultrasonic[1000:-1000] ** 2)) < 0.01


@pytest.mark.parametrize("layout", ["samples_first", "channels_first"])
def test_stereo_is_mixed_down_in_either_layout(layout):
    left, right = _tone(300, 16000), _tone(300, 16000) * 0.0
    stereo = np.stack([left, right], axis=1 if layout == "samples_first" else 0)
    np.testing.assert_allclose(prepare(stereo, 16000), left / 2, atol=1e-6)


def test_int16_pcm_is_scaled_to_unit_range():
    pcm = (_tone(300, 16000) * 32767).astype(np.int16)
    np.testing.assert_allclose(prepare(pcm, 16000), _tone(300, 16000), atol=1e-4)


def test_pcm16_bytes_are_peak_normalised():
    pcm = np.frombuffer(to_pcm16(_tone(300, 16000, amplitude=0.01)), dtype="<i2")
    assert pcm.size == 16000
    assert 0.85 * 32767 < np.abs(pcm).max() <= 0.9 * 32767 + 1


@pytest.mark.parametrize(
    ("audio", "rate", "message"),
    [
        (np.zeros(0, np.float32), 16000, "reference is empty"),
        (np.zeros(16000, np.float32), 16000, "reference is silent"),
        (_tone(300, 16000, seconds=0.1), 16000, "reference is too short"),
        (np.full(16000, np.nan, np.float32), 16000, "reference contains NaN"),
        (np.zeros((2, 2, 16000), np.float32), 16000, "reference must be 1-D"),
        (np.array(["a"] * 16000), 16000, "reference must hold float"),
        (_tone(300, 16000), 0, "sample rate of reference"),
        (_tone(300, 16000), 16000.0, "sample rate of reference must be an integer"),
    ],
)
def test_bad_audio_is_refused_naming_the_input(audio, rate, message):
    with pytest.raises(AudioError, match=message):
        prepare(audio, rate, name="reference")
    assert issubclass(AudioError, ValueError)


def test_mel_filterbank_matches_the_slaney_reference():
    """Row sums and peaks of librosa.filters.mel(sr=16000, n_fft=321, n_mels=120), which the
    DNSMOS P.808 model was trained on."""
    bank = mel_filterbank(16000, 321, 120)
    assert bank.shape == (120, 161)
    assert (bank >= 0).all()
    np.testing.assert_allclose(
        bank.sum(axis=1)[[0, 30, 60, 119]],
        [
            2.1270396246109158e-05,
            3.403263399377465e-04,
            1.9820185378193855e-02,
            2.0068015903234482e-02,
        ],
        rtol=1e-6,
    )
    assert list(bank.argmax(axis=1)[[0, 30, 60, 119]]) == [1, 16, 34, 156]


def test_power_spectrogram_frames_are_centred():
    tone = _tone(1000, 16000).astype(np.float64)
    power = power_spectrogram(tone, n_fft=512, hop=160, win_length=400)
    assert power.shape == (1 + tone.size // 160, 257)
    assert np.argmax(power[50]) == round(1000 * 512 / 16000)
