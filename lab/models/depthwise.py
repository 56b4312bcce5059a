"""SNAC's depthwise convolutions as sums of shifted slices, which torch.compile fuses.

Every residual unit of SNAC's decoder runs snake, a depthwise convolution (kernel 7, one filter
per channel, dilation 1, 3 or 9), then snake again. PyTorch has no fast kernel for a dilated
depthwise convolution in fp16: in a kernel timeline of an H100 serving Orpheus-3B streams, its
generic one took 0.7 ms of the codec's 2.6 ms a step. Written as
`bias + sum_k w[:, k] * x[..., k * dilation : k * dilation + T]` the convolution is pointwise
work, which a compiled codec fuses with the snakes around it into one pass over memory (its
arithmetic in fp32, whatever the activations' dtype).

Only for a compiled codec on a GPU (`snac_codec.sums_depthwise`): run eagerly, the sum is a
kernel per tap, and on a CPU oneDNN's depthwise kernel beat the compiled sum.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ShiftedDepthwise(nn.Module):
    """A depthwise `nn.Conv1d` (stride 1, zero padding) as a sum of shifted slices; takes over
    the convolution's weight [C, 1, K] and bias."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        if not is_depthwise(conv):
            raise ValueError(f"{conv} is not a depthwise convolution of stride 1 with zero "
                             "padding")
        self.weight, self.bias = conv.weight, conv.bias
        self.dilation, self.padding = conv.dilation[0], conv.padding[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        taps = self.weight.shape[-1]
        x = F.pad(x, (self.padding, self.padding))
        length = x.shape[-1] - self.dilation * (taps - 1)
        y = self.weight[:, 0, 0, None] * x[..., :length]
        for k in range(1, taps):
            start = k * self.dilation
            y = y + self.weight[:, 0, k, None] * x[..., start:start + length]
        return y if self.bias is None else y + self.bias[:, None]


def is_depthwise(module: nn.Module) -> bool:
    return (isinstance(module, nn.Conv1d) and module.groups == module.in_channels
            == module.out_channels and module.stride == (1,) and module.padding_mode == "zeros"
            and isinstance(module.padding, tuple))


def shift_depthwise(model: nn.Module) -> int:
    """Replace every depthwise `nn.Conv1d` in `model` with `ShiftedDepthwise`; returns how
    many. Weight norm must be folded first (a parametrized weight is recomputed per call)."""
    swaps = [(parent, name, child) for parent in model.modules()
             for name, child in parent.named_children() if is_depthwise(child)]
    for parent, name, child in swaps:
        setattr(parent, name, ShiftedDepthwise(child))
    return len(swaps)
