"""Int4 weight-only matmul for many rows, as one Triton kernel over a plain copy of torchao's
int4 weights.

torchao's int4 weight-only linear (group 128, asymmetric, `tile_packed_to_4d`) calls
tinygemm, a CUDA kernel built for a few rows: as served on an H100, a batch-64 decode step of
the Orpheus shape took 13.98 ms against 3.74 in bf16, although it reads a quarter of the bytes
(with an earlier form of this kernel: 3.97 ms against 3.40,
`benchmarks/results/peers_b64.md`). tinygemm's tiles cannot be read by another kernel, so
`route` gives each int4 linear a second, plain copy of the same quantized values: two per
byte along the input dimension (low nibble first), with tinygemm's scale and zero per group
of 128 inputs and output. The kernel reads every packed tile once per tile of rows, turns
each group's 4-bit values into bf16 weights in registers, (q - 8) s + z (the rounding
tinygemm's bf16 product makes too), and multiplies them on the tensor cores into one float32
accumulator. Scaling each group's partial product instead keeps the 4-bit values exact but
waits for every group's dot before the next: on an H200 the four linears of one Orpheus-3B
block took 95 us that way at 32 rows against 74 with chained dots, and 168 against 143 at 128
(one-off probes, each layer alone, 8 weight copies in one CUDA graph; bf16 66 and 71).

The product is taken as w x^T, the weights' tile (64 or 128 outputs) on the tensor cores' wide
side and the rows on the narrow one, and on a Hopper the tiles of x and of the packed weights
come in through tensor descriptors (the TMA unit copies them while the threads compute). In
one later probe of the same kind, the block's linears took 70, 80 and 124 us so at 32, 64 and
128 rows against 74, 90 and 143 with x w^T and pointer loads (bf16 65, 65 and 71); either
change alone gained less, and w x^T with pointer loads made the gate/up product slower.

Where a layer has too few output tiles to fill the device, several programs share each tile's
groups and their float32 partial sums are added afterwards, in a fixed order
(`lab.quant.split_sums`).

`Int4RowsLinear` sends `MIN_ROWS` rows or more of bf16 activations on CUDA to the kernel and
fewer to tinygemm. The copy costs as much memory again as torchao's int4 weight (a quarter of
bf16's); the bytes a step reads do not grow, since each step reads one of the two.

On a CPU without Triton the op computes the same product in eager PyTorch; under Triton's
interpreter (TRITON_INTERPRET=1, how the tests check the kernel on a CPU) the kernel runs on
CPU tensors too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lab.quant.split_sums import added, output, processors, splits
from lab.quant.triton_site import TensorDescriptor, copies_tiles, runs_kernels, tl, triton, widens

# From 8 rows the kernel, with its 16-row tiles (`tiles`): on an H200, one Orpheus-3B block's
# four linears took 70 us through it at 8 rows against tinygemm's 86, and 70 against 57 at 4
# rows (a one-off probe, each layer alone, 8 weight copies in one CUDA graph). With 64-row
# tiles, tinygemm had won up to 12 rows on an H100 (`linear_kernels_int4_split_few.md`). One
# row stays with tinygemm too: a one-row Triton kernel over the plain copy (no tensor cores; each
# group's sums scaled once, or each weight rebuilt first; 2-32 outputs and 256-2048 columns a
# program) ran 1.2-1.6 times as long as tinygemm on every Orpheus-3B layer in a one-off H100
# probe (the four linears of a block 43 us through tinygemm; gate/up 23.6 us against 17.4).
# Neither did a layout whose bytes pair two output rows at one input, so no nibble interleave
# is undone in registers (another one-off H100 probe, best of 4-16 outputs, 4-8 groups a load,
# 1-8 warps): q/k/v 8.4 us against tinygemm's 8.8, but the attention output 6.6 against 5.9,
# gate/up 19.2 against 17.5 and down 14.7 against 10.8.
MIN_ROWS = 8
FEW = 16  # rows up to which a tile is 16 rows tall (`tiles`)
HALF = 32  # rows up to which a tile is 32 rows tall
MANY = 64  # rows past which the widest layers take 128-column tiles
DEEP_SPLIT = 2  # ways the widest layers share each tile's groups from FEW to MANY rows
MID = 8  # tinygemm's midpoint: a 4-bit value q means (q - 8) * scale + zero
DEEP = 16384  # outputs from which a layer takes its own tiles and split (`tiles`)

if triton is not None:

    @triton.jit
    def _int4_rows_mm(x_ptr, w_ptr, x_tiles, w_tiles, s_ptr, z_ptr, y_ptr, rows, n, x_row,
                      w_row, sz_group, y_row, y_split, per_split, block_m: tl.constexpr,
                      block_n: tl.constexpr, group: tl.constexpr, widen: tl.constexpr,
                      copied: tl.constexpr):
        """y[m, j] = sum over inputs of x w, w = (q - 8) s + z rebuilt in bf16 per group, one
        (block_m, block_n) tile of y per program over `per_split` groups of inputs, one group
        per iteration, the dots chained into one accumulator; program (., ., i) writes its sum
        over the i-th run of groups to y's i-th split. The product is taken as w x^T, so the
        weights' tile, the taller one, sits on the tensor cores' wide side. `copied`: x and the
        packed weights come in through their tensor descriptors (`x_tiles`, `w_tiles`) rather
        than pointers. The two 4-bit values of a byte are interleaved back in registers (two
        dots over the even and odd inputs instead, with strided loads of x, were 3 to 9 times
        slower on an H100). `widen`: float32 dots, for the interpreter, whose dot misreads
        bf16."""
        first_m, first_n = tl.program_id(0) * block_m, tl.program_id(1) * block_n
        m = first_m + tl.arange(0, block_m)
        j = first_n + tl.arange(0, block_n)
        first = tl.program_id(2) * per_split
        half = tl.arange(0, group // 2)
        acc = tl.zeros((block_n, block_m), dtype=tl.float32)
        for g in range(first, first + per_split):
            if copied:
                a = x_tiles.load([first_m, g * group])
                packed = w_tiles.load([first_n, g * (group // 2)])
            else:
                kk = g * group + tl.arange(0, group)
                a = tl.load(x_ptr + m[:, None].to(tl.int64) * x_row + kk[None, :],
                            mask=m[:, None] < rows, other=0.0)
                packed = tl.load(w_ptr + j[:, None].to(tl.int64) * w_row + g * (group // 2)
                                 + half[None, :], mask=j[:, None] < n, other=0)
            if widen:
                a = a.to(tl.float32)
            q = tl.join(packed & 15, packed >> 4).reshape(block_n, group).to(tl.float32)
            s = tl.load(s_ptr + g * sz_group + j, mask=j < n, other=0.0).to(tl.float32)
            z = tl.load(z_ptr + g * sz_group + j, mask=j < n, other=0.0).to(tl.float32)
            w = q * s[:, None] + (z - 8.0 * s)[:, None]
            acc = tl.dot(w.to(a.dtype), tl.trans(a), acc)
        out = y_ptr + tl.program_id(2).to(tl.int64) * y_split
        tl.store(out + m[None, :].to(tl.int64) * y_row + j[:, None],
                 acc.to(y_ptr.dtype.element_ty), mask=(m[None, :] < rows) & (j[:, None] < n))


@dataclass(frozen=True)
class PlainInt4:
    """Int4 weights [n, k] in the kernel's layout: `packed` [n, k/2] uint8 (input 2i in the low
    nibble, 2i+1 in the high), `scale` and `zero` [k/group, n] (tinygemm's own order)."""

    packed: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor

    @property
    def group(self) -> int:
        return 2 * self.packed.shape[1] // self.scale.shape[0]

    def dequantize(self) -> torch.Tensor:
        """The float32 weights [n, k] these values stand for."""
        q = torch.stack((self.packed & 15, self.packed >> 4), dim=-1).flatten(1).float()
        k = q.shape[1]
        return (q - MID) * _per_input(self.scale, k) + _per_input(self.zero, k)


def _per_input(groups: torch.Tensor, k: int) -> torch.Tensor:
    """A [k/group, n] table of per-group values as float32 [n, k]."""
    return groups.float().T.repeat_interleave(k // groups.shape[0], dim=1)


def pack(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> PlainInt4:
    """The kernel's layout of 4-bit values q [n, k] (0..15) with scale and zero [k/group, n]."""
    if q.shape[1] % 2 or q.min() < 0 or q.max() > 15:
        raise ValueError("q must hold values 0..15 along an even number of inputs")
    q = q.to(torch.uint8)
    return PlainInt4((q[:, ::2] | q[:, 1::2] << 4).contiguous(), scale.contiguous(),
                     zero.contiguous())


def from_dequantized(weight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> PlainInt4:
    """The 4-bit values behind `weight` [n, k], torchao's int4 weights dequantized with their
    scale and zero [k/group, n], packed; raises ValueError if they do not stand for `weight`
    (the values are recovered, not re-chosen, so the model stays the one torchao quantized)."""
    q = (weight.float() - _per_input(zero, weight.shape[1])) / _per_input(scale, weight.shape[1])
    q = (q + MID).round().clamp(0, 15)
    plain = pack(q, scale, zero)
    again = plain.dequantize().to(weight.dtype).float()
    if not torch.allclose(again, weight.float(), rtol=1e-2, atol=1e-3 * float(scale.abs().max())):
        raise ValueError("the int4 values do not reproduce the weight")
    return plain


def from_torchao(weight: torch.Tensor) -> PlainInt4:
    """A plain copy of a torchao int4 weight (tinygemm's layout): its float weights read back
    through its own product with the identity, and its scale and zero unpacked."""
    n, k = weight.shape
    eye = torch.eye(k, dtype=torch.bfloat16, device=weight.qdata.device)
    dense = F.linear(eye, weight).T  # [n, k]: one nonzero product per output, so exact
    sz = weight.scale_and_zero  # [k/group (padded), n (padded), 2]
    groups = k // weight.block_size[-1]
    return from_dequantized(dense, sz[:groups, :n, 0], sz[:groups, :n, 1])


@torch.library.custom_op("lab::int4_rows_mm", mutates_args=())
def int4_rows_mm(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor,
                 zero: torch.Tensor) -> torch.Tensor:
    """x [rows, k] times the plain int4 weights (`PlainInt4`'s tensors), as x's dtype."""
    plain = PlainInt4(packed, scale, zero)
    if not runs_kernels(x):
        return int4_rows_reference(x, plain)
    return launch(x, plain)


def launch(x: torch.Tensor, plain: PlainInt4, config: tuple[int, ...] | None = None,
           split: int | None = None, copied: bool | None = None) -> torch.Tensor:
    """The kernel on x [rows, k] and `plain`, with `config` (as `tiles` gives it), `split`
    ways of sharing each tile's groups, and tiles `copied` in through tensor descriptors or
    not, by default the code's own choice: what the op runs, and what a probe times shapes
    and a test checks both loads with."""
    x = x.contiguous()
    rows, k = x.shape
    n, groups = plain.packed.shape[0], plain.scale.shape[0]
    block_m, block_n, warps, stages = config or tiles(rows, n)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(n, block_n))
    split = split or split_for(rows, n, grid[0] * grid[1], groups, processors(x.device))
    if copied is None:
        copied = copies_tiles(x, plain.packed)
    x_tiles = w_tiles = None
    if copied:
        x_tiles = TensorDescriptor.from_tensor(x, [block_m, plain.group])
        w_tiles = TensorDescriptor.from_tensor(plain.packed, [block_n, plain.group // 2])
    y = output(rows, n, split, x)
    _int4_rows_mm[(*grid, split)](x, plain.packed, x_tiles, w_tiles, plain.scale, plain.zero,
                                  y, rows, n, x.stride(0), plain.packed.stride(0),
                                  plain.scale.stride(0), y.stride(-2),
                                  y.stride(0) if split > 1 else 0, groups // split,
                                  block_m=block_m, block_n=block_n, group=plain.group,
                                  widen=widens(x), copied=copied, num_warps=warps,
                                  num_stages=stages)
    return added(y, x.dtype)


@int4_rows_mm.register_fake
def _(x, packed, scale, zero):
    return x.new_empty(x.shape[0], packed.shape[0])


def int4_rows_reference(x: torch.Tensor, plain: PlainInt4) -> torch.Tensor:
    """The product in eager PyTorch, in float32, rounded to x's dtype once."""
    return (x.float() @ plain.dequantize().T).to(x.dtype)


def tiles(rows: int, n: int) -> tuple[int, int, int, int]:
    """(block_m, block_n, warps, stages) for `rows` x `n`: tiles about as tall as the rows,
    so that few of their dots go to padding, 64 columns, 4 warps, 3 stages deep, but for
    layers of `DEEP` outputs or more (Orpheus-3B's gate/up product), which fill the device
    with their own tiles.

    From one-off probes on an H200, each Orpheus-3B layer alone, 8 weight copies in one CUDA
    graph, 6 to 33 tile and split choices a row count, with the product then taken as x w^T
    through pointer loads (as w x^T with TMA loads, these tiles were again the fastest or near
    it of 5 tried at 32 to 128 rows); one block's four linears:
    - up to `FEW` rows, 16 rows tall, the widest layers 128 columns: 70 us at 8 and 16 rows
      (bf16 64);
    - up to `HALF` rows, 32 rows tall, the widest layers split two ways (`split_for`): 74 us
      at 24 and 32 rows (bf16 66); the gate/up product took 30 us so, 39 unsplit;
    - up to `MANY` rows, 64 rows tall, the widest layers 2 stages deep and split two ways:
      about 91 us at 48 and 64 rows (bf16 66); gate/up 35-37 us so, 40-42 unsplit with 3
      stages, 50 split with 3;
    - beyond, the widest layers 128 columns and 8 warps: 143 us at 96 and 128 rows (bf16 71);
      gate/up 60 us so, 77 with 64 columns."""
    if rows <= FEW:
        return 16, 128 if n >= DEEP else 64, 4, 3
    if rows <= HALF:
        return 32, 64, 4, 3
    if n < DEEP:
        return 64, 64, 4, 3
    return (64, 64, 4, 2) if rows <= MANY else (64, 128, 8, 3)


def split_for(rows: int, n: int, tile_count: int, groups: int, processor_count: int) -> int:
    """How many programs share each output tile's groups: `splits`' choice (as many as keep
    the grid within three waves of the processors), but `DEEP_SPLIT` for layers of `DEEP`
    outputs or more from `FEW` to `MANY` rows. Their tiles alone (256 for Orpheus-3B's
    gate/up on a 132-processor GPU) come near two waves, and two ways would pass three; yet
    each program spends most of its time waiting on loads, and twice the programs hide more
    of those waits (the gate/up figures in `tiles`)."""
    if n >= DEEP and FEW < rows <= MANY:
        return DEEP_SPLIT
    return splits(tile_count, groups, processor_count)


def takes(x: torch.Tensor) -> bool:
    """Whether `MIN_ROWS` rows or more of bf16 on CUDA (or under the interpreter) go to the
    kernel rather than to tinygemm."""
    return runs_kernels(x) and x.dtype == torch.bfloat16 and x.numel() >= MIN_ROWS * x.shape[-1]


class Int4RowsLinear(nn.Linear):
    """An nn.Linear over torchao's int4 weight whose product runs through the kernel, on
    `plain`, its copy, where it `takes` the rows, and through tinygemm elsewhere."""

    plain: PlainInt4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not takes(x):
            return F.linear(x, self.weight, self.bias)
        p = self.plain
        y = int4_rows_mm(x.reshape(-1, x.shape[-1]), p.packed, p.scale, p.zero)
        y = y.reshape(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias


def route(model: nn.Module, names: list[str]) -> None:
    """Give the named int4 nn.Linear layers of `model` a plain copy of their weights and
    `Int4RowsLinear`'s forward, in place (their weight, names and owners stay the same)."""
    for name in names:
        layer = model.get_submodule(name)
        if type(layer) is nn.Linear and hasattr(layer.weight, "scale_and_zero"):
            layer.plain = from_torchao(layer.weight)
            layer.__class__ = Int4RowsLinear
