"""The estimate before loading: memory from shapes, time from measured rates, and the verdict.

Sizes are checked against the real tiny LM and the real voice once loaded; verdicts that depend
on how much memory a machine has are checked by setting the available RAM, never by loading a
large model. No test reads a timing's value.
"""

import json

import pytest
import torch

import lab.estimate
from lab.config import ConfigError, PipelineConfig, load_preset
from lab.engine.llm import LM_SHAPES
from lab.estimate import (
    EstimateError,
    Measured,
    RateBook,
    estimate,
    rate_key,
    record_rate,
)

TINY = load_preset("orpheus-tiny-cpu")
GIB = 2**30


def three_b(**changes) -> PipelineConfig:
    """The 3B dummy preset as a CPU user would set it: fp32, batch 32."""
    return load_preset("orpheus-3b-dummy-gpu", **{"device": "cpu", "dtype": "fp32",
                                                   "batch_size": 32, **changes})


def with_ram(monkeypatch, gib: float) -> None:
    monkeypatch.setattr(lab.estimate, "host_available", lambda: int(gib * GIB))


def kv_bytes(shape: str, cache_len: int, batch: int, nbytes: int = 4) -> int:
    lm = LM_SHAPES[shape]
    return lm.n_layers * lm.n_kv_heads * lm.head_dim * cache_len * batch * 2 * nbytes


def test_kv_cache_follows_the_formula_and_grows_with_batch_and_cache_length():
    sizes = {b: estimate(TINY.replace(batch_size=b), 80, texts=b) for b in (1, 4, 16)}
    for b, est in sizes.items():  # 280 tokens + 256 of prompt room, capped at the shape's 512
        assert est.kv_cache_bytes == kv_bytes("tiny-llama", 512, b)
    assert sizes[1].activations_bytes < sizes[4].activations_bytes < sizes[16].activations_bytes
    assert sizes[1].total_bytes < sizes[4].total_bytes < sizes[16].total_bytes
    lengths = [estimate(TINY.replace(**{"sampling.max_tokens": n}), 80).kv_cache_bytes
               for n in (50, 200, 400)]
    # 50 + 256 and 200 + 256 positions; 400 + 256 is capped at the shape's 512.
    assert lengths == [kv_bytes("tiny-llama", n, 4) for n in (306, 456, 512)]
    assert estimate(TINY.replace(kv_cache="none"), 80).kv_cache_bytes < lengths[0]


def test_weights_are_counted_at_the_run_dtype_and_quant():
    fp32, bf16 = (estimate(three_b(dtype=d), 100) for d in ("fp32", "bf16"))
    lm = LM_SHAPES["orpheus-3b"]
    rope = 2 * lm.max_seq_len * lm.head_dim
    assert fp32.weights_bytes == (lm.n_params + rope) * 4
    assert bf16.weights_bytes == (lm.n_params + rope) * 2
    assert estimate(three_b(dtype="fp16"), 100).weights_bytes == bf16.weights_bytes
    int8 = estimate(three_b(quant="int8-weight"), 100)
    assert lm.n_params < int8.weights_bytes < 0.4 * fp32.weights_bytes
    int4 = estimate(three_b(dtype="bf16", quant="int4-weight"), 100)
    assert int4.weights_bytes == estimate(three_b(dtype="bf16", quant="int8-weight"),
                                          100).weights_bytes
    assert any("int4-weight would fall back" in note for note in int4.notes)


def test_sizes_match_the_loaded_tiny_lm_and_the_loaded_voice(voice_pipeline):
    from lab.pipeline import Pipeline
    from lab.quant.precision import weight_bytes

    cfg = TINY.replace(**{"sampling.max_tokens": 28})
    est = estimate(cfg, 40)
    pipe = Pipeline(cfg)
    try:
        lm = pipe.model
        rope = sum(b.numel() * b.element_size() for b in lm.buffers())
        assert est.weights_bytes == pipe.weight_bytes + rope
        assert est.kv_cache_bytes == pipe.backend.kv_cache.nbytes
        assert est.codec_bytes == weight_bytes(pipe.backend.tts.codec.model)
    finally:
        pipe.close()
    voice = estimate(voice_pipeline.config, 40)
    assert voice.weights_bytes + voice.codec_bytes == voice_pipeline.weight_bytes
    assert voice.codec_bytes == weight_bytes(voice_pipeline.model.dec)
    assert voice.kv_cache_bytes == 0


def test_an_ar_3b_at_batch_32_is_refused_with_its_numbers_on_a_24_gb_machine(monkeypatch):
    with_ram(monkeypatch, 20)
    est = estimate(three_b(), 200)
    assert est.verdict == "refuse" and est.available_bytes == 20 * GIB
    assert est.total_bytes > 20 * GIB > est.weights_bytes
    for figure in (est.total_bytes, est.weights_bytes, est.kv_cache_bytes, est.available_bytes):
        assert f"{figure / GIB:.1f} GiB" in est.reason
    assert "batch_size" in est.reason
    assert "refuse" in est.summary() and f"{est.total_bytes / GIB:.1f} GiB" in est.markdown()
    small = estimate(three_b(batch_size=1, dtype="bf16"), 200)
    assert small.verdict != "refuse" and small.total_bytes < 10 * GIB
    with_ram(monkeypatch, 0.5)
    assert estimate(TINY, 200).verdict != "refuse"


def test_a_text_over_max_chars_is_refused():
    est = estimate(TINY.replace(max_chars=100), 101)
    assert est.verdict == "refuse" and "max_chars=100" in est.reason


def test_a_loaded_pipeline_counts_only_what_is_to_come(monkeypatch):
    with_ram(monkeypatch, 20)
    est = estimate(three_b(), 200, loaded=True)
    assert est.loaded and est.load_s == 0 and est.verdict != "refuse"
    with_ram(monkeypatch, est.activations_bytes / GIB / 2)
    refused = estimate(three_b(), 200, loaded=True)
    assert refused.verdict == "refuse" and "activations" in refused.reason


def test_the_rate_book_round_trips_and_a_recorded_rate_replaces_the_first_guess(
        tmp_path, voice_pipeline):
    cfg, text = voice_pipeline.config, "The rate book learns from every real run."
    before = estimate(cfg, len(text), rates_dir=tmp_path)
    assert before.first_guess and "first guess" in before.basis
    result = voice_pipeline.synthesize(text)
    rates = record_rate(cfg, result, rates_dir=tmp_path, startup=voice_pipeline.startup)
    m = result.metrics
    assert rates["rtf"] == pytest.approx(m.total_ms / 1000 / m.audio_seconds)
    assert rates["audio_s_per_char"] == pytest.approx(m.audio_seconds / len(text))
    after = estimate(cfg, len(text), rates_dir=tmp_path)
    assert not after.first_guess and after.basis.startswith("measured")
    assert after.audio_s == pytest.approx(m.audio_seconds)
    assert after.synth_s == pytest.approx(m.total_ms / 1000)
    startup = voice_pipeline.startup
    assert after.load_s == pytest.approx((startup["load_ms"] + startup["warmup_ms"]) / 1000)
    book = json.loads((tmp_path / "rates.json").read_text())
    key = rate_key(cfg, torch.device("cpu"))
    assert set(book["rates"][key]) == {"rtf", "audio_s_per_char", "load_s", "warmup_s"}
    assert RateBook(tmp_path).rates(key) == rates
    other = estimate(cfg.replace(batch_size=2), len(text), rates_dir=tmp_path)
    assert other.first_guess


def test_the_book_keeps_the_last_samples_and_reads_their_median(tmp_path):
    cfg = TINY
    for rtf in (9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 100.0):
        rates = record_rate(cfg, Measured(chars=10, synth_s=rtf, audio_s=1.0),
                            rates_dir=tmp_path)
    assert rates["rtf"] == 4.0  # median of the last five: 2, 3, 4, 5, 100
    assert "audio_s_per_char" not in rates  # random weights say nothing about speech rate
    assert "load_s" not in rates
    est = estimate(cfg, 10, rates_dir=tmp_path)
    assert est.synth_s == pytest.approx(4.0 * est.audio_s)
    assert est.first_guess and "load" in est.basis  # load was never measured


def test_bad_input_gives_a_clear_error(tmp_path):
    for chars, match in ((0, "chars=0"), (-3, "chars=-3"), (True, "chars=True"),
                         ("10", "chars='10'")):
        with pytest.raises(EstimateError, match=match):
            estimate(TINY, chars)
    with pytest.raises(EstimateError, match="texts=0"):
        estimate(TINY, 10, texts=0)
    with pytest.raises(EstimateError, match="needs a PipelineConfig"):
        estimate({"family": "orpheus"}, 10)
    with pytest.raises(EstimateError, match="not a known LM shape.*tiny-llama"):
        estimate(TINY.replace(model="tiny-lama"), 10)
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(EstimateError, match="is a file"):
        estimate(TINY, 10, rates_dir=afile)
    (tmp_path / "rates.json").write_text("{not json")
    with pytest.raises(EstimateError, match="unreadable.*delete it"):
        estimate(TINY, 10, rates_dir=tmp_path)
    with pytest.raises(EstimateError, match="at least one result"):
        record_rate(TINY, [], rates_dir=tmp_path / "fresh")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            estimate(TINY, 10, device="cuda")


def test_summary_and_markdown_carry_the_figures_and_the_verdict():
    est = estimate(TINY, 120)
    first, second = est.summary().splitlines()
    assert first.startswith("estimate on cpu:") and "KV cache" in first and "load" in first
    assert second.startswith(f"{est.verdict}: ")
    md = est.markdown()
    assert "| KV cache |" in md and f"**{est.verdict}**" in md and "first guess" in md
    assert est.to_dict()["kv_cache_bytes"] == est.kv_cache_bytes


def test_each_family_sizes_itself_and_the_estimate_imports_no_family_until_asked():
    import subprocess
    import sys

    from lab.models.registry import FAMILIES, backend_class

    for name in FAMILIES:
        assert callable(backend_class(name).size), f"{name} declares no sizer"
    script = ("import sys, lab.estimate; "
              "print(sorted(m for m in sys.modules if m.startswith('lab.models.') "
              "and m.endswith(('_backend', '_sizing'))))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"
