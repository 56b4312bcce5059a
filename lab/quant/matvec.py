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
registers. With a norm it sums the row's squares on the way and scales its outputs once at the
end, y = s * W (g * x) / sqrt(mean(x^2) + eps). The normalized row is never rounded to the
weights' dtype, so outputs differ from norm-then-matmul by that rounding alone. Without a norm
it takes the float one-row products that add to the residual stream, and adds that sum as it
stores, as Inductor's own one-row products do (see `lab.engine.norm_matvec`). The launch shape
is the lab's, so a build does not change it.

A SwiGLU MLP's gate/up product has a kernel of its own, `glu_matvec`, whose programs read their
outputs' gate rows and up rows and store SiLU(gate) * up (see `lab.engine.swiglu`).

More rows make the product a matrix product, which cuBLAS, Inductor's templates or the lab's
row kernels (`int8_rows`, `int4_rows`) read once for all rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.quant.triton_site import tl, triton

FLOATS = (torch.bfloat16, torch.float16, torch.float32)
TALL = 16384  # outputs from which a program takes 8 one-byte rows rather than 4 (`tiles_for`)


@dataclass(frozen=True)
class Tiles:
    """Launch shape: `rows` outputs per program, `cols` columns per load, warps and stages;
    `pile`: products pile up in a (rows, cols) accumulator summed once at the end, rather than
    summed after every load, where the threads wait on each other each time."""

    rows: int = 4
    cols: int = 512
    warps: int = 4
    stages: int = 1
    pile: bool = True


def tiles_for(n: int, weight_bytes: int = 2) -> Tiles:
    """The launch shape for `n` outputs of `weight_bytes`-byte weights.

    Float weights: 2 outputs a program, 1024 columns a load. On an H100 (a one-off probe, each
    Orpheus-3B layer alone, one bf16 row, 8 weight copies in one CUDA graph, 78 shapes tried a
    layer: rows 1-8, cols 256-1024, warps 2-8) this shape came within 0.6 us of each layer's
    fastest: q/k/v with its norm 13.0 us (13.2 with a sum per load at 4 x 512), the attention
    output 8.3 (cuBLAS 11.8), gate/up with its norm 35.1 (35.2), down 18.9 (cuBLAS 22.2), the
    narrowed head with the final norm 58.7 (cuBLAS, without the norm, 62.4).

    One-byte weights load 1024 columns, 8 outputs a program from `TALL` outputs and 4 below,
    with a sum per load: on an H200, int8 q/k/v with its norm took 9.7 us so (Inductor 14.8),
    gate/up 20.6 (Inductor 38.0)."""
    if weight_bytes == 1:
        return Tiles(rows=8 if n >= TALL else 4, cols=1024, pile=False)
    return Tiles(rows=2, cols=1024)


if triton is not None:

    @triton.jit
    def _matvec(x_ptr, g_ptr, w_ptr, s_ptr, r_ptr, y_ptr, n, k, w_row, eps,
                ROWS: tl.constexpr, COLS: tl.constexpr, NORM: tl.constexpr,
                SCALED: tl.constexpr, PILE: tl.constexpr, RESIDUAL: tl.constexpr):
        """y[j] = r[j] + s[j] * sum_c w[j, c] g[c] x[c] / sqrt(mean(x^2) + eps) for ROWS
        outputs j, in float32, rounded once; without NORM the g and root factors, without
        SCALED s[j], without RESIDUAL r[j] are left out. With PILE the products pile up in a
        (ROWS, COLS) accumulator summed across the columns once at the end, else each load's
        products are summed as they come (`Tiles.pile`)."""
        j = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        outputs = j < n
        weights = w_ptr + j[:, None].to(tl.int64) * w_row
        acc = tl.zeros((ROWS, COLS if PILE else 1), dtype=tl.float32)
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
            if PILE:
                acc += w * x[None, :]
            else:
                acc += tl.sum(w * x[None, :], axis=1, keep_dims=True)
        y = tl.sum(acc, axis=1)
        if NORM:
            y = y / tl.sqrt(tl.sum(squares, axis=0) / k + eps)
        if SCALED:
            y = y * tl.load(s_ptr + j, mask=outputs, other=0.0).to(tl.float32)
        if RESIDUAL:
            y += tl.load(r_ptr + j, mask=outputs, other=0.0).to(tl.float32)
        tl.store(y_ptr + j, y.to(y_ptr.dtype.element_ty), mask=outputs)


GLU_TILES = Tiles(rows=4, cols=512, pile=False)

if triton is not None:

    @triton.jit
    def _glu_matvec(x_ptr, g_ptr, w_ptr, s_ptr, y_ptr, n, k, w_row, eps, ROWS: tl.constexpr,
                    COLS: tl.constexpr, SCALED: tl.constexpr):
        """y[j] = silu(a[j]) * a[n + j], a = s * W (g * x) / sqrt(mean(x^2) + eps), for ROWS
        outputs j: each program reads its outputs' gate rows and their up rows, and sums each
        load's products as they come (`GLU_TILES`)."""
        j = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        outputs = j < n
        gate_w = w_ptr + j[:, None].to(tl.int64) * w_row
        up_w = gate_w + n.to(tl.int64) * w_row
        gate = tl.zeros((ROWS,), dtype=tl.float32)
        up = tl.zeros((ROWS,), dtype=tl.float32)
        squares = tl.zeros((COLS,), dtype=tl.float32)
        for c0 in range(0, k, COLS):
            c = c0 + tl.arange(0, COLS)
            inside = c < k
            both = outputs[:, None] & inside[None, :]
            x = tl.load(x_ptr + c, mask=inside, other=0.0).to(tl.float32)
            a = tl.load(gate_w + c[None, :], mask=both, other=0.0).to(tl.float32)
            b = tl.load(up_w + c[None, :], mask=both, other=0.0).to(tl.float32)
            squares += x * x
            x = x * tl.load(g_ptr + c, mask=inside, other=0.0).to(tl.float32)
            gate += tl.sum(a * x[None, :], axis=1)
            up += tl.sum(b * x[None, :], axis=1)
        root = tl.sqrt(tl.sum(squares, axis=0) / k + eps)
        ya = gate / root
        yb = up / root
        if SCALED:
            ya = ya * tl.load(s_ptr + j, mask=outputs, other=0.0).to(tl.float32)
            yb = yb * tl.load(s_ptr + n + j, mask=outputs, other=0.0).to(tl.float32)
        y = ya * tl.sigmoid(ya) * yb
        tl.store(y_ptr + j, y.to(y_ptr.dtype.element_ty), mask=outputs)


def launch_glu(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, eps: float,
               scale: torch.Tensor | None = None, tiles: Tiles = GLU_TILES) -> torch.Tensor:
    """SwiGLU of RMSNorm(g, eps)(x) [K] times w [2N, K] (gate rows, then up rows) -> [N].
    `tiles.pile` is not read: summing each load's products as they come is the shape that won
    (`lab.engine.swiglu`)."""
    n, k = w.shape[0] // 2, w.shape[1]
    w = w if w.stride(1) == 1 else w.contiguous()
    y = torch.empty(n, dtype=x.dtype, device=x.device)
    x = x.contiguous()
    _glu_matvec[(triton.cdiv(n, tiles.rows),)](
        x, g.contiguous(), w, x if scale is None else scale.reshape(-1), y, n, k, w.stride(0),
        eps, ROWS=tiles.rows, COLS=tiles.cols, SCALED=scale is not None, num_warps=tiles.warps,
        num_stages=tiles.stages)
    return y


@torch.library.custom_op("lab::glu_matvec", mutates_args=())
def glu_matvec(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, scale: torch.Tensor | None,
               eps: float) -> torch.Tensor:
    """x [1, K] through RMSNorm(g, eps), times w [2N, K], SwiGLU'd -> [1, N] in x's dtype."""
    return launch_glu(x.reshape(-1), w, g, eps, scale)[None]


@glu_matvec.register_fake
def _(x, w, g, scale, eps):
    return x.new_empty(1, w.shape[0] // 2)


def launch(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor | None = None, eps: float = 0.0,
           scale: torch.Tensor | None = None, tiles: Tiles | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel on x [K] and w [N, K] -> [N] in x's dtype, with the norm's weight g [K] and
    `eps` if given, one scale per output if given and a residual [N] added if given; `tiles`
    by default `tiles_for` the weights. What the op runs, and what a probe times shapes with."""
    n, k = w.shape
    w = w if w.stride(1) == 1 else w.contiguous()
    tiles = tiles or tiles_for(n, w.element_size())
    y = torch.empty(n, dtype=x.dtype, device=x.device)
    x = x.contiguous()
    _matvec[(triton.cdiv(n, tiles.rows),)](
        x, x if g is None else g.contiguous(), w, x if scale is None else scale.reshape(-1),
        x if residual is None else residual.reshape(-1), y, n, k, w.stride(0), eps,
        ROWS=tiles.rows, COLS=tiles.cols, NORM=g is not None, SCALED=scale is not None,
        PILE=tiles.pile, RESIDUAL=residual is not None, num_warps=tiles.warps,
        num_stages=tiles.stages)
    return y


@torch.library.custom_op("lab::matvec", mutates_args=())
def matvec(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor | None, scale: torch.Tensor | None,
           eps: float, residual: torch.Tensor | None = None) -> torch.Tensor:
    """x [1, K], through RMSNorm(g, eps) if g is given, times w [N, K], by one scale per output
    if given and plus `residual` [1, N] if given -> [1, N] in x's dtype."""
    return launch(x.reshape(-1), w, g, eps, scale, residual=residual)[None]


@matvec.register_fake
def _(x, w, g, scale, eps, residual=None):
    return x.new_empty(1, w.shape[0])
