"""GraphedDecoder on CPU: the recorded fallback, bucketing, and an eager path equal to forward."""

from __future__ import annotations

import pytest
import torch

from lab.engine import (
    DynamicKVCache,
    GraphedDecoder,
    StaticKVCache,
    generate,
    load_lm,
)


@pytest.fixture(scope="module")
def model():
    lm, _ = load_lm("dummy", shape="tiny-llama", seed=4)
    return lm


def _cache(model, slots=6, max_len=32):
    cfg = model.cfg
    return StaticKVCache(cfg.n_layers, slots, max_len, cfg.n_kv_heads, cfg.head_dim)


def test_cuda_graph_on_cpu_falls_back_and_says_why(model):
    dec = GraphedDecoder(model, _cache(model), "cuda-graph")
    assert dec.mode == "eager"
    assert len(dec.fallbacks) == 1 and "CUDA" in dec.fallbacks[0]
    dec.capture()
    assert len(dec.fallbacks) == 1


@torch.no_grad()
def test_eager_decode_equals_plain_forward(model):
    cfg = model.cfg
    tokens = torch.randint(0, cfg.vocab_size, (3, 1))
    positions = torch.tensor([[0], [4], [2]])
    a, b = _cache(model), _cache(model)
    for cache in (a, b):  # the same history in both caches
        cache.k.normal_(generator=torch.Generator().manual_seed(1))
        cache.v.normal_(generator=torch.Generator().manual_seed(2))
    out = GraphedDecoder(model, a, "cuda-graph")(tokens, positions)
    ref = model(tokens, positions, b)
    assert out.shape == (3, 1, cfg.vocab_size)
    torch.testing.assert_close(out, ref)
    assert torch.equal(a.k, b.k)


def test_buckets_cover_the_slots(model):
    dec = GraphedDecoder(model, _cache(model, slots=6), "eager")
    assert dec.buckets == (1, 2, 4, 6)
    assert dec.bucket_for(3) == 4 and dec.bucket_for(6) == 6
    with pytest.raises(ValueError, match="largest bucket"):
        dec.bucket_for(7)
    with pytest.raises(ValueError, match=r"\[B, 1\]"):
        dec(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))


def test_generate_through_the_decoder_matches_static(model):
    prompt = torch.randint(0, model.cfg.vocab_size, (2, 5))
    dec = GraphedDecoder(model, _cache(model, slots=2), "cuda-graph")
    via = generate(model, prompt, 8, "static", decoder=dec)
    ref = generate(model, prompt, 8, "static")
    assert torch.equal(via.tokens, ref.tokens)
    with pytest.raises(ValueError, match="static"):
        generate(model, prompt, 8, "dynamic", decoder=dec)


def test_bad_modes_and_caches_are_rejected(model):
    with pytest.raises(ValueError, match="decode mode"):
        GraphedDecoder(model, _cache(model), "turbo")
    with pytest.raises(ValueError, match="StaticKVCache"):
        GraphedDecoder(model, DynamicKVCache(model.cfg.n_layers), "eager")


def test_compiled_decode_shares_one_block_across_layers():
    """Regional compilation: every layer runs the same compiled block (no per-layer
    recompiles), and the compiled step decodes the same tokens as eager."""
    torch._dynamo.reset()
    lm, cfg = load_lm("dummy", shape="tiny-qwen2", seed=2)
    cache = StaticKVCache(cfg.n_layers, 2, 16, cfg.n_kv_heads, cfg.head_dim)
    dec = GraphedDecoder(lm, cache, "default", buckets=(2,))
    assert dec.mode == "default" and "uncaptured" in dec.fallbacks[0]
    torch._dynamo.utils.counters.clear()
    prompt = torch.randint(0, cfg.vocab_size, (2, 4), generator=torch.Generator().manual_seed(3))
    compiled = generate(lm, prompt, 5, "static", decoder=dec)
    assert dec.mode == "default" and len(dec.fallbacks) == 1
    assert torch.equal(compiled.tokens, generate(lm, prompt, 5, "static").tokens)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # one block, one head
