"""Checks of the snake kernel, run by `test_snake.py` through `tests/kernel_checks.py` (on a GPU,
or on a CPU under Triton's interpreter, where `snake` runs the kernel on CPU tensors)."""

from __future__ import annotations

import torch

from lab.models.snake import snake, snake_reference


def kernel_matches_reference(device: str) -> None:
    """Lengths below, at and past a block, and a non-contiguous input."""
    gen = torch.Generator().manual_seed(0)
    for length in (1, 1000, 1025, 2100):
        x = (3 * torch.randn(2, 3, length, generator=gen)).to(device)
        alpha = (torch.rand(1, 3, 1, generator=gen) + 0.1).to(device)
        torch.testing.assert_close(snake(x, alpha), snake_reference(x, alpha),
                                   rtol=1e-5, atol=1e-5)
    strided = x.transpose(0, 2).contiguous().transpose(0, 2)
    torch.testing.assert_close(snake(strided, alpha), snake_reference(x, alpha))
