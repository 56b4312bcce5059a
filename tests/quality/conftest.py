"""Real speech for the quality meters: a few sentences rendered once by the lab's own voice.

Scoring is the slow part, so the clean and the noisy scores are also computed once per session
and shared by every test that only reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from lab.quality import QualityScores, evaluate

SENTENCES = (
    "We will meet at the station before the morning train leaves.",
    "She opened the window and let the cool air fill the room.",
    "My brother found 12 old coins in the garden last summer.",
)


@dataclass(frozen=True)
class Rendering:
    text: str
    audio: np.ndarray
    sample_rate: int


def buzz(seconds: float = 3.0) -> np.ndarray:
    """A voiced-like glide at 16 kHz with a slow envelope and a little noise: deterministic and
    speech-free, for meters that must score the same signal the same way."""
    t = np.arange(int(seconds * 16000)) / 16000
    f0 = 120 + 20 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / 16000
    voiced = sum(np.sin(k * phase) / k for k in range(1, 30))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 2 * t) ** 2
    noise = np.random.default_rng(0).normal(0, 0.01, t.size)
    return (0.1 * voiced * envelope + noise).astype(np.float32)


def add_noise(audio: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    """White noise at `snr_db` relative to the whole clip's power, clipped back into [-1, 1]."""
    power = float(np.mean(audio.astype(np.float64) ** 2))
    spread = np.sqrt(power / 10 ** (snr_db / 10))
    noise = np.random.default_rng(seed).normal(0.0, spread, audio.size)
    return np.clip(audio + noise, -1.0, 1.0).astype(np.float32)


@pytest.fixture(scope="session")
def renderings(voice_pipeline) -> list[Rendering]:
    """The shared CPU voice from the suite's root conftest, one rendering per sentence."""
    rendered = []
    for text in SENTENCES:
        result = voice_pipeline.synthesize(text)
        rendered.append(Rendering(text, result.audio, result.sample_rate))
    return rendered


@pytest.fixture(scope="session")
def speech(renderings) -> Rendering:
    return renderings[0]


@pytest.fixture(scope="session")
def noisy() -> Callable[..., np.ndarray]:
    return add_noise


@pytest.fixture(scope="session")
def clean_scores(renderings) -> list[QualityScores]:
    return [evaluate(r.audio, r.sample_rate, r.text) for r in renderings]


@pytest.fixture(scope="session")
def noisy_scores(speech) -> QualityScores:
    """The first sentence under white noise at 0 dB SNR, scored against its clean rendering."""
    degraded = add_noise(speech.audio, 0.0)
    return evaluate(degraded, speech.sample_rate, speech.text, reference=speech.audio)
