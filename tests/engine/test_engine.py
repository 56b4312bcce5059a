"""The serving engine end to end on a tiny model: exact tokens, reproducible seeds, policies."""

import time

import pytest
import torch

from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.request import RequestError, SamplingParams


def engine(lm, **kw) -> LLMEngine:
    return LLMEngine(lm, EngineConfig(**{"n_slots": 3, "max_len": 64, **kw}))


@torch.inference_mode()
def greedy_reference(lm, prompt: list[int], n: int) -> list[int]:
    """Greedy continuation recomputing the whole prefix each step (no cache at all)."""
    tokens = list(prompt)
    for _ in range(n):
        logits = lm(torch.tensor([tokens]), torch.arange(len(tokens))[None])
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt):]


PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7], [1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9], [5], [6, 6, 6, 1]]
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=10)


def test_greedy_matches_a_cache_free_reference_with_chunks_slot_reuse_and_late_arrivals(lm):
    eng = engine(lm, prefill_chunk=3, prefill_budget=6)
    ids = [eng.add_request(p, GREEDY) for p in PROMPTS[:3]]
    for _ in range(4):
        eng.step()
    ids += [eng.add_request(p, GREEDY) for p in PROMPTS[3:]]
    for _ in eng.iterate():
        pass
    for rid, prompt in zip(ids, PROMPTS, strict=True):
        assert eng.release(rid).output_ids == greedy_reference(lm, prompt, 10)


def test_a_seeded_request_gives_the_same_tokens_alone_and_in_a_crowd(lm):
    mine = SamplingParams(temperature=0.9, top_k=20, top_p=0.9, repetition_penalty=1.2,
                          max_tokens=12, seed=11)
    alone = engine(lm).generate([PROMPTS[0]], mine)[0]
    eng = engine(lm, prefill_chunk=4, prefill_budget=8)
    eng.add_request(PROMPTS[1], SamplingParams(temperature=1.3, top_k=0, max_tokens=5, seed=1))
    eng.add_request(PROMPTS[2], SamplingParams(temperature=0.0, max_tokens=20))
    eng.step()
    rid = eng.add_request(PROMPTS[0], mine)
    eng.add_request(PROMPTS[3], SamplingParams(top_p=0.5, max_tokens=9, seed=2))
    for _ in eng.iterate():
        pass
    assert eng.release(rid).output_ids == alone
    other_seed = SamplingParams(**{**mine.__dict__, "seed": 12})
    assert engine(lm).generate([PROMPTS[0]], other_seed)[0] != alone


def test_static_batching_gives_the_same_tokens_but_takes_more_steps(lm):
    """Static batching admits the next batch only when the last one is done, so the same
    tokens take more steps (an eager step computes only running rows, so none are wasted;
    a captured step would also compute the finished ones)."""
    params = [SamplingParams(max_tokens=n, seed=i) for i, n in enumerate([2, 12, 3, 12, 4])]
    results, stats = {}, {}
    for policy in ("continuous", "static"):
        eng = engine(lm, policy=policy)
        results[policy] = eng.generate(PROMPTS, params)
        stats[policy] = eng.stats
    assert results["static"] == results["continuous"]
    assert [len(t) for t in results["static"]] == [2, 12, 3, 12, 4]
    assert stats["static"].generated == stats["continuous"].generated
    assert stats["static"].decode_steps > stats["continuous"].decode_steps


def test_stop_token_and_step_outputs(lm):
    expected = greedy_reference(lm, PROMPTS[0], 10)
    stop = expected[3]
    eng = engine(lm)
    rid = eng.add_request(PROMPTS[0], SamplingParams(temperature=0.0, repetition_penalty=1.0,
                                                     max_tokens=10, stop_token_ids=(stop,)))
    outputs = [o for step in eng.iterate() for o in step]
    tokens = [t for o in outputs for t in o.token_ids]
    cut = expected.index(stop) + 1
    assert tokens == expected[:cut]
    assert outputs[-1].finished and outputs[-1].finish_reason == "stop"
    assert all(o.frames is None for o in outputs)
    assert eng.release(rid).finish_reason == "stop"


def test_abort_frees_the_slot_and_leaves_others_untouched(lm):
    eng = engine(lm, n_slots=2)
    a = eng.add_request(PROMPTS[0], GREEDY)
    b = eng.add_request(PROMPTS[1], GREEDY)
    c = eng.add_request(PROMPTS[2], GREEDY)
    eng.step()
    eng.step()
    assert eng.abort(b)
    assert not eng.abort(b)
    for _ in eng.iterate():
        pass
    assert eng.release(b).finish_reason == "abort"
    assert eng.release(a).output_ids == greedy_reference(lm, PROMPTS[0], 10)
    assert eng.release(c).output_ids == greedy_reference(lm, PROMPTS[2], 10)


def test_bad_requests_are_refused_and_leave_the_engine_as_it_was(lm):
    eng = engine(lm)
    eng.add_request([1, 2], GREEDY, request_id="x")
    with pytest.raises(RequestError, match="outside the vocabulary"):
        eng.add_request([1, lm.cfg.vocab_size], GREEDY)
    with pytest.raises(RequestError, match="already in use"):
        eng.add_request([1], GREEDY, request_id="x")
    with pytest.raises(RequestError, match="exceeds the cache length"):
        eng.add_request([1] * 60, GREEDY)
    assert list(eng.requests) == ["x"] and len(eng.scheduler.waiting) == 1
    with pytest.raises(RequestError, match="still running"):
        eng.release("x")


def test_the_hosts_wait_for_sampled_tokens_is_counted_within_the_run(lm):
    """Every retired step's wait for its tokens adds to `token_wait_s` (on a CPU the tokens are
    there at once, so the wait is tiny but counted), never more than the run's own time."""
    eng = engine(lm)
    start = time.perf_counter()
    eng.generate(PROMPTS[:3], GREEDY)
    wall = time.perf_counter() - start
    assert eng.stats.decode_steps >= 9
    assert 0 < eng.stats.token_wait_s < wall
