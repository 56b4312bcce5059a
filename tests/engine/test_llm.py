"""Our LM against transformers' Llama and Qwen2 on the same tiny checkpoint, loaded from disk."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from lab.engine import LM, LM_SHAPES, load_lm
from lab.engine.weights import empty_lm


def tiny_hf(kind: str):
    torch.manual_seed(1)
    common = dict(
        vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )
    if kind == "llama":
        cfg = LlamaConfig(
            **common, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        )
        model = LlamaForCausalLM(cfg)
    else:
        cfg = Qwen2Config(**common, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True)
        model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # HF zero-inits biases; give them values so the bias path is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or name.endswith("norm.weight"):
                p.normal_(1.0 if "norm" in name else 0.0, 0.1)
    return model.eval()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def pair(request, tmp_path_factory):
    hf = tiny_hf(request.param)
    path = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(path)
    lm, cfg = load_lm(str(path), dtype="fp32")
    return hf, lm, cfg


def test_logits_match_transformers(pair):
    hf, lm, cfg = pair
    tokens = torch.randint(0, cfg.vocab_size, (2, 90), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(90).expand(2, 90)
    with torch.no_grad():
        ref = hf(tokens).logits
        ours = lm(tokens, positions)
    assert not lm.is_dummy
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours, ref, atol=2e-5, rtol=1e-4)


def test_loaded_config_reads_the_checkpoint(pair):
    hf, lm, cfg = pair
    assert cfg.qkv_bias == isinstance(hf, Qwen2ForCausalLM)
    assert cfg.tie_embeddings == hf.config.tie_word_embeddings
    assert (cfg.rope_scaling is not None) == isinstance(hf, LlamaForCausalLM)
    if cfg.tie_embeddings:
        assert lm.lm_head.weight is lm.embed.weight
    n_hf = sum(p.numel() for p in hf.parameters())
    assert cfg.n_params == n_hf == sum(p.numel() for p in lm.parameters())


def test_last_only_equals_the_last_column():
    lm, cfg = load_lm("dummy", shape="tiny-qwen2")
    tokens = torch.randint(0, cfg.vocab_size, (3, 7))
    positions = torch.arange(7).expand(3, 7)
    with torch.no_grad():
        full = lm(tokens, positions)
        last = lm(tokens, positions, last_only=True)
    torch.testing.assert_close(last, full[:, -1:])


def test_no_cache_attention_is_causal():
    lm, cfg = load_lm("dummy", shape="tiny-llama")
    tokens = torch.randint(0, cfg.vocab_size, (1, 12))
    changed = tokens.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % cfg.vocab_size
    positions = torch.arange(12).unsqueeze(0)
    with torch.no_grad():
        a, b = lm(tokens, positions), lm(changed, positions)
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def test_bad_shapes_are_rejected():
    lm, cfg = load_lm("dummy", shape="tiny-llama")
    with pytest.raises(ValueError, match="tokens and positions"):
        lm(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="rows"):
        lm(torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long),
           rows=torch.zeros(3, dtype=torch.long))


def test_shapes_match_their_published_sizes():
    orpheus = empty_lm(LM_SHAPES["orpheus-3b"], torch.bfloat16, "meta")
    assert isinstance(orpheus, LM)
    n = sum(p.numel() for p in orpheus.parameters())
    assert n == LM_SHAPES["orpheus-3b"].n_params
    assert 3.7e9 < n < 3.9e9  # Llama-3.2-3B body plus an untied 156,940-token head
    spark = LM_SHAPES["spark-0.5b"]
    assert spark.qkv_bias and spark.tie_embeddings and spark.head_dim == 64
    assert 0.45e9 < spark.n_params < 0.65e9


def test_config_rejects_inconsistent_heads():
    from lab.engine import LMConfig

    with pytest.raises(ValueError, match="n_kv_heads"):
        LMConfig(vocab_size=10, dim=64, n_layers=1, n_heads=4, n_kv_heads=3, intermediate_size=8)
