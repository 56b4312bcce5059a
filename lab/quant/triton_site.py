"""Where the lab's Triton kernels run: on a CUDA device, or on a CPU under Triton's interpreter
(TRITON_INTERPRET=1, how the tests check them without a GPU). One answer for every kernel
module (weights, decode attention, SNAC's activation), so a kernel and its routing never
disagree about it."""

from __future__ import annotations

import os

import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only PyTorch ships without Triton
    triton = tl = None


def runs_kernels(x: torch.Tensor) -> bool:
    """Whether a Triton kernel can take tensors on x's device here."""
    return triton is not None and (x.device.type == "cuda" or INTERPRETED)


def widens(x: torch.Tensor) -> bool:
    """Whether a kernel's dots must go to float32 for x: the interpreter misreads bf16 dots."""
    return INTERPRETED and x.dtype == torch.bfloat16
