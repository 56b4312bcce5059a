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


def same_padding(kernel_size: int, dilation: int = 1) -> int:
    return (kernel_size * dilation - dilation) // 2


def sequence_mask(lengths: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
    """[B] lengths -> [B, T] boolean mask, True inside each sequence."""
    max_length = int(lengths.max()) if max_length is None else max_length
    return torch.arange(max_length, device=lengths.device)[None, :] < lengths[:, None]
