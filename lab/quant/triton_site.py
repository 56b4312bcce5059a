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

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # no Triton, or one older than its host-side tensor descriptors
    TensorDescriptor = None


def runs_kernels(x: torch.Tensor) -> bool:
    """Whether a Triton kernel can take tensors on x's device here."""
    return triton is not None and (x.device.type == "cuda" or INTERPRETED)


def widens(x: torch.Tensor) -> bool:
    """Whether a kernel's dots must go to float32 for x: the interpreter misreads bf16 dots."""
    return INTERPRETED and x.dtype == torch.bfloat16


def copies_tiles(*tensors: torch.Tensor) -> bool:
    """Whether a kernel can load tiles of these tensors through tensor descriptors (the
    Hopper's TMA unit, which copies a whole tile to shared memory while the threads compute):
    a Triton that has them, a device of compute capability 9 or more, or the interpreter, and
    tensors whose base and rows are 16-byte aligned, as the unit requires."""
    if TensorDescriptor is None or not all(_aligned(t) for t in tensors):
        return False
    device = tensors[0].device
    hopper = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9
    return INTERPRETED or hopper


def _aligned(t: torch.Tensor) -> bool:
    row_bytes = t.stride(0) * t.element_size()
    return t.data_ptr() % 16 == 0 and t.stride(-1) == 1 and row_bytes % 16 == 0
