"""The snake activation of SNAC's decoder, as one pass over memory on a CUDA device.

`x + sin(alpha * x)^2 / (alpha + 1e-9)`, with one `alpha` per channel, follows every
convolution of the decoder. Eager PyTorch spends five kernels on it, each reading and writing
the whole activation. SNAC's own `snake` is a TorchScript function, so TorchScript's profiling
executor may fuse those five into one, but only for the first dozen input shapes it meets;
after that it runs them unfused. A codec captured for every batch bucket and window length
meets more shapes than that, and which of its graphs got the fused kernel depended on the
order of earlier calls in the process: on an H100 at 16 Orpheus arrivals a second the codec
took 976 ms of GPU time per 150 steps in one process and 638 ms in another, with the same
weights and requests. `fuse_snake` gives every snake the same single Triton kernel.

On a CPU, or without Triton, the module computes the same formula in eager PyTorch; under
Triton's interpreter (TRITON_INTERPRET=1, how the tests check the kernel on a CPU) the kernel
runs on CPU tensors too.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lab.quant.triton_site import runs_kernels, tl, triton

EPS = 1e-9
BLOCK = 1024
if triton is not None:

    @triton.jit
    def _snake_rows(x_ptr, alpha_ptr, out_ptr, length, channels, eps: tl.constexpr,
                    block: tl.constexpr):
        """One (batch, channel) row per program on axis 0, `block` samples per program on
        axis 1: the row's alpha is read once."""
        row = tl.program_id(0)
        t = tl.program_id(1) * block + tl.arange(0, block)
        mask = t < length
        alpha = tl.load(alpha_ptr + row % channels).to(tl.float32)
        start = row.to(tl.int64) * length
        x = tl.load(x_ptr + start + t, mask=mask).to(tl.float32)
        s = tl.sin(alpha * x)
        y = x + (1.0 / (alpha + eps)) * (s * s)
        tl.store(out_ptr + start + t, y.to(out_ptr.dtype.element_ty), mask=mask)


def snake_reference(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The formula in eager PyTorch, as SNAC writes it."""
    shape = x.shape
    x = x.reshape(shape[0], shape[1], -1)
    x = x + (alpha + EPS).reciprocal() * torch.sin(alpha * x).pow(2)
    return x.reshape(shape)


def snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Snake over x [B, C, ...] with alpha [1, C, 1]: one kernel on CUDA, eager elsewhere."""
    if not runs_kernels(x):
        return snake_reference(x, alpha)
    x = x.contiguous()
    out = torch.empty_like(x)
    length = math.prod(x.shape[2:])
    if x.numel():
        grid = (x.shape[0] * x.shape[1], triton.cdiv(length, BLOCK))
        _snake_rows[grid](x, alpha.reshape(-1).contiguous(), out, length, x.shape[1],
                          eps=EPS, block=BLOCK)
    return out


class Snake(nn.Module):
    """Snake with a learned alpha per channel; takes over a SNAC `Snake1d`'s parameter."""

    def __init__(self, alpha: nn.Parameter) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return snake(x, self.alpha)


def fuse_snake(model: nn.Module) -> int:
    """Replace every module named `Snake1d` (SNAC's) with `Snake`; returns how many."""
    swaps = [(parent, name, child) for parent in model.modules()
             for name, child in parent.named_children() if type(child).__name__ == "Snake1d"]
    for parent, name, child in swaps:
        setattr(parent, name, Snake(child.alpha))
    return len(swaps)
