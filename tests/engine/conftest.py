"""Engine tests run tiny models: one thread is faster than two on a shared CPU, and keeps CPU
reductions in one order so runs compare exactly."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
