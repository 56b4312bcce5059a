"""Fidelity: how close an optimised rendering stays to a reference rendering of the same text.

Quantisation, lower precision or a different streaming window should change the waveform as
little as possible. Three views of "as little as possible":

- mel-cepstral distortion (MCD, dB): spectral-envelope distance after dynamic time warping, so
  it tolerates small timing shifts (a duration predictor in fp16 may move a phone by a frame);
- PESQ wideband (ITU-T P.862.2, about 1..4.6): perceived quality of the candidate relative to
  the reference, sample-aligned;
- STOI (0..1): how intelligible the candidate stays, from short-time envelope correlation.

All three run at 16 kHz. PESQ and STOI compare sample-aligned signals of equal length, so a
constant delay is removed first and the shorter signal is padded with silence: missing speech
then counts against the candidate instead of being cut away.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from pesq import PesqError, pesq
from pystoi import stoi
from scipy.fft import dct
from scipy.signal import correlate
from scipy.spatial.distance import cdist

from lab.mel import mel_filterbank
from lab.quality.audio import METER_RATE, AudioError, power_spectrogram, prepare

MCD_FFT = 512
MCD_WINDOW = 400
MCD_HOP = 160
MCD_MELS = 40
MCD_CEPSTRA = 25
MCD_RANGE_DB = 60.0
MAX_LAG_SECONDS = 0.5
# Converts a Euclidean distance between natural-log mel-cepstra into decibels (Kubichek 1993).
MCD_DB = 10.0 * np.sqrt(2.0) / np.log(10.0)


@dataclass(frozen=True)
class Fidelity:
    """Closeness to the reference: lower `mcd_db` is better, higher `pesq_wb` and `stoi` are."""

    mcd_db: float
    pesq_wb: float
    stoi: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def fidelity(
    candidate: object, reference: object, sample_rate: int, reference_rate: int | None = None
) -> Fidelity:
    """All three fidelity meters; `reference_rate` defaults to the candidate's `sample_rate`."""
    cand, ref = _prepare_pair(candidate, reference, sample_rate, reference_rate)
    aligned_cand, aligned_ref = _align(cand, ref)
    return Fidelity(
        mcd_db=_mcd(cand, ref),
        pesq_wb=_pesq_wideband(aligned_cand, aligned_ref),
        stoi=float(stoi(aligned_ref, aligned_cand, METER_RATE, extended=False)),
    )


def mel_cepstral_distortion(
    candidate: object, reference: object, sample_rate: int, reference_rate: int | None = None
) -> float:
    """MCD in dB between two renderings of the same text, time-aligned by DTW."""
    return _mcd(*_prepare_pair(candidate, reference, sample_rate, reference_rate))


def mel_cepstrum(samples: np.ndarray) -> np.ndarray:
    """Mel-cepstral coefficients c1..c24 per 10 ms frame of 16 kHz audio, as (frames, 24).

    Scaled as real-cepstrum coefficients (log amplitude = c0 + 2 * sum c_k cos(...)), the scale
    the MCD constant assumes. c0 is dropped because it only carries loudness. Mel amplitudes
    are floored 60 dB below the clip's loudest band, so near-silent frames do not swing with
    the last bits of dither, and a volume change moves the floor with the signal and leaves
    c1.. untouched.
    """
    power = power_spectrogram(samples.astype(np.float64), MCD_FFT, MCD_HOP, MCD_WINDOW)
    mel = np.sqrt(power) @ mel_filterbank(METER_RATE, MCD_FFT, MCD_MELS).T
    floor = mel.max() * 10.0 ** (-MCD_RANGE_DB / 20.0)
    cepstra = dct(np.log(np.maximum(mel, floor)), axis=1) / (2 * MCD_MELS)
    return cepstra[:, 1:MCD_CEPSTRA]


def dtw_path(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cheapest monotonic alignment through a (rows, cols) cost matrix, as index arrays.

    Steps are diagonal, down or right with equal weight. Each row of the accumulated cost is
    computed at once: moving right within a row is a running minimum over a cumulative sum, so
    only the rows are looped over in Python.
    """
    rows, cols = cost.shape
    total = np.empty_like(cost, dtype=np.float64)
    total[0] = np.cumsum(cost[0])
    for i in range(1, rows):
        above = total[i - 1]
        entry = np.empty(cols)
        entry[0] = above[0]
        entry[1:] = np.minimum(above[1:], above[:-1])
        running = np.cumsum(cost[i])
        total[i] = running + np.minimum.accumulate(entry - running + cost[i])
    return _backtrack(total)


def _backtrack(total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    i, j = total.shape[0] - 1, total.shape[1] - 1
    path = [(i, j)]
    while i > 0 or j > 0:
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            step = int(np.argmin((total[i - 1, j - 1], total[i - 1, j], total[i, j - 1])))
            i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
        path.append((i, j))
    rows, cols = np.array(path[::-1]).T
    return rows, cols


def _mcd(cand: np.ndarray, ref: np.ndarray) -> float:
    cand_cep, ref_cep = mel_cepstrum(cand), mel_cepstrum(ref)
    distance = cdist(cand_cep, ref_cep)
    rows, cols = dtw_path(distance)
    return float(MCD_DB * distance[rows, cols].mean())


def _pesq_wideband(cand: np.ndarray, ref: np.ndarray) -> float:
    try:
        return float(pesq(METER_RATE, ref, cand, mode="wb"))
    except PesqError as err:
        raise AudioError(
            f"PESQ could not score candidate against reference ({type(err).__name__}); "
            "one of them may hold no audible speech"
        ) from err


def _prepare_pair(
    candidate: object, reference: object, sample_rate: int, reference_rate: int | None
) -> tuple[np.ndarray, np.ndarray]:
    cand = prepare(candidate, sample_rate, name="candidate")
    ref = prepare(reference, reference_rate or sample_rate, name="reference")
    return cand, ref


def _align(cand: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Undo a constant delay (up to half a second) and pad both to one length with silence.

    STOI compares the two signals frame by frame, so even 20 ms of extra leading silence in the
    candidate would read as lost intelligibility. Nothing is cut, only padded.
    """
    correlation = correlate(ref, cand, mode="full", method="fft")
    lags = np.arange(-(cand.size - 1), ref.size)
    window = np.abs(lags) <= MAX_LAG_SECONDS * METER_RATE
    lag = int(lags[window][np.argmax(correlation[window])])
    cand = np.pad(cand, (max(lag, 0), 0))
    ref = np.pad(ref, (max(-lag, 0), 0))
    size = max(cand.size, ref.size)
    return np.pad(cand, (0, size - cand.size)), np.pad(ref, (0, size - ref.size))
