"""Cache modes agree token for token; static slots behave like independent sequences."""

from __future__ import annotations

import pytest
import torch

from lab.engine import DynamicKVCache, StaticKVCache, generate, load_lm, make_cache


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2"])
def model(request):
    lm, _ = load_lm("dummy", shape=request.param, seed=3)
    return lm


def test_cache_modes_give_identical_greedy_tokens(model):
    gen = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, model.cfg.vocab_size, (2, 6), generator=gen)
    runs = {mode: generate(model, prompt, 12, mode) for mode in ("none", "dynamic", "static")}
    ref = runs["none"].tokens
    assert torch.equal(ref[:, :6], prompt)
    for mode, run in runs.items():
        assert torch.equal(run.tokens, ref), mode
        assert len(run.step_ms) == 11


def _prefill(model, cache, prompts):
    for slot, prompt in enumerate(prompts):
        pos = torch.arange(len(prompt)).unsqueeze(0)
        model(prompt.unsqueeze(0), pos, cache, rows=torch.tensor([slot]))


@torch.no_grad()
def test_batched_decode_over_slots_equals_per_row_decode(model):
    cfg = model.cfg
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in (5, 9, 3)]
    nxt = torch.randint(0, cfg.vocab_size, (3, 1), generator=gen)
    pos = torch.tensor([[5], [9], [3]])

    def fresh():
        cache = StaticKVCache(cfg.n_layers, 4, 32, cfg.n_kv_heads, cfg.head_dim)
        _prefill(model, cache, prompts)
        return cache

    batched = model(nxt, pos, fresh())  # rows=None: batch row b is cache row b
    single = fresh()
    for s in range(3):
        row = model(nxt[s : s + 1], pos[s : s + 1], single, rows=torch.tensor([s]))
        torch.testing.assert_close(batched[s], row[0], atol=1e-5, rtol=1e-5)
        seq = torch.cat([prompts[s], nxt[s]]).unsqueeze(0)
        plain = model(seq, torch.arange(seq.shape[1]).unsqueeze(0), None, last_only=True)
        torch.testing.assert_close(batched[s], plain[0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_a_prefix_view_reads_only_live_positions_and_writes_through(model):
    """Decoding over the first `length` positions gives the logits and K/V of the step over
    the whole slot, for contiguous rows (a view) and for gathered ones."""
    cfg = model.cfg
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in (5, 9, 3)]
    nxt = torch.randint(0, cfg.vocab_size, (3, 1), generator=gen)
    pos = torch.tensor([[5], [9], [3]])
    for rows in (None, torch.tensor([2, 0, 1])):
        caches = [StaticKVCache(cfg.n_layers, 3, 32, cfg.n_kv_heads, cfg.head_dim)
                  for _ in range(2)]
        for cache in caches:
            _prefill(model, cache, prompts)
        order = slice(None) if rows is None else rows
        full = model(nxt, pos[order], caches[0], rows=rows)
        live = model(nxt, pos[order], caches[1].prefix(10), rows=rows)
        torch.testing.assert_close(live, full, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(caches[1].k, caches[0].k)
    with pytest.raises(ValueError, match="outside"):
        caches[0].prefix(33)


@torch.no_grad()
def test_prefill_into_one_slot_leaves_the_others_alone(model):
    cfg = model.cfg
    cache = StaticKVCache(cfg.n_layers, 3, 16, cfg.n_kv_heads, cfg.head_dim)
    before = cache.k.clone()
    model(torch.ones(1, 4, dtype=torch.long), torch.arange(4).unsqueeze(0), cache,
          rows=torch.tensor([1]))
    assert torch.equal(cache.k[:, [0, 2]], before[:, [0, 2]])
    assert cache.k[:, 1, :, :4].abs().sum() > 0
    assert cache.k[:, 1, :, 4:].abs().sum() == 0


def test_memory_per_slot_is_reported():
    cache = StaticKVCache(n_layers=3, n_slots=5, max_len=32, n_kv_heads=2, head_dim=16,
                          dtype=torch.bfloat16)
    assert cache.bytes_per_slot == 2 * 3 * 2 * 32 * 16 * 2
    assert cache.nbytes == 5 * cache.bytes_per_slot
    orpheus_slot = 2 * 28 * 8 * 4096 * 128 * 2  # K and V, 28 layers, 8 KV heads, bf16
    assert orpheus_slot == 469_762_048


def test_reset_clears_one_slot_and_checks_its_range():
    cache = StaticKVCache(1, 3, 4, 1, 2)
    cache.k.fill_(1.0)
    cache.reset(1)
    assert cache.k[:, 1].abs().sum() == 0 and cache.k[:, 0].abs().sum() > 0
    with pytest.raises(ValueError, match="out of range"):
        cache.reset(3)
    assert cache.k[:, 0].abs().sum() > 0


def test_dynamic_cache_grows_by_concatenation(model):
    cfg = model.cfg
    cache = DynamicKVCache(cfg.n_layers)
    with torch.no_grad():
        model(torch.ones(2, 5, dtype=torch.long), torch.arange(5).expand(2, 5), cache)
        size = cache.nbytes
        model(torch.ones(2, 1, dtype=torch.long), torch.full((2, 1), 5), cache)
    assert cache.seq_len == 6
    assert cache.nbytes == size * 6 // 5
    with pytest.raises(ValueError, match="rows"):
        model(torch.ones(2, 1, dtype=torch.long), torch.full((2, 1), 6), cache,
              rows=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="holds 2 rows"):
        model(torch.ones(3, 1, dtype=torch.long), torch.full((3, 1), 6), cache)


def test_make_cache_modes_and_errors(model):
    cfg = model.cfg
    assert make_cache("none", cfg, 2, 8, torch.float32, "cpu") is None
    assert isinstance(make_cache("dynamic", cfg, 2, 8, torch.float32, "cpu"), DynamicKVCache)
    static = make_cache("static", cfg, 2, 8, torch.float32, "cpu")
    assert isinstance(static, StaticKVCache) and static.k.shape[1:4] == (2, cfg.n_kv_heads, 8)
    with pytest.raises(ValueError, match="cache mode"):
        make_cache("paged", cfg, 2, 8, torch.float32, "cpu")
    with pytest.raises(ValueError, match="rotary table"):
        make_cache("static", cfg, 2, cfg.max_seq_len + 1, torch.float32, "cpu")
    with pytest.raises(ValueError, match="does not fit"):
        model(torch.ones(3, 1, dtype=torch.long), torch.zeros(3, 1, dtype=torch.long), static)
