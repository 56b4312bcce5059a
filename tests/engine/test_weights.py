"""Loading: checkpoint names, dummy weights, the meta device, and clear errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from lab.engine import LM_SHAPES, WeightsError, load_lm
from lab.engine.weights import config_from_hf, hf_to_lm, lm_to_hf
from lab.quant import weight_bytes


def test_dummy_weights_are_seeded_and_flagged():
    a, cfg = load_lm("dummy", shape="tiny-llama", seed=1)
    b, _ = load_lm("dummy", shape="tiny-llama", seed=1)
    c, _ = load_lm("dummy", shape="tiny-llama", seed=2)
    assert a.is_dummy and cfg == LM_SHAPES["tiny-llama"]
    assert torch.equal(a.lm_head.weight, b.lm_head.weight)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    assert torch.equal(a.norm.weight, torch.ones(cfg.dim))
    assert not a.training and not any(p.requires_grad for p in a.parameters())


def test_orpheus_shape_on_meta_allocates_nothing():
    lm, cfg = load_lm("dummy", shape="orpheus-3b", dtype="bf16", device="meta")
    assert lm.is_dummy and lm.embed.weight.is_meta
    assert weight_bytes(lm) == 2 * cfg.n_params
    streamed = weight_bytes(lm) - 2 * cfg.vocab_size * cfg.dim  # the embedding is only gathered
    assert 6.5e9 < streamed < 6.7e9


def test_state_names_round_trip():
    lm, cfg = load_lm("dummy", shape="tiny-qwen2")
    ours = lm.state_dict()
    back = hf_to_lm(lm_to_hf(ours, cfg), cfg)
    assert set(back) == set(ours)
    for name, t in ours.items():
        assert torch.equal(back[name], t), name


def test_old_style_config_with_llama3_scaling():
    cfg = config_from_hf({
        "model_type": "llama", "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 32,
        "rope_theta": 500000.0, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    })
    assert cfg.rope_scaling.factor == 32.0 and cfg.rope_base == 500000.0
    assert cfg.max_seq_len == 8192 and not cfg.qkv_bias


def test_unsupported_checkpoints_are_named(tmp_path):
    with pytest.raises(WeightsError, match="model_type 'gpt2'"):
        config_from_hf({"model_type": "gpt2"})
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16,
    }))
    with pytest.raises(WeightsError, match="no \\*.safetensors"):
        load_lm(str(tmp_path))
    save_file({"model.embed_tokens.weight": torch.zeros(10, 8)}, str(tmp_path / "m.safetensors"))
    with pytest.raises(WeightsError, match="lacks"):
        load_lm(str(tmp_path))


def test_missing_sources_give_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(WeightsError, match="need a shape"):
        load_lm("dummy")
    with pytest.raises(WeightsError, match="not a known LM shape"):
        load_lm("dummy", shape="gpt-9")
    with pytest.raises(WeightsError, match="no config.json"):
        load_lm(str(tmp_path))
    with pytest.raises(WeightsError, match="neither"):
        load_lm(str(tmp_path / "nope" / "deeper"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # never download, even if reachable
    with pytest.raises(WeightsError, match="'lab-tests/no-such-model'.*local directory"):
        load_lm("lab-tests/no-such-model")
    with pytest.raises(WeightsError, match="dtype"):
        load_lm("dummy", shape="tiny-llama", dtype="fp64")


def test_a_dummy_model_too_big_for_free_ram_is_refused_with_numbers(monkeypatch):
    import psutil

    from lab.engine.weights import dummy_lm

    class Tight:
        available = 2 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Tight)
    with pytest.raises(WeightsError, match=r"needs 14\.1 GiB .* only 2\.0 GiB .*tiny-llama"):
        dummy_lm("orpheus-3b", torch.float32, "cpu")
    assert dummy_lm("tiny-llama", torch.float32, "cpu").is_dummy
