"""Precision: casts, torchao quantization on CPU, recorded fallbacks, and byte counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lab.engine import load_lm
from lab.quant import PrecisionError, apply_precision, unsupported_reason, weight_bytes


def _reference():
    lm, cfg = load_lm("dummy", shape="tiny-llama", seed=11)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (2, 24), generator=gen)
    positions = torch.arange(24).expand(2, 24)
    with torch.no_grad():
        return lm, tokens, positions, lm(tokens, positions)


def _agreement(lm, tokens, positions, ref):
    with torch.no_grad():
        out = lm(tokens, positions)
    rel = ((out.float() - ref).norm() / ref.norm()).item()
    top1 = (out.argmax(-1) == ref.argmax(-1)).float().mean().item()
    return rel, top1


@pytest.mark.parametrize("quant", ["int8-weight", "int8-dynamic"])
def test_int8_on_cpu_stays_close_and_shrinks_weights(quant):
    lm, tokens, positions, ref = _reference()
    fp32_bytes = weight_bytes(lm)
    result = apply_precision(lm, "fp32", quant, "cpu")
    assert result.applied == quant and result.fallbacks == []
    rel, top1 = _agreement(lm, tokens, positions, ref)
    assert rel < 0.05 and top1 >= 0.9
    embed_bytes = lm.embed.weight.numel() * 4
    linear_fp32 = fp32_bytes - embed_bytes - 4 * lm.cfg.dim * (2 * lm.cfg.n_layers + 1)
    # int8 data is a quarter of fp32; per-row scales add a little on top.
    assert result.weight_bytes < fp32_bytes - 0.7 * linear_fp32
    assert result.weight_bytes == weight_bytes(lm)


@pytest.mark.parametrize(
    ("quant", "applied", "why"),
    [("int4-weight", "int8-weight", "CUDA"), ("fp8", "int8-dynamic", "8.9")],
)
def test_unsupported_modes_fall_back_and_say_why(quant, applied, why):
    lm, tokens, positions, ref = _reference()
    result = apply_precision(lm, "fp32", quant, "cpu")
    assert result.applied == applied
    assert any(quant in f and why in f for f in result.fallbacks)
    assert any(f"requested {quant}, applied {applied}" in f for f in result.fallbacks)
    rel, top1 = _agreement(lm, tokens, positions, ref)
    assert rel < 0.05 and top1 >= 0.9


def test_casting_halves_bytes_and_keeps_rope_accurate():
    lm, tokens, positions, ref = _reference()
    fp32_bytes = weight_bytes(lm)
    result = apply_precision(lm, "bf16", "none", "cpu")
    assert result.applied == "none" and result.weight_bytes == fp32_bytes // 2
    assert lm.embed.weight.dtype == torch.bfloat16
    rel, top1 = _agreement(lm, tokens, positions, ref)
    assert rel < 0.05 and top1 >= 0.9
    # Back up: the family's after-cast hook rebuilds the rotary tables exactly.
    apply_precision(lm, "fp32", "none", "cpu", after_cast=lambda m: m.reset_rope())
    fresh, *_ = _reference()
    assert torch.equal(lm.rope_cos, fresh.rope_cos)


def test_weight_bytes_counts_quantized_storage():
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = nn.Sequential(nn.Linear(256, 128, bias=False))
    assert weight_bytes(model) == 256 * 128 * 4
    quantize_(model, Int8WeightOnlyConfig())
    per_row = 4 + 1  # an fp32 scale and an int8 zero point per output row
    assert weight_bytes(model) == 256 * 128 + 128 * per_row


def test_capability_reasons_on_cpu():
    cpu = torch.device("cpu")
    assert unsupported_reason("int8-weight", cpu, torch.float32) is None
    assert "CUDA" in unsupported_reason("int4-weight", cpu, torch.bfloat16)
    assert "8.9" in unsupported_reason("fp8", cpu, torch.bfloat16)


def test_bad_names_raise_and_leave_the_model_alone():
    lm, *_ = _reference()
    before = lm.embed.weight.clone()
    with pytest.raises(PrecisionError, match="dtype 'fp64'"):
        apply_precision(lm, "fp64", "none", "cpu")
    with pytest.raises(PrecisionError, match="quant 'int2'"):
        apply_precision(lm, "bf16", "int2", "cpu")
    assert lm.embed.weight.dtype == torch.float32 and torch.equal(lm.embed.weight, before)


def test_int8_dynamic_keeps_a_head_whose_rows_are_not_a_multiple_of_8():
    """torch._int_mm needs multiples of 8; Orpheus's 156,940-row head is not one."""
    from torch import nn

    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 302))
    result = apply_precision(model, "fp32", "int8-dynamic", "cpu")
    assert result.applied == "int8-dynamic"
    assert result.skipped == ["1 [302x64] kept unquantized"]
    assert type(model[1].weight) is nn.Parameter
    assert type(model[0].weight) is not nn.Parameter
