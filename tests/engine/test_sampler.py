"""The sampler: filters per row, inverse-CDF draws, and rows that ignore their neighbours."""

import numpy as np
import pytest
import torch

from lab.engine.request import UNIFORM_BLOCK, Request, RequestError, SamplingParams
from lab.engine.sampler import (
    TOPK_CAP,
    Candidates,
    SamplingBatch,
    apply_repetition_penalty,
    fixed_topk,
    sample,
)


def batch(rows: list[dict], uniforms: list[float]) -> SamplingBatch:
    """A SamplingBatch of these settings with chosen uniforms instead of generator draws."""
    requests = [Request([1], SamplingParams(**r)) for r in rows]
    table = torch.tensor([(*r.settings, u) for r, u in zip(requests, uniforms, strict=True)],
                         dtype=torch.float64)
    return SamplingBatch.from_rows(table, [fixed_topk(r) for r in requests])


def test_greedy_takes_the_first_maximum():
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0]])
    assert sample(logits, batch([{"temperature": 0.0}], [0.99])).tolist() == [1]


def test_top_k_one_and_tiny_top_p_both_mean_argmax():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    rows = [{"top_k": 1}, {"top_k": 0, "top_p": 1e-6}, {"top_k": 1}, {"top_k": 0, "top_p": 1e-6}]
    got = sample(logits, batch(rows, [0.999, 0.999, 0.0, 0.5]))
    assert got.tolist() == logits.argmax(-1).tolist()


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (3, 1.0), (0, 0.7), (4, 0.8)])
def test_frequencies_follow_the_filtered_softmax(top_k, top_p):
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -1.0, -3.0])
    temperature = 0.7
    n = 4000
    uniforms = [(i + 0.5) / n for i in range(n)]
    b = batch([{"temperature": temperature, "top_k": top_k, "top_p": top_p}] * n, uniforms)
    counts = torch.bincount(sample(logits.expand(n, -1), b), minlength=6).double() / n
    probs = torch.softmax(logits / temperature, -1).double()
    keep = torch.ones(6, dtype=torch.bool)
    if top_k:
        keep[top_k:] = False
    before = probs.cumsum(0) - probs
    keep &= before < top_p
    expected = torch.where(keep, probs, 0.0)
    expected /= expected.sum()
    assert torch.allclose(counts, expected, atol=2e-3)


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    seen = torch.tensor([[True, True, False, False]])
    out = apply_repetition_penalty(logits, seen, torch.tensor([2.0]))
    assert out.tolist() == [[1.0, -4.0, 2.0, -2.0]]


def test_a_row_draws_the_same_token_whatever_its_neighbours():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 2000, generator=gen)
    mine = {"temperature": 0.9, "top_k": 40, "top_p": 0.9, "repetition_penalty": 1.3}
    seen = torch.rand(5, 2000, generator=gen) < 0.1
    alone = sample(logits[2:3], batch([mine], [0.37]), seen[2:3])
    neighbours = [{"top_k": 0, "top_p": 1.0, "temperature": 1.5}, {"temperature": 0.0},
                  mine, {"top_k": TOPK_CAP + 1}, {"top_k": 5, "repetition_penalty": 1.0}]
    together = sample(logits, batch(neighbours, [0.1, 0.2, 0.37, 0.4, 0.5]), seen)
    assert together[2] == alone[0]


def test_a_request_stream_depends_only_on_its_seed():
    a = Request([1], SamplingParams(seed=5))
    b = Request([2, 3], SamplingParams(seed=5, temperature=1.0))
    c = Request([1], SamplingParams(seed=6))
    draws_a = np.concatenate([a.uniform_block() for _ in range(2)])
    assert len(draws_a) == 2 * UNIFORM_BLOCK
    assert np.array_equal(draws_a, np.concatenate([b.uniform_block() for _ in range(2)]))
    assert not np.array_equal(draws_a, np.concatenate([c.uniform_block() for _ in range(2)]))
    assert ((draws_a >= 0.0) & (draws_a < 1.0)).all() and len(set(draws_a)) == len(draws_a)


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 0}, {"top_p": 1.5},
                                 {"top_k": -1}, {"repetition_penalty": 0}, {"max_tokens": 0}])
def test_bad_sampling_values_are_rejected(bad):
    with pytest.raises(RequestError):
        SamplingParams(**bad)
    assert issubclass(RequestError, ValueError)


def test_a_shortlist_samples_exactly_like_masking_everything_else():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 300, generator=gen)
    ids = torch.stack([torch.randperm(300, generator=gen)[:40].sort().values for _ in range(6)])
    allowed = torch.rand(6, 40, generator=gen) > 0.2
    seen = torch.rand(6, 300, generator=gen) < 0.3
    rows = [{"temperature": t, "top_k": k, "top_p": p, "repetition_penalty": 1.3}
            for t, k, p in [(0.8, 10, 0.9), (0.0, 5, 1.0), (1.2, 0, 0.8)] * 2]
    uniforms = [0.05, 0.5, 0.95, 0.3, 0.7, 0.01]
    masked = torch.full_like(logits, float("-inf"))
    keep = torch.zeros_like(seen)
    keep.scatter_(1, ids, allowed)
    masked[keep] = logits[keep]
    dense = sample(masked, batch(rows, uniforms), seen)
    short = sample(logits, batch(rows, uniforms), seen.gather(1, ids), Candidates(ids, allowed))
    assert short.tolist() == dense.tolist()
