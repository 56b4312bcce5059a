"""The engine's `kv_cache` modes: same greedy tokens, different caches, and the cost shows."""

import pytest
import torch

from lab.engine.cache import NoKVCache, SlotDynamicCache, StaticKVCache
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.request import SamplingParams
from lab.engine.weights import load_lm

MODES = ("static", "dynamic", "none")
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7], [1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9], [5], [6, 6, 6, 1]]
LENGTHS = [12, 5, 9, 14, 7]


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2"])
def lm(request):
    model, _ = load_lm("dummy", shape=request.param, dtype="fp32", device="cpu", seed=3)
    return model


def engine(lm, kv_cache: str, **kw) -> LLMEngine:
    return LLMEngine(lm, EngineConfig(**{"n_slots": 3, "max_len": 48, "kv_cache": kv_cache,
                                         **kw}))


def staggered(eng: LLMEngine) -> list[list[int]]:
    """Requests of different lengths joining at steps 0, 0, 0, 3 and 5, in chunked prefill."""
    greedy = [SamplingParams(temperature=0.0, max_tokens=n) for n in LENGTHS]
    ids = [eng.add_request(p, s) for p, s in zip(PROMPTS[:3], greedy[:3], strict=True)]
    step = 0
    while eng.has_unfinished() or len(ids) < len(PROMPTS):
        if step in (3, 5):
            i = len(ids)
            ids.append(eng.add_request(PROMPTS[i], greedy[i]))
        eng.step()
        step += 1
    return [eng.release(i).output_ids for i in ids]


@pytest.mark.parametrize("policy", ["continuous", "static"])
def test_the_three_modes_give_identical_greedy_tokens_under_continuous_batching(lm, policy):
    tokens = {m: staggered(engine(lm, m, prefill_chunk=3, prefill_budget=6, policy=policy))
              for m in MODES}
    assert [len(t) for t in tokens["static"]] == LENGTHS
    assert tokens["dynamic"] == tokens["static"]
    assert tokens["none"] == tokens["static"]


def test_the_mode_picks_the_runner_cache_and_the_decode_counters_follow(lm):
    kinds = {"static": StaticKVCache, "dynamic": SlotDynamicCache, "none": NoKVCache}
    per_step = {}
    for mode, kind in kinds.items():
        eng = engine(lm, mode)
        assert type(eng.runner.cache) is kind
        eng.add_request(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=8))
        eng.add_request(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=8))
        per_step[mode] = [eng.stats.last_decode_tokens for _ in eng.iterate()]
    assert per_step["static"] == per_step["dynamic"]
    assert set(per_step["dynamic"]) == {0, 2}  # one token per running request, or no decode
    work = [n for n in per_step["none"] if n]
    prefixes = len(PROMPTS[0]) + len(PROMPTS[1])
    assert work == [prefixes + 2 * k for k in range(1, 8)]  # the whole prefix, every step


def test_the_dynamic_cache_grows_per_step_and_gives_finished_slots_back(lm):
    eng = engine(lm, "dynamic")
    cache = eng.runner.cache
    keep = eng.add_request(PROMPTS[2], SamplingParams(temperature=0.0, max_tokens=10))
    drop = eng.add_request(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=10))
    held = []
    for _ in range(4):
        eng.step()
        held.append(cache.nbytes)
    assert held == sorted(held) and held[0] < held[-1]
    assert "grows per step" in cache.describe() and "MiB in use now" in cache.describe()
    eng.abort(drop)
    assert cache.length(eng.requests[keep].slot) > 0 and cache.nbytes < held[-1]
    for _ in eng.iterate():
        pass
    assert cache.nbytes == 0


@pytest.mark.parametrize("mode", ["dynamic", "none"])
def test_graphs_without_the_static_cache_are_a_recorded_fallback_not_a_crash(lm, mode):
    graphed = engine(lm, mode, decode_mode="cuda-graph")
    assert graphed.fallbacks == [
        f"CUDA graphs need the static KV cache; kv_cache={mode} ran eager"]
    assert graphed.runner.decoder is None
    graphed.runner.warmup()
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    assert graphed.generate(PROMPTS[:2], greedy) == engine(lm, mode).generate(PROMPTS[:2], greedy)
    assert not engine(lm, mode).fallbacks


def test_an_unknown_mode_is_refused(lm):
    with pytest.raises(ValueError, match="kv_cache='paged'"):
        engine(lm, "paged")


@torch.inference_mode()
def test_memory_is_described_per_mode(lm):
    static = engine(lm, "static").runner.cache.describe()
    assert static.startswith("static, ") and "per slot x 3 slots (48 positions)" in static
    assert engine(lm, "none").runner.cache.describe().startswith("none: no KV cache")
