"""The mel scale and its triangular filterbank, on their own so that a trainer (the codec
decoder's log-mel loss) and the quality meters share one definition without the trainer loading
the meters' recogniser and MOS models."""

from __future__ import annotations

import numpy as np

__all__ = ["mel_filterbank"]


def mel_filterbank(rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """Triangular filters on the Slaney mel scale, area-normalised, as (n_mels, bins)."""
    bin_freqs = np.fft.rfftfreq(n_fft, d=1.0 / rate)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), n_mels + 2))
    widths = np.diff(edges)
    offsets = edges[:, None] - bin_freqs[None, :]
    rising = -offsets[:-2] / widths[:-1, None]
    falling = offsets[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


_LINEAR_STEP = 200.0 / 3
_LOG_START_HZ = 1000.0
_LOG_START_MEL = _LOG_START_HZ / _LINEAR_STEP
_LOG_STEP = np.log(6.4) / 27.0


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / _LINEAR_STEP
    logarithmic = _LOG_START_MEL + np.log(np.maximum(hz, _LOG_START_HZ) / _LOG_START_HZ) / _LOG_STEP
    return np.where(hz >= _LOG_START_HZ, logarithmic, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    linear = mel * _LINEAR_STEP
    logarithmic = _LOG_START_HZ * np.exp(_LOG_STEP * (mel - _LOG_START_MEL))
    return np.where(mel >= _LOG_START_MEL, logarithmic, linear)
