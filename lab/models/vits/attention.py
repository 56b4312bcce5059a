"""Multi-head self-attention with windowed relative positions, the VITS text encoder's attention.

Relative keys and values are learned for offsets -w..w; beyond the window the relative term is
zero. Instead of VITS's pad-and-reshape trick, offsets are gathered with an index matrix, which
gives the same numbers and reads as the definition.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def relative_offsets(length: int, window: int, device: torch.device) -> torch.Tensor:
    """[T, T] index into the 2w+1 relative table, with 2w+1 meaning 'outside the window'."""
    pos = torch.arange(length, device=device)
    offset = pos[None, :] - pos[:, None]
    index = offset + window
    return torch.where(offset.abs() <= window, index, torch.full_like(index, 2 * window + 1))


class RelativeAttention(nn.Module):
    def __init__(self, channels: int, n_heads: int, window: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = channels // n_heads
        self.window = window
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, channels, 1)
        self.emb_rel_k = nn.Parameter(torch.zeros(1, 2 * window + 1, self.head_dim))
        self.emb_rel_v = nn.Parameter(torch.zeros(1, 2 * window + 1, self.head_dim))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, _, t = x.shape
        return x.view(b, self.n_heads, self.head_dim, t).transpose(2, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, C, T]; mask [B, 1, T] float. Returns [B, C, T]."""
        b, c, t = x.shape
        q = self._heads(self.conv_q(x)) / math.sqrt(self.head_dim)
        k = self._heads(self.conv_k(x))
        v = self._heads(self.conv_v(x))
        index = relative_offsets(t, self.window, x.device)
        rel_k = F.pad(self.emb_rel_k[0], (0, 0, 0, 1))
        rel_v = F.pad(self.emb_rel_v[0], (0, 0, 0, 1))
        rel_logits = q @ rel_k.t()
        scores = q @ k.transpose(-2, -1)
        scores = scores + rel_logits.gather(-1, index.expand(b, self.n_heads, t, t))
        pair_mask = mask.unsqueeze(-1) * mask.unsqueeze(-2)
        scores = scores.masked_fill(pair_mask == 0, -1e4)
        weights = torch.softmax(scores, dim=-1)
        out = weights @ v
        by_offset = torch.zeros(
            b, self.n_heads, t, 2 * self.window + 2, dtype=weights.dtype, device=x.device
        )
        by_offset.scatter_add_(-1, index.expand(b, self.n_heads, t, t), weights)
        out = out + by_offset @ rel_v
        out = out.transpose(2, 3).reshape(b, c, t)
        return self.conv_o(out)
