"""Windowed streaming of the vocoder against one-shot decoding of the same latents."""

import numpy as np
import pytest
import torch

from lab.config import PipelineConfig
from lab.models.piper_backend import PiperBackend
from lab.stream import Crossfader, plan_windows

TEXT = "Seven green kites rose above the harbour while the tide slowly turned."


def snr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    error = reference - candidate
    return float(10 * np.log10(np.sum(reference**2) / max(np.sum(error**2), 1e-20)))


def boundary_jump(audio: np.ndarray, reference: np.ndarray, boundaries: list[int]) -> float:
    """Largest sample-to-sample step at chunk boundaries beyond what the reference has there.

    A click is a step the one-shot waveform does not have, so the reference's own step at the
    same place is subtracted.
    """
    worst = 0.0
    for b in boundaries:
        lo, hi = max(b - 2, 1), min(b + 2, len(audio))
        ours = np.abs(np.diff(audio[lo - 1 : hi])).max()
        ref = np.abs(np.diff(reference[lo - 1 : hi])).max()
        worst = max(worst, float(ours - ref))
    return worst


def render(backend: PiperBackend, ids: list[int]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    from lab.metrics.timers import RequestMeter, StageTimer

    meter = RequestMeter(StageTimer())
    oneshot = backend.synthesize([ids], [7], meter)[0]
    pieces = list(backend.stream(ids, 7, meter))
    boundaries = list(np.cumsum([len(p) for p in pieces])[:-1])
    return oneshot, np.concatenate(pieces), boundaries


@pytest.fixture(scope="module")
def voice(voice_pipeline):
    return voice_pipeline.backend.voice


def backend_for(voice, **knobs) -> PiperBackend:
    return PiperBackend(voice, PipelineConfig(device="cpu", **knobs), torch.device("cpu"))


def ids_of(voice) -> list[int]:
    from lab.frontend import prepare

    return prepare(TEXT, voice.settings.phoneme_id_map).sentences[0].ids


def test_streamed_audio_equals_one_shot(voice):
    backend = backend_for(voice, decode_interval=16, overlap=12, crossfade_ms=4.0)
    oneshot, streamed, boundaries = render(backend, ids_of(voice))
    assert len(boundaries) >= 3
    assert streamed.shape == oneshot.shape
    snr = snr_db(oneshot, streamed)
    print(f"streamed vs one-shot SNR: {snr:.1f} dB over {len(boundaries) + 1} chunks")
    assert snr > 40.0
    assert boundary_jump(streamed, oneshot, boundaries) < 0.01


def test_click_detector_catches_a_join_without_context(voice):
    """With no overlap and no crossfade each window sees zero padding: the joins click."""
    backend = backend_for(voice, decode_interval=8, overlap=0, crossfade_ms=0.0)
    oneshot, streamed, boundaries = render(backend, ids_of(voice))
    assert snr_db(oneshot, streamed) < 30.0
    assert boundary_jump(streamed, oneshot, boundaries) > 0.01


def test_chunk_work_is_constant_however_long_the_utterance():
    windows = plan_windows(n_frames=1000, interval=20, overlap=10, hop=256, fade=88)
    inner = [w.stop - w.start for w in windows[1:-1]]
    assert set(inner) == {40}
    assert windows[0].first == 0 and windows[-1].last == 1000
    owned = sum(w.last - w.first for w in windows)
    assert owned == 1000


def test_window_plan_rejects_a_fade_longer_than_the_context():
    with pytest.raises(ValueError, match="needs at least"):
        plan_windows(100, interval=10, overlap=0, hop=256, fade=64)


def test_crossfader_is_exact_on_a_continuous_signal():
    signal = np.sin(np.arange(4000) / 25.0).astype(np.float32)
    joiner = Crossfader(100)
    cuts = [(0, 1000), (900, 2500), (2400, 4000)]
    out = [joiner.push(signal[a:b], last=i == 2) for i, (a, b) in enumerate(cuts)]
    np.testing.assert_allclose(np.concatenate(out), signal, atol=1e-6)
