"""Small building blocks shared by the VITS sub-networks."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ChannelNorm(nn.Module):
    """LayerNorm over the channel axis of a [B, C, T] tensor, as VITS normalises conv features."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.transpose(1, -1), (x.shape[1],), self.gamma, self.beta, self.eps)
        return x.transpose(1, -1)


def pointwise(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """A kernel-1 convolution as one matrix product.

    At phoneme rate (a sentence is 50-150 ids) a convolution call spends longer arranging its
    operands than multiplying them: 192 channels over 112 ids took 88 us through oneDNN and
    52 us as a matrix product, on 2 cores of the lab's CPU.
    """
    y = torch.matmul(conv.weight[:, :, 0], x)
    return y if conv.bias is None else y + conv.bias[:, None]


def depthwise(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """A depthwise ('same'-padded, one filter per channel) convolution as a sum of shifted
    copies of the input, one per tap: 28 us against oneDNN's 65-86 us for the duration
    predictor's 192 channels over 112 ids (kernel 3, dilation 1 to 9), on the same CPU."""
    (dilation,), (pad,) = conv.dilation, conv.padding
    taps = conv.weight[:, 0]
    length = x.shape[-1] + 2 * pad - dilation * (taps.shape[-1] - 1)
    padded = F.pad(x, (pad, pad))
    y = taps[:, :1] * padded[..., :length]
    for j in range(1, taps.shape[-1]):
        y = y + taps[:, j:j + 1] * padded[..., j * dilation:j * dilation + length]
    return y if conv.bias is None else y + conv.bias[:, None]


def same_padding(kernel_size: int, dilation: int = 1) -> int:
    return (kernel_size * dilation - dilation) // 2


def sequence_mask(lengths: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
    """[B] lengths -> [B, T] boolean mask, True inside each sequence."""
    max_length = int(lengths.max()) if max_length is None else max_length
    return torch.arange(max_length, device=lengths.device)[None, :] < lengths[:, None]
