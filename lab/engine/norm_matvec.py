"""A single token's RMSNorm and the projection after it, as one kernel (`lab.quant.matvec`);
and a single token's projections that add to the residual stream, with that sum, through the
same kernel.

The norm's statistic needs the whole row, and so does every output of the product, which
streams the row across its columns anyway: the kernel sums the squares on the way and scales
its outputs once, so a block's two norms launch nothing of their own. Only one token takes
this path: with more rows the product is a matrix product, which reads the weights once for
all rows, and the norm's own kernel is a small share.
"""

from __future__ import annotations

import torch
from torch import nn

from lab.engine.swiglu import swiglu
from lab.quant import int8_rows
from lab.quant.matvec import FLOATS, glu_matvec, matvec
from lab.quant.precision import is_plain
from lab.quant.triton_site import runs_kernels


def _operands(weight: torch.Tensor, dtype: torch.dtype, int8: bool = True):
    """(weights, scale) the kernel reads for `weight` against rows of `dtype`: a plain float
    weight of that dtype, or (if `int8`) int8 weight-only with one scale per output; None for
    any other weight (`is_plain`, since this runs where torch.compile traces)."""
    if is_plain(weight):
        return (weight, None) if weight.dtype == dtype else None
    if int8 and int8_rows.per_row(weight) and dtype in FLOATS:
        return weight.qdata, weight.scale
    return None


def reads(weight: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the kernel can take `weight` for a single token of `dtype` (where a report says
    which rows fold their norms)."""
    return _operands(weight, dtype) is not None


def _folded(x: torch.Tensor, norm: nn.Module | None, linear: nn.Module, int8: bool = True):
    """The kernel's (weights, scale) where `linear(norm(x))` (or `linear(x)` without a norm)
    runs as the kernel, else None: the norm allows it (its `folds`), one token, a kernel to
    run it, no gradient wanted, and a layer without bias whose weight the kernel reads
    (`_operands`, int8 weights only if `int8`; other quantized weights have kernels of their
    own). A layer is anything with a `weight` and a `bias` of None, as a narrowed head is."""
    if ((norm is None or norm.folds) and x.numel() == x.shape[-1] and runs_kernels(x)
            and not torch.is_grad_enabled() and getattr(linear, "bias", 0) is None):
        return _operands(linear.weight, x.dtype, int8)
    return None


def normed_linear(x: torch.Tensor, norm: nn.Module, linear: nn.Module,
                  int8: bool = True) -> torch.Tensor:
    """`linear(norm(x))` for an RMSNorm `norm` (its `weight` and `eps`): one kernel for a
    single token where `_folded` allows (int8 weights only if `int8`), the two modules
    otherwise."""
    operands = _folded(x, norm, linear, int8)
    if operands is None:
        return linear(norm(x))
    weights, scale = operands
    y = matvec(x.reshape(1, -1), weights, norm.weight, scale, norm.eps)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def normed_swiglu(x: torch.Tensor, norm: nn.Module, linear: nn.Module) -> torch.Tensor:
    """`swiglu(linear(norm(x)))` for a gate/up layer: one kernel for a single token where
    `_folded` allows, the product and the activation apart otherwise."""
    operands = _folded(x, norm, linear)
    if operands is None:
        return swiglu(linear(norm(x)))
    weights, scale = operands
    y = glu_matvec(x.reshape(1, -1), weights, norm.weight, scale, norm.eps)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def residual_linear(residual: torch.Tensor, x: torch.Tensor, linear: nn.Module) -> torch.Tensor:
    """`residual + linear(x)`, as one kernel for a single token of a float weight where
    `_folded` allows. Compiled, Inductor fuses the sum into its own one-row product, but not
    into a custom op, so the kernel adds it as it stores: without it the sums cost 56 kernels
    a step of the Orpheus-3B shape (`results/peers_h100_one_row.md`). int8 weights keep
    Inductor's product, which measured faster for them."""
    operands = _folded(x, None, linear, int8=False)
    if operands is None:
        return residual + linear(x)
    y = matvec(x.reshape(1, -1), operands[0], None, None, 0.0, residual.reshape(1, -1))
    return y.reshape(residual.shape)
