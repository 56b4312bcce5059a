"""The default voice end to end: batching, streaming, metrics, seeds and bad input."""

import numpy as np
import pytest

from lab.config import ConfigError, PipelineConfig
from lab.frontend import TextError
from lab.metrics.events import events
from lab.pipeline import Pipeline

TEXTS = [
    "A short one.",
    "This line is a good deal longer than the first, so the batch needs padding.",
    "Two sentences here. The second one follows after a pause.",
]


def test_batched_synthesis_equals_one_by_one(voice_pipeline):
    singles = [voice_pipeline.synthesize(t).audio for t in TEXTS]
    batched = Pipeline(voice_pipeline.config.replace(batch_size=4))
    together = [s.audio for s in batched.synthesize_batch(TEXTS)]
    for alone, joint in zip(singles, together, strict=True):
        assert alone.shape == joint.shape
        np.testing.assert_allclose(joint, alone, atol=2e-4)


def test_audio_is_speech_length_and_not_silent(voice_pipeline):
    result = voice_pipeline.synthesize(TEXTS[1])
    assert result.sample_rate == 22050
    assert 2.0 < result.metrics.audio_seconds < 8.0
    assert np.sqrt(np.mean(result.audio**2)) > 0.02
    assert np.abs(result.audio).max() <= 1.0


def test_metrics_are_consistent(voice_pipeline):
    before = len(events.recent(kind="synthesis"))
    m = voice_pipeline.synthesize(TEXTS[0]).metrics
    assert set(m.stages) == {"text_to_tokens", "encode", "durations_flow", "vocoder", "to_cpu"}
    assert all(v >= 0 for v in m.stages.values())
    assert sum(m.stages.values()) <= m.total_ms * 1.05
    assert m.rtf == pytest.approx(m.total_ms / 1000 / m.audio_seconds)
    assert m.peak_memory_mb > 0
    assert len(events.recent(kind="synthesis")) == before + 1


def test_streaming_delivers_first_audio_before_the_end(voice_pipeline):
    pipe = Pipeline(voice_pipeline.config.replace(stream=True, decode_interval=16))
    chunks = list(pipe.stream(TEXTS[1]))
    assert len(chunks) >= 3
    assert chunks[0].elapsed_ms < chunks[-1].elapsed_ms
    assert [c.index for c in chunks] == list(range(len(chunks)))
    result = pipe.synthesize(TEXTS[1])
    assert result.metrics.ttfb_ms < result.metrics.total_ms


def test_same_seed_same_audio_other_seed_differs(voice_pipeline):
    a = voice_pipeline.synthesize(TEXTS[0]).audio
    b = voice_pipeline.synthesize(TEXTS[0]).audio
    np.testing.assert_array_equal(a, b)
    other = Pipeline(voice_pipeline.config.replace(seed=5)).synthesize(TEXTS[0]).audio
    n = min(len(a), len(other))
    assert not np.allclose(a[:n], other[:n], atol=1e-3)


def test_bad_text_gives_clear_errors_and_the_pipeline_still_works(voice_pipeline):
    for bad in ["", "   \n\t", "?!... ---", "x" * 6000]:
        with pytest.raises(TextError):
            voice_pipeline.synthesize(bad)
    assert len(voice_pipeline.synthesize("Still fine.").audio) > 0


def test_bf16_runs_and_stays_close_to_fp32(voice_pipeline):
    """This medium-set sentence collapsed to one frame when durations were computed in bf16."""
    from lab.frontend import sentence_set
    from lab.quality.fidelity import mel_cepstral_distortion

    text = sentence_set("medium")[3]
    reference = voice_pipeline.synthesize(text)
    bf16_pipe = Pipeline(voice_pipeline.config.replace(dtype="bf16"))
    bf16 = bf16_pipe.synthesize(text)
    assert bf16.audio.dtype == np.float32
    assert bf16.metrics.audio_seconds == pytest.approx(reference.metrics.audio_seconds, rel=0.05)
    assert mel_cepstral_distortion(bf16.audio, reference.audio, 22050) < 4.0
    assert any("dp kept in fp32" in note and "duration predictor" in note
               for note in bf16_pipe.fallbacks)


def test_cuda_on_a_cpu_machine_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        Pipeline(PipelineConfig(device="cuda"))


def test_warm_up_runs_at_load_on_the_request_paths_and_stays_out_of_request_timings(
        monkeypatch):
    """What warm-up costs (here a deliberate 1 s, standing in for a compile) is paid while the
    pipeline is built and reported in `startup`; a request's timings cover only that request."""
    import time

    from lab.models.piper_backend import PiperBackend

    seen = []
    original = PiperBackend.warm_up

    def slow_warm_up(self, texts):
        seen.extend(texts)
        time.sleep(1.0)
        original(self, texts)

    monkeypatch.setattr(PiperBackend, "warm_up", slow_warm_up)
    pipe = Pipeline(PipelineConfig(device="cpu", stream=True, decode_interval=12))
    assert len(seen) == 2 and len(seen[0]) < len(seen[1])
    assert pipe.startup["warmup_ms"] >= 1000 and pipe.startup["load_ms"] > 0
    started = time.perf_counter()
    first = pipe.synthesize("Hi there.")
    assert first.metrics.total_ms <= (time.perf_counter() - started) * 1e3
    assert len(seen) == 2
