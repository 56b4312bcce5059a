"""A prompt chunk carried inside the decode step must leave exactly what a prefill of its own
leaves: the same greedy tokens for every request and the same K/V in every slot.

The compiled decoder runs on a CPU through the very padded step a CUDA graph would capture
(its batch bucket, its key bucket, the chunk padded to `mixed_prefill`), so these tests drive
the graph's path without a GPU.
"""

from __future__ import annotations

import pytest
import torch

from lab.engine import GraphedDecoder, StaticKVCache
from lab.engine.engine import EngineConfig, LLMEngine
from tests.engine.conftest import serve_staggered

PROMPTS = [[3, 1, 4, 1, 5], [2, 7], list(range(1, 31)), [1, 8, 2], [6, 6, 6, 6, 6, 6, 6, 6, 6]]
LENGTHS = [6, 24, 10, 16, 9]
ARRIVALS = [0, 0, 3, 5, 9]  # the step before which each request is added


def _serve(lm, **config) -> tuple[list[list[int]], LLMEngine]:
    """Three slots; requests arrive while others decode, so their prompts (one of 30 tokens,
    four chunks of 8) are carried by decode steps when `mixed_prefill` is set."""
    engine = LLMEngine(lm, EngineConfig(n_slots=3, max_len=64, prefill_chunk=6,
                                        prefill_budget=12, **config))
    return serve_staggered(engine, PROMPTS, LENGTHS, ARRIVALS), engine


@pytest.mark.parametrize("mode", ["eager", "default"])
def test_a_carried_prompt_leaves_the_tokens_and_cache_of_its_own_prefill(lm, mode):
    torch._dynamo.reset()
    carried, engine = _serve(lm, decode_mode=mode, buckets=(3,), key_buckets=(16, 32),
                             mixed_prefill=8)
    alone, reference = _serve(lm, decode_mode=mode, buckets=(3,), key_buckets=(16, 32))
    assert [len(t) for t in carried] == LENGTHS
    assert carried == alone
    assert engine.stats.prefill_tokens == reference.stats.prefill_tokens == 49
    assert engine.stats.carried_prefill_tokens >= 30  # at least the long prompt rode along
    assert reference.stats.carried_prefill_tokens == 0
    for got, want in ((engine.runner.cache.k, reference.runner.cache.k),
                      (engine.runner.cache.v, reference.runner.cache.v)):
        torch.testing.assert_close(got[..., :-1, :], want[..., :-1, :], rtol=1e-4, atol=1e-4)
    if mode == "default":
        prepared = engine.runner.decoder.prepared
        assert {(3, 16, 8), (3, 32, 8)} <= set(prepared)  # steps that carried a chunk
        assert all(pre in (0, 8) for _, _, pre in prepared)


def test_capture_prepares_each_shape_with_and_without_a_chunk(lm):
    cfg = lm.cfg
    cache = StaticKVCache(cfg.n_layers, 2, 32, cfg.n_kv_heads, cfg.head_dim)
    dec = GraphedDecoder(lm, cache, "default", buckets=(2,), key_buckets=(16,),
                         prefill_tokens=4)
    torch._dynamo.reset()
    dec.capture()
    assert dec.prepared == [(2, 16, 0), (2, 16, 4), (2, 32, 0), (2, 32, 4)]


def test_a_malformed_chunk_is_refused_with_its_shapes(lm):
    cfg = lm.cfg
    cache = StaticKVCache(cfg.n_layers, 2, 32, cfg.n_kv_heads, cfg.head_dim)
    tokens, positions = torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)
    chunk = torch.zeros(1, 4, dtype=torch.long)
    row = torch.zeros(1, dtype=torch.long)
    with pytest.raises(ValueError, match="prefill_tokens=0"):
        GraphedDecoder(lm, cache, "eager").with_prefill(tokens, positions, 8, chunk, chunk, row)
    dec = GraphedDecoder(lm, cache, "eager", prefill_tokens=4)
    with pytest.raises(ValueError, match=r"\(1, 4\).*\(1, 3\)"):
        dec.with_prefill(tokens, positions, 8, chunk[:, :3], chunk, row)
    with pytest.raises(ValueError, match="prefill_tokens=32"):
        GraphedDecoder(lm, cache, "eager", prefill_tokens=32)
    with pytest.raises(ValueError, match="mixed_prefill=64"):
        EngineConfig(max_len=64, mixed_prefill=64)


def test_without_the_static_cache_prompts_prefill_alone_and_the_fallbacks_say_so(lm):
    tokens, engine = _serve(lm, kv_cache="dynamic", mixed_prefill=8)
    assert any("prompt chunks ride in the decode step only with the static KV cache" in f
               for f in engine.fallbacks)
    assert engine.stats.carried_prefill_tokens == 0
    assert tokens == _serve(lm)[0]
