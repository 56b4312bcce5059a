"""Shared fixtures: the real embedded voice, loaded once per test session."""

from __future__ import annotations

import pytest
import torch

from lab.config import PipelineConfig
from lab.pipeline import Pipeline

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="session")
def voice_pipeline() -> Pipeline:
    """The default voice on CPU, one-shot (no streaming)."""
    return Pipeline(PipelineConfig(device="cpu", stream=False))


@pytest.fixture
def one_thread():
    """One torch thread for the test: CPU reductions then run in one order, so results compare
    exactly across runs, and tiny models skip the cost of waking a second thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
