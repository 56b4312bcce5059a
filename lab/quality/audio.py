"""Audio as the quality meters want it: validated, mono float32 at 16 kHz, and its mel spectrum.

Every meter here (DNSMOS, the recogniser, PESQ, STOI, mel-cepstral distortion) was built for
16 kHz speech, while voices render at their own rate (Piper at 22050 Hz). Converting once, in one
place, keeps the meters comparable and lets `evaluate` pay for resampling a single time. Bad
input is refused here with a message that names which signal was wrong.
"""

from __future__ import annotations

from math import gcd

import numpy as np
from scipy.signal import resample_poly

METER_RATE = 16000
MIN_SECONDS = 0.25
SILENCE_PEAK = 1e-4


class AudioError(ValueError):
    """Audio handed to a quality meter is empty, silent, too short or malformed."""


def prepare(
    audio: object,
    sample_rate: int,
    *,
    name: str = "audio",
    target_rate: int = METER_RATE,
    min_seconds: float = MIN_SECONDS,
) -> np.ndarray:
    """Mono float32 in [-1, 1] at `target_rate`, after checking the signal is usable.

    Accepts float or integer PCM, mono or multi-channel in either (samples, channels) or
    (channels, samples) layout, since soundfile and torch disagree on the order.
    """
    rate = _check_rate(sample_rate, name)
    samples = _as_float(audio, name)
    if samples.size == 0:
        raise AudioError(f"{name} is empty")
    if not np.isfinite(samples).all():
        raise AudioError(f"{name} contains NaN or infinite samples")
    seconds = samples.size / rate
    if seconds < min_seconds:
        raise AudioError(
            f"{name} is too short ({seconds:.3f} s); the quality meters need at least "
            f"{min_seconds} s"
        )
    if np.abs(samples).max() < SILENCE_PEAK:
        raise AudioError(f"{name} is silent (peak below {SILENCE_PEAK})")
    return np.clip(resample(samples, rate, target_rate), -1.0, 1.0).astype(np.float32)


def resample(samples: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """Polyphase resampling with an anti-aliasing filter; exact for rational rate ratios."""
    if rate == target_rate:
        return samples
    common = gcd(rate, target_rate)
    return resample_poly(samples, target_rate // common, rate // common)


def to_pcm16(samples: np.ndarray, peak: float = 0.9) -> bytes:
    """Little-endian 16-bit PCM scaled to `peak`, so quiet renderings keep their precision."""
    top = float(np.abs(samples).max())
    scaled = samples * (peak / top) if top > 0 else samples
    return (np.clip(scaled, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def _check_rate(sample_rate: object, name: str) -> int:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
        raise AudioError(f"sample rate of {name} must be an integer, got {sample_rate!r}")
    if sample_rate < 1000:
        raise AudioError(f"sample rate of {name} must be at least 1000 Hz, got {sample_rate}")
    return int(sample_rate)


def _as_float(audio: object, name: str) -> np.ndarray:
    try:
        samples = np.asarray(audio)
    except (TypeError, ValueError, RuntimeError) as err:
        raise AudioError(f"{name} is not an array of samples: {err}") from err
    if samples.dtype.kind == "i":
        samples = samples / float(np.iinfo(samples.dtype).max + 1)
    elif samples.dtype.kind != "f":
        raise AudioError(
            f"{name} must hold float or signed integer samples, got dtype {samples.dtype}"
        )
    if samples.ndim == 2:
        channel_axis = 0 if samples.shape[0] < samples.shape[1] else 1
        samples = samples.mean(axis=channel_axis)
    elif samples.ndim != 1:
        raise AudioError(f"{name} must be 1-D (mono) or 2-D (channels), got shape {samples.shape}")
    return samples.astype(np.float64)


def power_spectrogram(
    samples: np.ndarray, n_fft: int, hop: int, win_length: int | None = None
) -> np.ndarray:
    """|STFT|^2 as (frames, bins), centred frames with zero padding and a periodic Hann window.

    The framing matches librosa's defaults because the DNSMOS P.808 model was trained on
    features computed that way.
    """
    win_length = win_length or n_fft
    window = np.zeros(n_fft)
    start = (n_fft - win_length) // 2
    window[start : start + win_length] = np.hanning(win_length + 1)[:-1]
    padded = np.pad(samples, n_fft // 2)
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop]
    return np.abs(np.fft.rfft(frames * window, n=n_fft)) ** 2
