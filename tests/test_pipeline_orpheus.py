"""The Orpheus family through the same Pipeline API, on a tiny random LM and codec."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from lab.config import load_preset
from lab.device import native_bf16
from lab.frontend import TextError
from lab.pipeline import Pipeline, drain

TEXTS = ["First line.", "A second line that is longer.", "Third. With two sentences."]


@pytest.fixture(scope="module")
def orpheus():
    return Pipeline(load_preset("orpheus-tiny-cpu"))


def test_memory_facts_report_the_kv_cache_per_slot(orpheus):
    facts = orpheus.memory_facts()
    assert "MiB per slot x 4 slots" in facts["KV cache"]
    assert float(facts["weights"].split()[0]) > 0


def test_dummy_weights_are_announced(orpheus):
    assert any("noise, not speech" in note for note in orpheus.fallbacks)
    assert orpheus.sample_rate == 24000


def test_batch_equals_one_by_one_with_seeds(orpheus):
    alone = [orpheus.synthesize_batch([t])[0].audio for t in TEXTS]
    together = [s.audio for s in orpheus.synthesize_batch(TEXTS)]
    assert all(len(a) > 0 for a in together)
    for a, b in zip(alone, together, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_metrics_include_tokens_and_engine_stages(orpheus):
    result = orpheus.synthesize(TEXTS[1])
    m = result.metrics
    assert m.tokens_per_second is not None and m.tokens_per_second > 0
    assert {"text_to_tokens", "lm_step", "codec"} <= set(m.stages)
    assert m.ttfb_ms <= m.total_ms


def test_streaming_yields_chunks_and_returns_the_synthesis(orpheus):
    stream = orpheus.stream(TEXTS[0])
    chunks = []
    while True:
        try:
            chunks.append(next(stream))
        except StopIteration as done:
            result = done.value
            break
    assert chunks and all(c.sample_rate == 24000 for c in chunks)
    assert len(result.audio) == sum(len(c.audio) for c in chunks)


def held(pipe: Pipeline) -> dict[str, int]:
    """What the pipeline keeps between streams, by what keeps it."""
    tts = pipe.backend.tts
    return {"notes": len(pipe.fallbacks), "utterances": len(tts.utterances),
            "requests": len(tts.engine.requests), "streams": len(tts.decoder.streams),
            "decodes": len(tts.decoder._pending) + len(tts.decoder._spans),
            "parked": len(pipe._worker._parked)}


def test_what_streams_leave_behind_does_not_grow_with_the_streams_served():
    """A server runs for days, so once its streams have ended the pipeline holds what it held
    after the first few, however many it has served since and whatever they ran into (here
    every one runs to its token limit, which the pipeline notes)."""
    pipe = Pipeline(load_preset("orpheus-tiny-cpu", sampling={"max_tokens": 21}))
    constraint = pipe.backend.tts.engine.runner.logits_processor
    constraint.allow_stop = False
    constraint._tables.clear()

    def serve_round() -> None:
        with ThreadPoolExecutor(3) as pool:
            ends = list(pool.map(lambda text: drain(pipe.stream(text))[1], TEXTS))
        assert all(len(end.audio) for end in ends)

    serve_round()
    first = held(pipe)
    for _ in range(3):
        serve_round()
    assert held(pipe) == first
    assert first["utterances"] == first["requests"] == first["streams"] == first["parked"] == 0
    pipe.close()


def test_bad_text_is_refused_and_the_engine_keeps_working(orpheus):
    with pytest.raises(TextError):
        orpheus.synthesize("   ")
    assert orpheus.synthesize("Still here.").metrics.total_ms > 0


def test_an_unknown_model_name_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"'tiny-lama' is not a known LM shape.*'tiny-llama'"):
        Pipeline(load_preset("orpheus-tiny-cpu", model="tiny-lama"))


@pytest.fixture(scope="module")
def greedy_by_cache():
    """The tiny Orpheus pipeline once per `kv_cache` mode, greedy, a few frames per sentence."""
    return {mode: Pipeline(load_preset("orpheus-tiny-cpu", kv_cache=mode,
                                       sampling={"temperature": 0.0, "max_tokens": 42}))
            for mode in ("static", "dynamic", "none")}


def test_every_kv_cache_mode_makes_the_same_audio_through_the_pipeline(greedy_by_cache):
    results = {mode: pipe.synthesize_batch(TEXTS) for mode, pipe in greedy_by_cache.items()}
    caches = {mode: type(pipe.backend.kv_cache).__name__ for mode, pipe in greedy_by_cache.items()}
    assert caches == {"static": "StaticKVCache", "dynamic": "SlotDynamicCache",
                      "none": "NoKVCache"}
    assert sum(r.audio.size for r in results["static"]) > 0  # greedy noise may stop at once
    for mode in ("dynamic", "none"):
        for ours, static in zip(results[mode], results["static"], strict=True):
            assert ours.audio.shape == static.audio.shape
            np.testing.assert_allclose(ours.audio, static.audio, atol=1e-4)
    stats = {mode: pipe.backend.tts.engine.stats for mode, pipe in greedy_by_cache.items()}
    assert stats["dynamic"].decode_tokens == stats["dynamic"].active_rows  # one token a row
    assert stats["none"].decode_tokens > 10 * stats["dynamic"].decode_tokens  # whole prefixes


def test_memory_facts_tell_each_kv_cache_mode_truthfully(greedy_by_cache):
    facts = {mode: pipe.memory_facts()["KV cache"] for mode, pipe in greedy_by_cache.items()}
    assert facts["static"].startswith("static, ") and "per slot x 4 slots" in facts["static"]
    assert facts["dynamic"].startswith("dynamic, grows per step: ")
    assert "MiB in use now" in facts["dynamic"] and facts["dynamic"].endswith("MiB at most so far")
    peak = float(facts["dynamic"].split("now, ")[1].split()[0])
    assert peak > 0  # the requests that ran grew it, though they have all finished
    assert facts["none"] == "none: no KV cache; each step recomputes the prefix"


@pytest.fixture(scope="module")
def greedy_by_serving_knobs():
    """The tiny Orpheus pipeline, greedy, plain and with each serving knob of the engine."""
    knobs = {"plain": {}, "prefix": {"prefix_cache": True}, "mixed": {"mixed_prefill": 8},
             "fp8": {"kv_dtype": "fp8-e4m3"}, "side": {"codec_side_stream": True},
             "grow": {"max_decode_interval": 8, "grow_lead_ms": 100.0},
             "codec_bf16": {"codec_dtype": "bf16"},
             "first": {"first_chunk_frames": 3},
             "wait": {"first_chunk_frames": 2, "first_chunk_wait": 2},
             "admit": {"admit_lead_ms": 150.0, "admit_round_ms": 5.0}}
    return {name: Pipeline(load_preset("orpheus-tiny-cpu", **extra,
                                       sampling={"temperature": 0.0, "max_tokens": 42}))
            for name, extra in knobs.items()}


def test_prefix_cache_and_carried_prompts_act_and_leave_the_audio_alone(greedy_by_serving_knobs):
    pipes = greedy_by_serving_knobs
    texts = [*TEXTS, "Four.", "Five is here.", "And six."]  # more sentences than slots
    results = {name: pipes[name].synthesize_batch(texts) for name in ("plain", "prefix", "mixed")}
    for name in ("prefix", "mixed"):
        for ours, plain in zip(results[name], results["plain"], strict=True):
            assert ours.audio.shape == plain.audio.shape
            np.testing.assert_allclose(ours.audio, plain.audio, atol=1e-4)
    stats = {name: pipe.backend.tts.engine.stats for name, pipe in pipes.items()}
    assert stats["prefix"].cached_prefix_tokens > 0
    assert stats["plain"].cached_prefix_tokens == 0
    assert (stats["prefix"].prefill_tokens + stats["prefix"].cached_prefix_tokens
            == stats["plain"].prefill_tokens)
    assert stats["mixed"].carried_prefill_tokens > 0
    assert stats["plain"].carried_prefill_tokens == 0
    assert "8 voice prefixes" in pipes["prefix"].memory_facts()["Prefix cache"]
    assert "Prefix cache" not in pipes["plain"].memory_facts()


def test_fp8_kv_storage_acts_through_the_pipeline(greedy_by_serving_knobs):
    pipe = greedy_by_serving_knobs["fp8"]
    assert "in fp8 with a scale per head vector" in pipe.memory_facts()["KV cache"]
    assert pipe.backend.kv_cache.k.dtype == torch.float8_e4m3fn
    assert not any("kv_dtype" in note for note in pipe.fallbacks)
    before = pipe.backend.tts.engine.stats.generated
    pipe.synthesize_batch(TEXTS)  # greedy noise may stop at once: count tokens, not audio
    assert pipe.backend.tts.engine.stats.generated > before


def test_codec_side_stream_reaches_the_decoder_and_says_where_it_cannot_act(
        greedy_by_serving_knobs):
    pipe, plain = greedy_by_serving_knobs["side"], greedy_by_serving_knobs["plain"]
    on_gpu = pipe.device.type == "cuda"
    assert (pipe.backend.tts.decoder._side is not None) == on_gpu
    notes = [n for n in pipe.fallbacks if "codec side stream" in n]
    assert notes == ([] if on_gpu else [
        "a codec side stream needs a CUDA device; the codec is on cpu and decodes between "
        "decode steps"])
    assert not any("codec side stream" in n for n in plain.fallbacks)
    ours, theirs = pipe.synthesize(TEXTS[1]), plain.synthesize(TEXTS[1])
    np.testing.assert_allclose(ours.audio, theirs.audio, atol=1e-4)


def test_a_rush_lead_reaches_the_decoder_and_changes_only_the_chunk_seams():
    """A rush lead longer than any utterance rushes every chunk it can: each goes out as soon
    as its frame has one frame of right context instead of two, so the tokens (seeded) and the
    audio's length are the plain pipeline's, and its samples differ a little at the seams."""
    pipes = [Pipeline(load_preset("orpheus-tiny-cpu", rush_lead_ms=rush,
                                  sampling={"max_tokens": 140})) for rush in (5000.0, 0.0)]
    assert [p.backend.tts.decoder.window.rush_s for p in pipes] == [5.0, 0.0]
    ours, theirs = (p.synthesize(TEXTS[1]).audio for p in pipes)
    assert ours.shape == theirs.shape and len(ours) > 4 * pipes[0].backend.tts.codec.frame_samples
    error = np.sum((ours - theirs) ** 2)
    assert error > 0
    assert 10 * np.log10(np.sum(theirs ** 2) / error) > 20


def test_growing_chunks_reach_the_decoder_and_leave_the_audio_alone(greedy_by_serving_knobs):
    """Whether a chunk grows depends on how far generation runs ahead of playback on this
    machine; whatever sizes it took, the audio is the fixed-size chunks' audio, from no more
    codec windows (`tests/models/test_snac_codec.py` pins the sizes with a test clock)."""
    pipe, plain = greedy_by_serving_knobs["grow"], greedy_by_serving_knobs["plain"]
    window = pipe.backend.tts.decoder.window
    assert (window.hop, window.max_hop, window.hops) == (1, 8, (1, 2, 4, 8))
    assert (window.guard_s, plain.backend.tts.decoder.window.guard_s) == (0.1, 0.25)
    before = [p.backend.tts.decoder.decoded_windows for p in (pipe, plain)]
    ours, theirs = pipe.synthesize(TEXTS[2]), plain.synthesize(TEXTS[2])
    np.testing.assert_allclose(ours.audio, theirs.audio, atol=1e-4)
    grown, fixed = (p.backend.tts.decoder.decoded_windows - b
                    for p, b in zip((pipe, plain), before, strict=True))
    assert 0 < grown <= fixed


def test_holding_admission_reaches_the_engine_and_leaves_the_audio_alone(
        greedy_by_serving_knobs):
    """Whether a stream is held depends on this machine's speed against playback; held or not,
    every sentence gets the audio it gets without the knob (`tests/models/test_orpheus.py`
    pins the holding itself with a test clock)."""
    pipe, plain = greedy_by_serving_knobs["admit"], greedy_by_serving_knobs["plain"]
    assert (pipe.backend.tts.admit_lead_s, plain.backend.tts.admit_lead_s) == (0.15, 0.0)
    assert (pipe.backend.tts.admit_round_s, plain.backend.tts.admit_round_s) == (0.005, 0.0)
    texts = [*TEXTS, "Four.", "Five is here.", "And six."]  # more sentences than slots
    for ours, theirs in zip(pipe.synthesize_batch(texts), plain.synthesize_batch(texts),
                            strict=True):
        np.testing.assert_allclose(ours.audio, theirs.audio, atol=1e-4)


def test_the_codec_runs_in_its_own_precision_and_only_the_codec_rounds(greedy_by_serving_knobs):
    """The same greedy tokens decoded by a bf16 SNAC: audio of the same length, close to the
    fp32 codec's but not equal to it, so the knob reached the codec and the LM kept fp32."""
    pipe, plain = greedy_by_serving_knobs["codec_bf16"], greedy_by_serving_knobs["plain"]
    codecs = [p.backend.tts.codec for p in (pipe, plain)]
    assert [c.dtype for c in codecs] == [torch.bfloat16, torch.float32]
    assert {next(c.model.parameters()).dtype for c in codecs} == {torch.bfloat16, torch.float32}
    assert next(pipe.backend.tts.engine.runner.model.parameters()).dtype == torch.float32
    assert (pipe.resolved.codec_dtype, plain.resolved.codec_dtype) == ("bf16", "auto")
    slow = [n for n in pipe.fallbacks if n.startswith("codec_dtype=bf16: ")]
    assert bool(slow) is not native_bf16(pipe.device)  # emulated bf16 is named, as for the LM
    text = "Three short words."  # random greedy weights give this one 6 frames of audio
    ours, theirs = pipe.synthesize(text), plain.synthesize(text)
    assert ours.audio.dtype == theirs.audio.dtype == np.float32
    assert ours.audio.shape == theirs.audio.shape and len(ours.audio)
    error = ours.audio - theirs.audio
    assert np.abs(error).max() > 0
    snr_db = 10 * np.log10(np.sum(theirs.audio ** 2) / np.sum(error ** 2))
    assert snr_db > 20, snr_db


@pytest.mark.parametrize(("knobs", "frames", "ready"), [("first", 3, 3), ("wait", 2, 2)])
def test_the_first_chunks_knobs_reach_the_decoder(greedy_by_serving_knobs, knobs, frames, ready):
    """The first chunk leaves once `ready` frames exist and carries `frames` of them, where the
    plain pipeline's carries one after three; the audio has the same length. ("first": three
    frames after the same number of tokens; "wait": two frames, one frame's tokens sooner.)"""
    pipe, plain = greedy_by_serving_knobs[knobs], greedy_by_serving_knobs["plain"]
    assert pipe.backend.tts.decoder.window.ready == ready
    text, frame = "Three short words.", pipe.backend.tts.codec.frame_samples
    ours, theirs = (list(p.stream(text)) for p in (pipe, plain))
    assert len(ours[0].audio) == frames * frame and len(theirs[0].audio) == frame
    assert sum(map(len, (c.audio for c in ours))) == sum(map(len, (c.audio for c in theirs)))
