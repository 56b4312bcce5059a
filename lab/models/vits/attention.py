"""Multi-head self-attention with windowed relative positions, the VITS text encoder's attention.

Relative keys and values are learned for offsets -w..w; beyond the window the relative term is
zero. Instead of VITS's pad-and-reshape trick, offsets are gathered with an index matrix, which
gives the same numbers and reads as the definition. The index and the padding mask depend only
on the lengths, so the encoder builds them once (`AttentionLayout`) for all its layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def relative_offsets(length: int, window: int, device: torch.device) -> torch.Tensor:
    """[T, T] index into the 2w+1 relative table, with 2w+1 meaning 'outside the window'."""
    pos = torch.arange(length, device=device)
    offset = pos[None, :] - pos[:, None]
    index = offset + window
    return torch.where(offset.abs() <= window, index, torch.full_like(index, 2 * window + 1))


@dataclass(frozen=True)
class AttentionLayout:
    """What every layer's attention needs to know of a batch's positions.

    `index` [T, T] from `relative_offsets`; `blocked` [B, 1, T, T] True where either position
    is padding, or None when no item is padded.
    """

    index: torch.Tensor
    blocked: torch.Tensor | None

    @classmethod
    def of(cls, mask: torch.Tensor, window: int) -> AttentionLayout:
        """From the [B, 1, T] float mask."""
        index = relative_offsets(mask.shape[-1], window, mask.device)
        if bool(mask.all()):
            return cls(index, None)
        return cls(index, (mask.unsqueeze(-1) * mask.unsqueeze(-2)) == 0)


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

    def forward(self, x: torch.Tensor, layout: AttentionLayout) -> torch.Tensor:
        """x [B, C, T]. Returns [B, C, T]."""
        b, c, t = x.shape
        q = self._heads(self.conv_q(x)) / math.sqrt(self.head_dim)
        k = self._heads(self.conv_k(x))
        v = self._heads(self.conv_v(x))
        index = layout.index.expand(b, self.n_heads, t, t)
        rel_k = F.pad(self.emb_rel_k[0], (0, 0, 0, 1))
        rel_v = F.pad(self.emb_rel_v[0], (0, 0, 0, 1))
        scores = (q @ k.transpose(-2, -1)).add_((q @ rel_k.t()).gather(-1, index))
        if layout.blocked is not None:
            scores.masked_fill_(layout.blocked, -1e4)
        weights = torch.softmax(scores, dim=-1)
        out = weights @ v
        by_offset = torch.zeros(
            b, self.n_heads, t, 2 * self.window + 2, dtype=weights.dtype, device=x.device
        )
        by_offset.scatter_add_(-1, index, weights)
        out = out + by_offset @ rel_v
        out = out.transpose(2, 3).reshape(b, c, t)
        return self.conv_o(out)
