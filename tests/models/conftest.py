"""Model tests compare numbers across runs, so each runs on one thread."""

import pytest


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    """Every model test uses the shared `one_thread` fixture."""
