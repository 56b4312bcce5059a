"""MOS proxies: DNSMOS P.835 (signal, background, overall) and P.808, and Distill-MOS.

`mos_scores` runs both families on a clip and is what every `MosScores` comes from. DNSMOS was
trained to judge noise suppression and barely moves between renderings of one voice, so
Distill-MOS (`lab.quality.distill_mos`), trained on listening-test ratings of speech quality,
stands beside it: when one proxy moves and the other does not, that says what changed.

Listening tests are the ground truth for naturalness but cannot run after every change, so the
lab uses Microsoft's DNSMOS networks as a stand-in: they predict the 1..5 opinion scores that
listeners would give. The ONNX files ship inside the `speechmos` package; we run them with
onnxruntime directly and compute the P.808 mel features ourselves, which keeps scores identical
to the reference procedure without pulling in librosa.

Procedure (from the DNSMOS paper and its reference script): clips shorter than 9.01 s are looped
until they are long enough, the clip is scored in 9.01 s windows one second apart, each raw
P.835 output is mapped through a fitted cubic, and window scores are averaged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from importlib.resources import files

import numpy as np
import onnxruntime as ort

from lab.mel import mel_filterbank
from lab.quality.audio import METER_RATE, power_spectrogram, prepare
from lab.quality.distill_mos import distill_mos

WINDOW_SECONDS = 9.01
WINDOW = int(WINDOW_SECONDS * METER_RATE)
HOP = METER_RATE
P808_FFT = 321
P808_HOP = 160
P808_MELS = 120

# Cubic maps from raw network output to MOS, fitted by the DNSMOS authors (highest power first).
_SIG_FIT = np.poly1d([-0.08397278, 1.22083953, 0.0052439])
_BAK_FIT = np.poly1d([-0.13166888, 1.60915514, -0.39604546])
_OVRL_FIT = np.poly1d([-0.06766283, 1.11546468, 0.04602535])


@dataclass(frozen=True)
class MosScores:
    """Predicted mean opinion scores on the 1..5 scale; higher is better.

    `sig` rates the speech itself, `bak` the background (noise, hum), `ovrl` the whole clip;
    `p808` comes from the separate single-score P.808 model; `distill` is Distill-MOS, the
    second, independent proxy.
    """

    sig: float
    bak: float
    ovrl: float
    p808: float
    distill: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


_LABELS = {"sig": "DNSMOS SIG", "bak": "DNSMOS BAK", "ovrl": "DNSMOS OVRL",
           "p808": "DNSMOS P.808", "distill": "Distill-MOS"}


def mos_fields() -> list[str]:
    """Every MOS proxy reading, read off `MosScores` so a new proxy is judged without edits."""
    return [f.name for f in fields(MosScores)]


def mos_label(name: str) -> str:
    """A MOS field's name for people: its `label` metadata, else the proxy's name, else upper."""
    declared = {f.name: f.metadata.get("label") for f in fields(MosScores)}.get(name)
    return declared or _LABELS.get(name) or name.replace("_", " ").upper()


@dataclass(frozen=True)
class _Sessions:
    p835: ort.InferenceSession
    p808: ort.InferenceSession
    p808_mel: np.ndarray


@lru_cache(maxsize=1)
def _sessions() -> _Sessions:
    """Load both networks once per process; the app scores every synthesis."""
    folder = files("speechmos") / "dnsmos_models"
    options = ort.SessionOptions()
    options.log_severity_level = 3

    def load(name: str) -> ort.InferenceSession:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"DNSMOS model {name} is missing from the speechmos package")
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    return _Sessions(
        p835=load("sig_bak_ovr.onnx"),
        p808=load("model_v8.onnx"),
        p808_mel=mel_filterbank(METER_RATE, P808_FFT, P808_MELS),
    )


def mos_scores(audio: object, sample_rate: int) -> MosScores:
    """Score one clip of speech at any sample rate (resampled to 16 kHz once) with DNSMOS and
    Distill-MOS."""
    samples = prepare(audio, sample_rate)
    sessions = _sessions()
    windows = _windows(samples)
    p835 = np.array([_run(sessions.p835, window[None, :])[0] for window in windows])
    p808 = [float(_run(sessions.p808, _p808_features(w, sessions.p808_mel))[0, 0]) for w in windows]
    return MosScores(
        sig=float(np.mean(_SIG_FIT(p835[:, 0]))),
        bak=float(np.mean(_BAK_FIT(p835[:, 1]))),
        ovrl=float(np.mean(_OVRL_FIT(p835[:, 2]))),
        p808=float(np.mean(p808)),
        distill=distill_mos(samples, METER_RATE),
    )



def _windows(samples: np.ndarray) -> list[np.ndarray]:
    """9.01 s windows one second apart, looping short clips the way DNSMOS was calibrated."""
    while samples.size < WINDOW:
        samples = np.concatenate([samples, samples])
    count = int(np.floor(samples.size / METER_RATE) - WINDOW_SECONDS) + 1
    starts = [i * HOP for i in range(count) if i * HOP + WINDOW <= samples.size]
    return [samples[s : s + WINDOW].astype(np.float32) for s in starts]


def _p808_features(window: np.ndarray, filterbank: np.ndarray) -> np.ndarray:
    """Log-mel frames scaled the way the P.808 model saw them in training: (1, frames, mels)."""
    power = power_spectrogram(window[:-P808_HOP].astype(np.float64), P808_FFT, P808_HOP)
    mel = power @ filterbank.T
    db = 10.0 * np.log10(np.maximum(mel, 1e-10))
    db = np.maximum(db - db.max(), -80.0)
    return ((db + 40.0) / 40.0).astype(np.float32)[None, :, :]


def _run(session: ort.InferenceSession, features: np.ndarray) -> np.ndarray:
    name = session.get_inputs()[0].name
    return session.run(None, {name: features})[0]
