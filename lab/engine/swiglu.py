"""SwiGLU, SiLU(gate) * up, as one Triton kernel that a compiled step calls rather than fuses.

Compiled, Inductor fuses `F.silu(gate) * up` into the one-row down projection that reads it,
so every program of that matrix-vector reduction computes the activation again for its own
outputs. In kernel profiles of the Orpheus-3B shape's batch-1 step on H100s that reduction
took 0.69-0.78 ms a step in bf16 (where the gate/up product read its weights at 2.9 TB/s) and
0.42-0.64 ms with int8 weights. As a custom op the activation is computed once per step and the
down product, reading a ready vector, took 0.49 and 0.32 ms; the bf16 step took 2.57 ms in two
compiles with it and 2.62-3.12 without (`benchmarks/results/peers_b1.md`).

A single token's gate/up product applies the activation as it stores (`lab::glu_matvec`, in
`lab/quant/matvec.py`), so this kernel runs for steps of more than one token. An earlier launch
shape of that joined kernel lost in the served step: its one-row products took 2183 us against
2081 plus this kernel's 40 in bf16, and 912 against 845 plus 35 with int8 weights. A one-off
probe of gate/up alone (one H100, 8 weight copies in one CUDA graph) found the shape that wins,
4 outputs a program, 512 columns a load, each load's products summed as they come: 34.6 us
against 36.7 for the two kernels in bf16, 21.9 against 23.2 with int8 weights. In the served
step (one H100, kernel profile) the step's kernels then took 2330 us against 2379 in bf16 and
1697 against 1842 with int8 weights, and two runs of the peers benchmark, one build after the
other in one command, gave 2.39 ms a bf16 step against 2.44
(`benchmarks/results/peers_h100_b1_ab_glu.md` beside `peers_h100_b1_ab_base.md`).

Where no Triton kernel runs (a CPU without the interpreter) and where a gradient is needed
(training), it is the plain expression.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lab.quant.triton_site import runs_kernels, tl, triton

BLOCK = 1024

if triton is not None:

    @triton.jit
    def _swiglu(h_ptr, y_ptr, width, h_row, y_row, BLOCK: tl.constexpr):
        """y[r, c] = silu(h[r, c]) * h[r, width + c] for one block of one row, in float32,
        rounded once."""
        r = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = c < width
        gate = tl.load(h_ptr + r * h_row + c, mask=inside, other=0.0).to(tl.float32)
        up = tl.load(h_ptr + r * h_row + width + c, mask=inside, other=0.0).to(tl.float32)
        y = gate * tl.sigmoid(gate) * up
        tl.store(y_ptr + r * y_row + c, y.to(y_ptr.dtype.element_ty), mask=inside)


@torch.library.custom_op("lab::swiglu", mutates_args=())
def swiglu_op(h: torch.Tensor) -> torch.Tensor:
    """h [rows, 2 * width] (gate, then up) -> [rows, width] in h's dtype."""
    h = h.contiguous()
    rows, width = h.shape[0], h.shape[1] // 2
    y = h.new_empty(rows, width)
    _swiglu[(rows, triton.cdiv(width, BLOCK))](h, y, width, h.stride(0), y.stride(0),
                                               BLOCK=BLOCK)
    return y


@swiglu_op.register_fake
def _(h):
    return h.new_empty(h.shape[0], h.shape[1] // 2)


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """SiLU of h's first half of the last axis times its second half."""
    if not runs_kernels(h) or (torch.is_grad_enabled() and h.requires_grad):
        gate, up = h.chunk(2, dim=-1)
        return F.silu(gate) * up
    y = swiglu_op(h.reshape(-1, h.shape[-1]))
    return y.reshape(*h.shape[:-1], y.shape[-1])
