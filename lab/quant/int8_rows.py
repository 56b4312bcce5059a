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
accumulator: the bytes a step reads stay the int8 weights. `Int8RowsLinear` routes 2 rows or
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

from lab.quant.triton_site import runs_kernels, tl, triton, widens

FLOAT_ROWS = (torch.bfloat16, torch.float16)
MIN_ROWS = 2

if triton is not None:

    @triton.jit
    def _int8_rows_mm(x_ptr, w_ptr, s_ptr, y_ptr, rows, n, k, x_row, w_row, y_row,
                      block_m: tl.constexpr, block_n: tl.constexpr, block_k: tl.constexpr,
                      widen: tl.constexpr):
        """y[m, j] = scale[j] * sum_k x[m, k] * w[j, k], one (block_m, block_n) tile of y per
        program; the int8 tile is widened to x's dtype before the dot (`widen`: both go to
        float32 first, for the interpreter, whose dot misreads bf16)."""
        m = tl.program_id(0) * block_m + tl.arange(0, block_m)
        j = tl.program_id(1) * block_n + tl.arange(0, block_n)
        acc = tl.zeros((block_m, block_n), dtype=tl.float32)
        for start in range(0, k, block_k):
            kk = start + tl.arange(0, block_k)
            a = tl.load(x_ptr + m[:, None].to(tl.int64) * x_row + kk[None, :],
                        mask=(m[:, None] < rows) & (kk[None, :] < k), other=0.0)
            if widen:
                a = a.to(tl.float32)
            b = tl.load(w_ptr + j[:, None].to(tl.int64) * w_row + kk[None, :],
                        mask=(j[:, None] < n) & (kk[None, :] < k), other=0)
            acc = tl.dot(a, tl.trans(b.to(a.dtype)), acc)
        scale = tl.load(s_ptr + j, mask=j < n, other=0.0).to(tl.float32)
        out = (acc * scale[None, :]).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + m[:, None].to(tl.int64) * y_row + j[None, :], out,
                 mask=(m[:, None] < rows) & (j[None, :] < n))


WIDE = 4096  # outputs from which a layer's column tiles are 64 wide rather than 32
WIDEST = 16384  # outputs from which they are 128 wide


def tiles(rows: int, n: int) -> tuple[int, int, int, int, int]:
    """(block_m, block_n, block_k, warps, stages) for a product of `rows` x `n`: row tiles as
    tall as the rows (16 to 64), and the column tile, depth, warps and pipeline stages that were
    fastest on an H100 at 2, 16 and 64 rows of Llama-3B-shaped weights, out of 36 tried
    (columns 16-64, depth 128-512, 4 or 8 warps, 3 or 4 stages): narrower column tiles left
    the processors waiting on their loads, wider ones too few programs to read the weights.
    Layers with `WIDE` outputs or more have programs enough for 64-wide tiles: at 64 rows
    Orpheus-3B's gate/up product took 42 us with them against 50 (bf16: 50), q/k/v 24.5
    against 27; the attention output and down projection (3,072 outputs) were slower (a one-off
    probe; splitting their inputs across programs, as the int4 kernel does, gained nothing).
    On an H200, over 108 shapes at 64 rows (columns 32-256, depth 32-256, 4 or 8 warps, 2-5
    stages; 8 weight copies, a one-off probe), 3 stages were fastest from `WIDE` outputs
    (q/k/v 18.6 us against 20.7 with 4) and `WIDEST` outputs take 128-wide tiles (gate/up 30.2
    against 39.6; bf16 27.6): the served int8 step at batch 64 went from 3.54 to 3.18 ms in
    kernel profiles on two H200s. Weights as the dot's first operand, which Hopper's tensor
    cores can take from registers, were no faster (gate/up 29.2, down 44.8)."""
    block_n = 128 if n >= WIDEST else 64 if n >= WIDE else 32
    return min(64, max(16, triton.next_power_of_2(rows))), block_n, 256, 4, 3 if n >= WIDE else 4


@torch.library.custom_op("lab::int8_rows_mm", mutates_args=())
def int8_rows_mm(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [rows, k] times int8 weights qdata [n, k] with one scale per output, as x's dtype."""
    if not runs_kernels(x):
        return int8_rows_reference(x, qdata, scale)
    x, qdata = x.contiguous(), qdata if qdata.stride(1) == 1 else qdata.contiguous()
    scale = scale.reshape(-1)
    rows, k = x.shape
    n = qdata.shape[0]
    y = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    block_m, block_n, block_k, warps, stages = tiles(rows, n)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(n, block_n))
    _int8_rows_mm[grid](x, qdata, scale, y, rows, n, k, x.stride(0), qdata.stride(0),
                        y.stride(0), block_m=block_m, block_n=block_n, block_k=block_k,
                        widen=widens(x), num_warps=warps,
                        num_stages=stages)
    return y


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
