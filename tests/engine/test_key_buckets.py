"""Key buckets: a fixed-shape decode step reads only the cache prefix its longest row needs.

CUDA graphs cannot be captured on a CPU, but a compiled decoder runs there uncaptured through
the very step a graph would capture (padded to its batch bucket, over its key bucket), so these
tests drive that path with compile mode 'default'.
"""

from __future__ import annotations

import re

import pytest
import torch

from lab.engine import GraphedDecoder, StaticKVCache
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.graphs import default_key_buckets
from lab.engine.request import SamplingParams
from lab.stages import listening


def _cache(model, slots: int, max_len: int) -> StaticKVCache:
    cfg = model.cfg
    cache = StaticKVCache(cfg.n_layers, slots, max_len, cfg.n_kv_heads, cfg.head_dim)
    cache.k.normal_(generator=torch.Generator().manual_seed(1))
    cache.v.normal_(generator=torch.Generator().manual_seed(2))
    return cache


def test_default_key_buckets_double_from_64_and_end_at_the_cache_length():
    assert default_key_buckets(512) == (64, 128, 256, 512)
    assert default_key_buckets(2048) == (64, 128, 256, 512, 1024, 2048)
    assert default_key_buckets(600) == (64, 128, 256, 512, 600)
    assert default_key_buckets(48) == (48,)


def test_key_bucket_is_the_smallest_holding_the_longest_row(lm):
    cache = _cache(lm, 2, 32)
    dec = GraphedDecoder(lm, cache, "eager", key_buckets=(16, 8, 100, 0))
    assert dec.key_buckets == (8, 16, 32)  # sorted, out-of-range dropped, max_len always
    assert [dec.key_bucket_for(n) for n in (1, 8, 9, 16, 17, 32)] == [8, 8, 16, 16, 32, 32]
    with pytest.raises(ValueError, match="largest bucket"):
        dec.key_bucket_for(33)
    with pytest.raises(ValueError, match="n_keys"):
        dec.key_bucket_for(0)
    assert GraphedDecoder(lm, cache, "eager", key_buckets=()).key_buckets == (32,)
    assert GraphedDecoder(lm, cache, "eager").key_buckets == (32,)  # 64 would not fit


@torch.no_grad()
def test_padded_rows_write_only_scratch_and_the_step_matches_the_whole_cache(lm):
    """Rows 2 and 3 pad a batch of 2 up to its bucket of 4 while the step reads 8 of 32 keys.
    Slots 2 and 3 stand for prompts being prefilled past that prefix: the padded rows must
    leave their history alone (position 7, the prefix's last, included) and write only the
    scratch position 31."""
    torch._dynamo.reset()
    cache, ref = _cache(lm, 4, 32), _cache(lm, 4, 32)
    dec = GraphedDecoder(lm, cache, "default", buckets=(4,), key_buckets=(8, 16))
    tokens = torch.tensor([[5], [9]])
    positions = torch.tensor([[3], [6]])
    before_k, before_v = cache.k.clone(), cache.v.clone()
    out = dec(tokens, positions, n_keys=7)
    assert dec.prepared == [(4, 8, 0)]
    torch.testing.assert_close(out, lm(tokens, positions, ref))
    allowed = torch.zeros(4, 32, dtype=torch.bool)
    allowed[0, 3] = allowed[1, 6] = True
    allowed[:, 31] = True  # scratch: compiling ran the step once with every row padded
    for now, before in ((cache.k, before_k), (cache.v, before_v)):
        changed = (now != before).any(dim=(2, 4)).any(dim=0)  # [slot, position]
        assert changed[0, 3] and changed[1, 6] and changed[2:, 31].all()
        assert not (changed & ~allowed).any()


def test_compiled_key_buckets_share_one_block_and_raise_the_recompile_limit(lm):
    """Prefixes shorter than the cache share one compiled block; the whole cache is another.
    Compiling says each batch size as it is done, with its seconds."""
    torch._dynamo.reset()
    dec = GraphedDecoder(lm, _cache(lm, 2, 64), "default", buckets=(2,),
                         key_buckets=(8, 16, 32))
    config = torch._dynamo.config
    limit = getattr(config, "recompile_limit", None) or config.cache_size_limit
    assert limit >= 4 * 1 * 4 + 16
    torch._dynamo.utils.counters.clear()
    said: list[str] = []
    with listening(said.append):
        dec.capture()
    assert dec.prepared == [(2, 8, 0), (2, 16, 0), (2, 32, 0), (2, 64, 0)]
    assert dec.mode == "default"
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 3  # block <64, =64, head
    assert said[0] == "compiling the decode step (default): 4 shapes ..."
    assert re.fullmatch(r"  1/1 batch size 2: \d+\.\d s", said[1])
    assert re.fullmatch(r"compiling the decode step \(default\): 4 shapes: \d+\.\d s", said[2])


PROMPTS = [[3, 1, 4, 1, 5], [2, 7], [1, 8, 2], list(range(1, 31)), [6]]
LENGTHS = [4, 20, 20, 8, 12]


def _serve(lm, **config) -> tuple[list[list[int]], LLMEngine]:
    """Three slots, requests of different lengths joining at different steps. The fourth takes
    the slot the first leaves and has its 30-token prompt prefilled in chunks of 6 below two
    slots still decoding at positions under 16: it is a padded row of their steps while its
    history passes the 16-key prefix they read."""
    engine = LLMEngine(lm, EngineConfig(n_slots=3, max_len=64, prefill_chunk=6,
                                        prefill_budget=12, **config))
    greedy = [SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=n)
              for n in LENGTHS]
    ids = [engine.add_request(p, s) for p, s in zip(PROMPTS[:3], greedy[:3], strict=True)]
    for _ in range(6):
        engine.step()
    ids += [engine.add_request(p, s) for p, s in zip(PROMPTS[3:], greedy[3:], strict=True)]
    for _ in engine.iterate():
        pass
    return [engine.release(i).output_ids for i in ids], engine


def test_key_buckets_give_the_tokens_and_cache_of_the_whole_cache_path(lm):
    """Greedy tokens over key buckets equal those over the whole cache and those of the eager
    engine; so does every K/V the requests left behind (all but the scratch position), which
    a padded row writing inside the prefix would have spoiled without changing a token."""
    torch._dynamo.reset()
    bucketed, engine = _serve(lm, decode_mode="default", buckets=(3,), key_buckets=(8, 16, 32))
    whole, _ = _serve(lm, decode_mode="default", buckets=(3,), key_buckets=())
    eager, reference = _serve(lm)
    assert [len(t) for t in bucketed] == LENGTHS
    assert bucketed == whole == eager
    decoder = engine.runner.decoder
    assert decoder.mode == "default"
    assert decoder.prepared == [(3, 8, 0), (3, 16, 0), (3, 32, 0), (3, 64, 0)]  # prompt: to 37
    for got, want in ((engine.runner.cache.k, reference.runner.cache.k),
                      (engine.runner.cache.v, reference.runner.cache.v)):
        torch.testing.assert_close(got[..., :-1, :], want[..., :-1, :], rtol=1e-4, atol=1e-4)
