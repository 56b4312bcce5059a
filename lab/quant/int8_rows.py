"""Int8 weight-only matmul for more than one row, as one Triton kernel on a CUDA device.

torchao's int8 weight-only linear computes `x @ w.to(x.dtype).T * scale`. Compiled, Inductor
turns one row of it into a fused matrix-vector kernel that beats bf16: on an H100, four
Llama-3B blocks' linears took 0.16 ms in int8 (403 MB) against 0.33 in bf16 (805 MB). For two
rows or more it calls `aten._weight_int8pack_mm`, whose CUDA kernel took 58.7 ms on the same
weights at 64 rows (a one-off probe), where bf16 takes 0.36 ms: a batched decode step of the
Orpheus shape went from 4 ms to 476 ms, so int8 served one stream well and a batch not at all.
With this kernel the same linears take 0.23 ms at 16 rows and 0.45 ms at 64
(`benchmarks/results/linear_kernels_int4_tiles.md`, which has the int8 rows too).

Here every tile of int8 weights is read once per tile of rows, widened to the activation's
dtype in registers and fed to the tensor cores, and the per-row scale is applied to the
accumulator: the bytes a step reads stay the int8 weights. Narrow tiles give many programs,
and where a layer's tiles still leave processors idle several programs share each tile's
inputs and add their float32 partial sums afterwards (`split_for`, `lab.quant.split_sums`):
on an H200 the served int8 step at batch 64 went from 3.18 to 2.87 ms with it, against 2.62
in bf16 (`benchmarks/results/peers_split_h200.md`). `Int8RowsLinear` routes 2 rows or
more (bf16 or fp16 activations, on CUDA) to the kernel, through a custom op that torch.compile
keeps opaque, so Inductor cannot turn it back into the slow call; one row, other devices and
other dtypes keep torchao's path, except a one-token step's q/k/v and gate/up, which run with
the norm before them through `lab.quant.matvec` (see `lab.engine.norm_matvec`). `route` gives a
quantized model's int8 linears that behaviour without replacing them, so their weights, names
and state stay where they were.

On a CPU without Triton the op computes the same product in eager PyTorch; under Triton's
interpreter (TRITON_INTERPRET=1, how the tests check the kernel on a CPU) the kernel runs on
CPU tensors too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lab.quant.split_sums import added, output, processors, splits
from lab.quant.triton_site import runs_kernels, tl, triton, widens

FLOAT_ROWS = (torch.bfloat16, torch.float16)
MIN_ROWS = 2

if triton is not None:

    @triton.jit
    def _int8_rows_mm(x_ptr, w_ptr, s_ptr, y_ptr, rows, n, k, x_row, w_row, y_row, y_split,
                      per_split, block_m: tl.constexpr, block_n: tl.constexpr,
                      block_k: tl.constexpr, widen: tl.constexpr):
        """y[m, j] = scale[j] * sum_k x[m, k] * w[j, k], one (block_m, block_n) tile of y per
        program over `per_split` blocks of inputs; program (., ., i) writes its sum over the
        i-th run of blocks to y's i-th split (`lab.quant.split_sums`). The int8 tile is widened
        to x's dtype before the dot (`widen`: both go to float32 first, for the interpreter,
        whose dot misreads bf16)."""
        m = tl.program_id(0) * block_m + tl.arange(0, block_m)
        j = tl.program_id(1) * block_n + tl.arange(0, block_n)
        first = tl.program_id(2) * per_split * block_k
        acc = tl.zeros((block_m, block_n), dtype=tl.float32)
        for start in range(first, first + per_split * block_k, block_k):
            kk = start + tl.arange(0, block_k)
            a = tl.load(x_ptr + m[:, None].to(tl.int64) * x_row + kk[None, :],
                        mask=(m[:, None] < rows) & (kk[None, :] < k), other=0.0)
            if widen:
                a = a.to(tl.float32)
            b = tl.load(w_ptr + j[:, None].to(tl.int64) * w_row + kk[None, :],
                        mask=(j[:, None] < n) & (kk[None, :] < k), other=0)
            acc = tl.dot(a, tl.trans(b.to(a.dtype)), acc)
        scale = tl.load(s_ptr + j, mask=j < n, other=0.0).to(tl.float32)
        out = y_ptr + tl.program_id(2).to(tl.int64) * y_split
        tl.store(out + m[:, None].to(tl.int64) * y_row + j[None, :],
                 (acc * scale[None, :]).to(y_ptr.dtype.element_ty),
                 mask=(m[:, None] < rows) & (j[None, :] < n))


WIDE = 4096  # outputs from which a layer's column tiles are 64 wide rather than 32 (few rows)
WIDEST = 16384  # outputs from which they are 128 wide (many rows)
TALL = 32  # rows past which a row tile is 64 tall and takes `tiles`' many-row shape
MIN_BLOCKS = 6  # blocks of inputs each program keeps at least when they are split


def tiles(rows: int, n: int) -> tuple[int, int, int, int, int]:
    """(block_m, block_n, block_k, warps, stages) for a product of `rows` x `n`, row tiles as
    tall as the rows (16 to 64). On an H200, per Orpheus-3B layer (q/k/v 5,120 x 3,072,
    attention output 3,072 x 3,072, gate/up 16,384 x 3,072, down 3,072 x 8,192), over 32
    shapes (columns 32-256, depth 128 or 256, 4 or 8 warps, 3 or 4 stages) each with its
    inputs split 1 to 16 ways (`split_for`), 8 weight copies, a one-off probe:

    - 64 rows: 32-wide tiles 128 deep, 3 stages (`WIDEST` outputs: 128 wide), split 2-4 ways:
      q/k/v 17.0 us, attention output 11.5, gate/up 27.8, down 20.6, where the tiles before
      (64-256 wide, 256 deep, unsplit) took 19.0, 12.0, 29.2 and 26.8, and bf16 (cuBLAS)
      10.7, 8.5, 26.9 and 19.5. A 32-wide tile holds few rows of weights, so many programs
      read them; split, each reads a share of the inputs, and the device fills.
    - 16 rows: 256 deep, 4 stages, 64 wide from `WIDE` outputs: q/k/v 11.2 us (split 2
      ways; 9.6 unsplit), attention output 8.9 (2 ways; 7.9), gate/up 16.1, down 12.9 (4
      ways; 15.6), where 128-wide gate/up tiles took 17.7. One rule for the split serves
      both row counts; 64 rows, the batched step, weighed more.

    Hopper's tensor cores wait on the int8 tile's widening here: at 64 rows q/k/v reads half
    bf16's bytes in 1.6 times its time. Weights as the dot's first operand, which they can
    take from registers, were no faster (gate/up 29.2, down 44.8, an earlier probe)."""
    block_m = min(64, max(16, triton.next_power_of_2(rows)))
    if rows > TALL:
        return block_m, 128 if n >= WIDEST else 32, 128, 4, 3
    return block_m, 64 if n >= WIDE else 32, 256, 4, 4


def split_for(tile_count: int, blocks: int, device: torch.device) -> int:
    """How many programs share each output tile's `blocks` of inputs: the largest power of two
    that divides them, leaves each program `MIN_BLOCKS` or more, and keeps the grid within
    `split_sums.WAVES` waves of the device's processors (`tiles` gives the probe behind it)."""
    return splits(tile_count, blocks, processors(device), MIN_BLOCKS, powers_of_two=True)


@torch.library.custom_op("lab::int8_rows_mm", mutates_args=())
def int8_rows_mm(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [rows, k] times int8 weights qdata [n, k] with one scale per output, as x's dtype."""
    if not runs_kernels(x):
        return int8_rows_reference(x, qdata, scale)
    return launch(x, qdata, scale)


def launch(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor,
           config: tuple[int, ...] | None = None, split: int | None = None) -> torch.Tensor:
    """The kernel on x [rows, k] and qdata [n, k], with `config` (as `tiles` gives it) and
    `split` ways of sharing each tile's inputs, by default the code's own choice: what the op
    runs, and what a probe times shapes with."""
    x, qdata = x.contiguous(), qdata if qdata.stride(1) == 1 else qdata.contiguous()
    rows, k = x.shape
    n = qdata.shape[0]
    block_m, block_n, block_k, warps, stages = config or tiles(rows, n)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(n, block_n))
    blocks = triton.cdiv(k, block_k)
    split = split or split_for(grid[0] * grid[1], blocks, x.device)
    y = output(rows, n, split, x)
    _int8_rows_mm[(*grid, split)](x, qdata, scale.reshape(-1), y, rows, n, k, x.stride(0),
                                  qdata.stride(0), y.stride(-2), y.stride(0) if split > 1 else 0,
                                  blocks // split, block_m=block_m, block_n=block_n,
                                  block_k=block_k, widen=widens(x), num_warps=warps,
                                  num_stages=stages)
    return added(y, x.dtype)


@int8_rows_mm.register_fake
def _(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], qdata.shape[0])


def int8_rows_reference(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The product in eager PyTorch, in float32, rounded to x's dtype once."""
    return ((x.float() @ qdata.float().T) * scale.reshape(1, -1).float()).to(x.dtype)


def per_row(weight: torch.Tensor) -> bool:
    """Whether `weight` is int8 weight-only with one scale per output row (no activation
    quantization): int8 values and scales are all a kernel needs to read."""
    qdata = getattr(weight, "qdata", None)
    return (qdata is not None and qdata.dtype == torch.int8 and qdata.dim() == 2
            and getattr(weight, "act_quant_kwargs", 1) is None
            and list(weight.block_size) == [1, qdata.shape[1]])


def takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the kernel computes `x @ weight.T`: a `per_row` weight, and `MIN_ROWS` rows or
    more of bf16 or fp16 on CUDA (or under the interpreter)."""
    return (runs_kernels(x) and x.dtype in FLOAT_ROWS and x.numel() >= MIN_ROWS * x.shape[-1]
            and per_row(weight))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, through the kernel where it `takes` the operands."""
    if not takes(x, weight):
        return F.linear(x, weight, bias)
    y = int8_rows_mm(x.reshape(-1, x.shape[-1]), weight.qdata, weight.scale)
    y = y.reshape(*x.shape[:-1], y.shape[-1])
    return y if bias is None else y + bias


class Int8RowsLinear(nn.Linear):
    """An nn.Linear whose int8 weight-only product runs through `linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def route(model: nn.Module, names: list[str]) -> None:
    """Give the named nn.Linear layers of `model` `Int8RowsLinear`'s forward. The layer's
    class changes in place, so its weight, its name in the model and anything holding it (a
    narrowed head keeps its full head) stay the same objects."""
    for name in names:
        layer = model.get_submodule(name)
        if type(layer) is nn.Linear:
            layer.__class__ = Int8RowsLinear
