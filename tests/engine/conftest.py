"""Engine tests run tiny models: one thread is faster than two on a shared CPU, and keeps CPU
reductions in one order so runs compare exactly."""

import pytest


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    """Every engine test uses the shared `one_thread` fixture."""
