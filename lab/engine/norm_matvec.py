"""An RMSNorm and the one-row projection after it, as one Triton kernel.

In the compiled batch-1 step of the Orpheus-3B shape on an H100, Inductor splits each norm
from the matrix-vector product that reads it: one kernel sums the squares of the row (1.4-1.6
us, twice per block), then the product, with the norm's scaling folded into its loads, reads
the weights (31.5 MB for q/k/v at 2.2 TB/s, 74% of copy bandwidth, where the MLP's gate/up
product reached 93%). The two norms' own kernels (84 us a step) and that shortfall (about 90
us against gate/up's rate) come to about 0.17 ms of a 2.54 ms step (a kernel profile of
`benchmarks/peers.py`'s served row).

The norm's statistic needs the whole row, and so does every output of the product, which
streams the row across its columns anyway: each program sums the squares on the way and
scales its outputs once at the end, y = W (g * x) / sqrt(mean(x^2) + eps). The normalized row
is never rounded to the weights' dtype, so outputs differ from norm-then-matmul by that
rounding alone.

Only one row takes this path: with more rows the product is a matrix product, which cuBLAS or
Inductor's templates read once for all rows, and the norm's own kernel is a small share.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lab.quant.precision import is_quantized
from lab.quant.triton_site import runs_kernels, tl, triton


@dataclass(frozen=True)
class Tiles:
    """Launch shape: `rows` outputs per program, `cols` columns per load, warps and stages."""

    rows: int = 4
    cols: int = 512
    warps: int = 4
    stages: int = 3


TILES = Tiles()

if triton is not None:

    @triton.jit
    def _norm_matvec(x_ptr, g_ptr, w_ptr, y_ptr, n, k, w_row, eps,
                     ROWS: tl.constexpr, COLS: tl.constexpr):
        """y[j] = sum_c w[j, c] g[c] x[c] / sqrt(mean(x^2) + eps) for ROWS outputs j, in
        float32, rounded once."""
        j = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        outputs = j < n
        weights = w_ptr + j[:, None].to(tl.int64) * w_row
        acc = tl.zeros((ROWS,), dtype=tl.float32)
        squares = tl.zeros((COLS,), dtype=tl.float32)
        for c0 in range(0, k, COLS):
            c = c0 + tl.arange(0, COLS)
            inside = c < k
            x = tl.load(x_ptr + c, mask=inside, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + c, mask=inside, other=0.0).to(tl.float32)
            w = tl.load(weights + c[None, :], mask=outputs[:, None] & inside[None, :],
                        other=0.0).to(tl.float32)
            acc += tl.sum(w * (x * g)[None, :], axis=1)
            squares += x * x
        scale = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / k + eps)
        tl.store(y_ptr + j, (acc * scale).to(y_ptr.dtype.element_ty), mask=outputs)


def launch(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, eps: float,
           tiles: Tiles = TILES) -> torch.Tensor:
    """The kernel on x [K], g [K], w [N, K] -> [N] in w's dtype, with `tiles`; what the op
    runs, and what a probe times launch shapes with."""
    n, k = w.shape
    y = w.new_empty(n)
    _norm_matvec[(triton.cdiv(n, tiles.rows),)](
        x.contiguous(), g.contiguous(), w, y, n, k, w.stride(0), eps,
        ROWS=tiles.rows, COLS=tiles.cols, num_warps=tiles.warps, num_stages=tiles.stages)
    return y


@torch.library.custom_op("lab::norm_matvec", mutates_args=())
def norm_matvec_op(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, eps: float
                   ) -> torch.Tensor:
    """x [1, K] through RMSNorm(g, eps) and w [N, K] -> [1, N] in w's dtype."""
    return launch(x.reshape(-1), g, w.contiguous(), eps)[None]


@norm_matvec_op.register_fake
def _(x, g, w, eps):
    return w.new_empty(1, w.shape[0])


def folds(x: torch.Tensor, norm: nn.Module, linear: nn.Linear) -> bool:
    """Whether `linear(norm(x))` runs as the kernel: the norm allows it (its `folds`), one
    token, a kernel to run it, no gradient wanted, and a plain linear layer with a float
    weight of x's dtype and no bias (a quantized weight has kernels of its own)."""
    weight = linear.weight
    return (norm.folds and x.numel() == x.shape[-1] and runs_kernels(x)
            and not torch.is_grad_enabled()
            and type(linear) is nn.Linear and linear.bias is None
            and not is_quantized(weight) and weight.dtype == x.dtype)


def normed_linear(x: torch.Tensor, norm: nn.Module, linear: nn.Linear) -> torch.Tensor:
    """`linear(norm(x))` for an RMSNorm `norm` (its `weight` and `eps`): one kernel for a
    single token where `folds` allows, the two modules otherwise."""
    if not folds(x, norm, linear):
        return linear(norm(x))
    y = norm_matvec_op(x.reshape(1, -1), norm.weight, linear.weight, norm.eps)
    return y.reshape(*x.shape[:-1], y.shape[-1])
