"""Several programs share one output tile's inputs, and their float32 partial sums are added
afterwards in a fixed order: how the lab's row kernels (`int4_rows`, `int8_rows`) fill a
device when a layer has few output tiles.

A layer with few output columns (Orpheus-3B's attention output and down projection: 48 tiles
of 64 at 64 rows, on an H100's 132 processors) otherwise leaves most processors idle while
each program walks every input: split 8 ways, the int4 down projection took 29 us against 62
in a probe (bf16: 33). The partial sums go to a float32 buffer [split, rows, n] and are added
in split order, so the same input gives the same output.
"""

from __future__ import annotations

import functools

import torch

from lab.quant.triton_site import tl, triton

WAVES = 3  # grid programs per processor that `splits` aims at
SUM_BLOCK = 1024  # outputs per program when the partial sums are added
INTERPRETER_PROCESSORS = 4

if triton is not None:

    @triton.jit
    def _sum_splits(part_ptr, y_ptr, size, split, block: tl.constexpr):
        """y = the sum of `split` float32 partial products [split, size], added in split
        order and rounded once. As one kernel: torch's sum and cast took two, 0.45 ms of a
        4.1 ms batch-64 int4 step of the Orpheus shape on an H100 (a kernel profile)."""
        i = tl.program_id(0).to(tl.int64) * block + tl.arange(0, block)
        inside = i < size
        part = part_ptr + i
        total = tl.zeros([block], dtype=tl.float32)
        for _ in range(split):
            total += tl.load(part, mask=inside, other=0.0)
            part += size
        tl.store(y_ptr + i, total.to(y_ptr.dtype.element_ty), mask=inside)


@functools.cache
def splits(tile_count: int, steps: int, processor_count: int, least: int = 1,
           powers_of_two: bool = False) -> int:
    """How many programs share each output tile's `steps` (groups or blocks of inputs): the
    most that divides `steps`, leaves each program `least` steps or more and keeps the grid
    within `WAVES` waves of the device's processors; with `powers_of_two`, only those."""
    best = 1
    for split in range(2, steps // least + 1):
        if powers_of_two and split & (split - 1):
            continue
        if steps % split == 0 and tile_count * split <= WAVES * processor_count:
            best = split
    return best


def processors(device: torch.device) -> int:
    """The streaming multiprocessors of a CUDA device; a fixed few elsewhere (the interpreter),
    so that the CPU checks split too."""
    if device.type != "cuda":
        return INTERPRETER_PROCESSORS
    return _cuda_processors(device.index if device.index is not None
                            else torch.cuda.current_device())


@functools.cache
def _cuda_processors(index: int) -> int:
    """Read once per device: eager steps call the row kernels for every linear layer."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def output(rows: int, n: int, split: int, like: torch.Tensor) -> torch.Tensor:
    """Where a row kernel writes: y [rows, n] in x's dtype unsplit, else the float32 partial
    sums [split, rows, n]."""
    if split == 1:
        return torch.empty(rows, n, dtype=like.dtype, device=like.device)
    return torch.empty(split, rows, n, dtype=torch.float32, device=like.device)


def added(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`output`'s tensor as the product [rows, n] of `dtype`: itself unsplit, else its partial
    sums added in split order."""
    if y.dim() == 2:
        return y
    out = torch.empty(y.shape[1:], dtype=dtype, device=y.device)
    _sum_splits[(triton.cdiv(out.numel(), SUM_BLOCK),)](y, out, out.numel(), y.shape[0],
                                                        block=SUM_BLOCK)
    return out
