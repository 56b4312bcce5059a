"""Engine tests run tiny models: one thread is faster than two on a shared CPU, and keeps CPU
reductions in one order so runs compare exactly."""

import pytest
import torch

from lab.engine.llm import LM, LMConfig


@pytest.fixture(scope="module")
def lm() -> LM:
    """A two-layer random model with grouped-query attention, the same in every module."""
    cfg = LMConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                   intermediate_size=64, max_seq_len=256)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return LM(cfg).eval().requires_grad_(False)


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    """Every engine test uses the shared `one_thread` fixture."""


def serve_staggered(engine, prompts: list[list[int]], lengths: list[int],
                    arrivals: list[int]) -> list[list[int]]:
    """Greedy outputs (repetition penalty on) of each prompt, added just before step
    `arrivals[i]` of `engine`, so requests arrive while others decode."""
    from lab.engine.request import SamplingParams

    ids: list[str] = []
    step = 0
    while len(ids) < len(prompts) or engine.has_unfinished():
        for i, due in enumerate(arrivals):
            if due == step:
                greedy = SamplingParams(temperature=0.0, repetition_penalty=1.3,
                                        max_tokens=lengths[i])
                ids.append(engine.add_request(prompts[i], greedy))
        engine.step()
        step += 1
    return [engine.release(i).output_ids for i in ids]
