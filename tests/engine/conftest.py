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
