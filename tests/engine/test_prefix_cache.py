"""A stored prompt prefix must leave exactly what prefilling it with each request leaves: the
same greedy tokens (the repetition penalty included, so the prefix's tokens count as seen) and
the same K/V in every slot, under continuous batching with staggered arrivals."""

from __future__ import annotations

import pytest
import torch

from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.request import RequestError, SamplingParams
from tests.engine.conftest import serve_staggered

VOICE = [9, 4, 7, 7, 2, 11, 5, 3, 8, 1]  # what every prompt to one voice starts with
PROMPTS = [VOICE + [3, 1, 4], VOICE + [2], VOICE[:4] + [6, 6], VOICE + [5, 9, 2, 6, 5, 3, 5], VOICE]
LENGTHS = [7, 12, 9, 5, 8]
ARRIVALS = [0, 0, 2, 4, 7]


def _serve(lm, prefixes=(), **config) -> tuple[list[list[int]], LLMEngine]:
    engine = LLMEngine(lm, EngineConfig(n_slots=3, max_len=64, prefill_chunk=4,
                                        prefill_budget=8, **config))
    engine.kept = [engine.cache_prefix(p) for p in prefixes]
    return serve_staggered(engine, PROMPTS, LENGTHS, ARRIVALS), engine


@pytest.mark.parametrize(("mode", "mixed"), [("eager", 0), ("default", 0), ("default", 4)])
def test_a_stored_prefix_leaves_the_tokens_and_cache_of_a_whole_prefill(lm, mode, mixed):
    torch._dynamo.reset()
    settings = {"decode_mode": mode, "buckets": (3,), "key_buckets": (16, 32),
                "mixed_prefill": mixed}
    cached, engine = _serve(lm, [VOICE], **settings)
    whole, reference = _serve(lm, **settings)
    assert engine.kept == [len(VOICE)]
    assert [len(t) for t in cached] == LENGTHS
    assert cached == whole
    # The three prompts that go past the voice take it from the store; the short one and the
    # prompt that is only the voice (its last token must run) prefill whole.
    assert engine.stats.cached_prefix_tokens == 3 * len(VOICE)
    assert reference.stats.cached_prefix_tokens == 0
    total = sum(map(len, PROMPTS))
    assert reference.stats.prefill_tokens == total
    assert engine.stats.prefill_tokens == total - 3 * len(VOICE)


def test_a_slot_seeded_from_the_store_holds_the_k_v_of_its_whole_prompt(lm):
    """(The staggered run above admits requests on other steps once prompts are shorter, so
    its slots end with other tenants; one request shows the cache itself.)"""
    prompt = PROMPTS[3]
    slots = []
    for prefixes in ([VOICE], []):
        engine = LLMEngine(lm, EngineConfig(n_slots=2, max_len=32, prefill_chunk=4))
        for p in prefixes:
            engine.cache_prefix(p)
        engine.runner.cache.reset()  # what the prefix's own prefill left must not count
        engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=2))
        while engine.scheduler.prefilling or engine.scheduler.waiting:
            engine.step()
        cache = engine.runner.cache
        slots.append((cache.k[:, 0, :, :len(prompt)], cache.v[:, 0, :, :len(prompt)]))
    torch.testing.assert_close(slots[0], slots[1], rtol=1e-5, atol=1e-5)


def test_the_longest_stored_prefix_a_prompt_goes_past_is_the_one_used(lm):
    cached, engine = _serve(lm, [VOICE[:4], VOICE, VOICE + [3, 1, 4]])
    whole, _ = _serve(lm)
    assert cached == whole
    # The first prompt is all of VOICE+[3,1,4], so it takes VOICE, as do the second and
    # fourth; the third and the last (VOICE itself) take VOICE[:4].
    assert engine.stats.cached_prefix_tokens == 3 * len(VOICE) + 2 * 4
    assert len(engine.runner.prefixes) == 3
    assert engine.runner.prefixes.nbytes() > 0


def test_a_cache_without_fixed_slots_keeps_no_prefix_and_says_so(lm):
    cached, engine = _serve(lm, [VOICE], kv_cache="dynamic")
    whole, _ = _serve(lm, kv_cache="dynamic")
    assert engine.kept == [0]
    assert cached == whole
    assert engine.stats.cached_prefix_tokens == 0
    assert any("prefix cache needs the static KV cache" in f for f in engine.fallbacks)


def test_a_bad_prefix_is_refused_and_nothing_is_stored(lm):
    engine = LLMEngine(lm, EngineConfig(n_slots=2, max_len=16))
    with pytest.raises(RequestError, match="outside the vocabulary"):
        engine.cache_prefix([1, 2, 999])
    with pytest.raises(RequestError, match="does not fit the cache"):
        engine.cache_prefix(list(range(15)))
    with pytest.raises(RequestError, match="does not fit the cache"):
        engine.cache_prefix([])
    assert len(engine.runner.prefixes) == 0
    assert engine.scheduler.slots.n_free == 2


def test_prefixes_are_cached_only_while_a_slot_is_free(lm):
    engine = LLMEngine(lm, EngineConfig(n_slots=1, max_len=32))
    engine.add_request([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=4))
    engine.step()
    with pytest.raises(RequestError, match="every slot is busy"):
        engine.cache_prefix([1, 2])
    assert len(engine.runner.prefixes) == 0
