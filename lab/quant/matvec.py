"""One row times a weight matrix, as one Triton kernel: a float weight, or int8 weights with
one scale per output, each optionally behind an RMSNorm of the row.

At one row a decode step is a chain of matrix-vector products bound by reading the weights.
Compiled, Inductor splits each norm from the product that reads it: in the served bf16 step of
the Orpheus-3B shape on an H100, one kernel summed the squares of the row (1.4-1.6 us, twice a
block), then the product read the weights (q/k/v at 2.2 TB/s, 74% of copy bandwidth, where
gate/up reached 93%); together about 0.17 ms of a 2.54 ms step. For int8 weight-only layers
Inductor's one-row product picks its launch settings by timing them as it compiles, and the
same step came out at 1.67 ms in one build and 2.30 in another on the same kind of GPU.

Here each program streams `ROWS` outputs' weights across the row's columns, widening int8 in
registers; with a norm it sums the row's squares on the way and scales its outputs once at the
end, y = s * W (g * x) / sqrt(mean(x^2) + eps). The normalized row is never rounded to the
weights' dtype, so outputs differ from norm-then-matmul by that rounding alone. The launch
shape is the lab's, so a build does not change it.

More rows make the product a matrix product, which cuBLAS, Inductor's templates or the lab's
row kernels (`int8_rows`, `int4_rows`) read once for all rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.quant.triton_site import tl, triton

FLOATS = (torch.bfloat16, torch.float16, torch.float32)
TALL = 16384  # outputs from which a program takes 8 of them rather than 4 (`tiles_for`)


@dataclass(frozen=True)
class Tiles:
    """Launch shape: `rows` outputs per program, `cols` columns per load, warps and stages."""

    rows: int = 4
    cols: int = 512
    warps: int = 4
    stages: int = 1


def tiles_for(n: int, weight_bytes: int = 2) -> Tiles:
    """The launch shape for `n` outputs of `weight_bytes`-byte weights. On an H200, over 36
    shapes (rows 2-8, cols 256-1024, warps 4-8, stages 1-3) for the Orpheus-3B shapes, one row
    of 3072 bf16: q/k/v (n 5120) ran fastest at 4 rows and 512 columns (10.9 us, Inductor's
    norm and product 12.4); gate/up (n 16384) at 8 rows (25.9 us against 30.2 at 4 rows,
    Inductor's 33.1); one stage was as fast as three. Eight rows leave too few programs below
    about 16k outputs. One-byte weights load twice the columns, the same bytes a load: int8
    q/k/v with its norm took 9.7 us there (Inductor 14.8), gate/up 20.6 (Inductor 38.0)."""
    return Tiles(rows=8 if n >= TALL else 4, cols=1024 if weight_bytes == 1 else 512)


if triton is not None:

    @triton.jit
    def _matvec(x_ptr, g_ptr, w_ptr, s_ptr, y_ptr, n, k, w_row, eps,
                ROWS: tl.constexpr, COLS: tl.constexpr, NORM: tl.constexpr,
                SCALED: tl.constexpr):
        """y[j] = s[j] * sum_c w[j, c] g[c] x[c] / sqrt(mean(x^2) + eps) for ROWS outputs j, in
        float32, rounded once; without NORM the g and root factors, without SCALED s[j], are
        left out."""
        j = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        outputs = j < n
        weights = w_ptr + j[:, None].to(tl.int64) * w_row
        acc = tl.zeros((ROWS,), dtype=tl.float32)
        squares = tl.zeros((COLS,), dtype=tl.float32)
        for c0 in range(0, k, COLS):
            c = c0 + tl.arange(0, COLS)
            inside = c < k
            x = tl.load(x_ptr + c, mask=inside, other=0.0).to(tl.float32)
            w = tl.load(weights + c[None, :], mask=outputs[:, None] & inside[None, :],
                        other=0.0).to(tl.float32)
            if NORM:
                squares += x * x
                x = x * tl.load(g_ptr + c, mask=inside, other=0.0).to(tl.float32)
            acc += tl.sum(w * x[None, :], axis=1)
        if NORM:
            acc = acc / tl.sqrt(tl.sum(squares, axis=0) / k + eps)
        if SCALED:
            acc = acc * tl.load(s_ptr + j, mask=outputs, other=0.0).to(tl.float32)
        tl.store(y_ptr + j, acc.to(y_ptr.dtype.element_ty), mask=outputs)


def launch(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor | None = None, eps: float = 0.0,
           scale: torch.Tensor | None = None, tiles: Tiles | None = None) -> torch.Tensor:
    """The kernel on x [K] and w [N, K] -> [N] in x's dtype, with the norm's weight g [K] and
    `eps` if given and one scale per output if given; `tiles` by default `tiles_for` the
    weights. What the op runs, and what a probe times shapes with."""
    n, k = w.shape
    w = w if w.stride(1) == 1 else w.contiguous()
    tiles = tiles or tiles_for(n, w.element_size())
    y = torch.empty(n, dtype=x.dtype, device=x.device)
    x = x.contiguous()
    _matvec[(triton.cdiv(n, tiles.rows),)](
        x, x if g is None else g.contiguous(), w, x if scale is None else scale.reshape(-1), y,
        n, k, w.stride(0), eps, ROWS=tiles.rows, COLS=tiles.cols, NORM=g is not None,
        SCALED=scale is not None, num_warps=tiles.warps, num_stages=tiles.stages)
    return y


@torch.library.custom_op("lab::matvec", mutates_args=())
def matvec(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor | None, scale: torch.Tensor | None,
           eps: float) -> torch.Tensor:
    """x [1, K], through RMSNorm(g, eps) if g is given, times w [N, K] and by one scale per
    output if given -> [1, N] in x's dtype."""
    return launch(x.reshape(-1), w, g, eps, scale)[None]


@matvec.register_fake
def _(x, w, g, scale, eps):
    return x.new_empty(1, w.shape[0])
