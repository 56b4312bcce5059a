"""Phoneme ids -> per-phoneme prior statistics (mean, log-std) of the latent acoustic frames."""

from __future__ import annotations

import math

import torch
from torch import nn

from lab.models.vits.attention import AttentionLayout, RelativeAttention
from lab.models.vits.layers import ChannelNorm


class FeedForward(nn.Module):
    """Two 'same'-padded convolutions; inputs are masked first so padding never leaks in."""

    def __init__(self, channels: int, hidden: int, kernel_size: int) -> None:
        super().__init__()
        self.conv_1 = nn.Conv1d(channels, hidden, kernel_size, padding=kernel_size // 2)
        self.conv_2 = nn.Conv1d(hidden, channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv_1(x * mask))
        return self.conv_2(x * mask) * mask


class Encoder(nn.Module):
    def __init__(
        self, channels: int, hidden: int, n_heads: int, n_layers: int, kernel_size: int, window: int
    ) -> None:
        super().__init__()
        self.window = window
        self.attn_layers = nn.ModuleList(
            RelativeAttention(channels, n_heads, window) for _ in range(n_layers)
        )
        self.norm_layers_1 = nn.ModuleList(ChannelNorm(channels) for _ in range(n_layers))
        self.ffn_layers = nn.ModuleList(
            FeedForward(channels, hidden, kernel_size) for _ in range(n_layers)
        )
        self.norm_layers_2 = nn.ModuleList(ChannelNorm(channels) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x * mask
        layout = AttentionLayout.of(mask, self.window)
        layers = zip(
            self.attn_layers, self.norm_layers_1, self.ffn_layers, self.norm_layers_2, strict=True
        )
        for attn, norm_1, ffn, norm_2 in layers:
            x = norm_1(x + attn(x, layout))
            x = norm_2(x + ffn(x, mask))
        return x * mask


class TextEncoder(nn.Module):
    def __init__(
        self,
        n_symbols: int,
        channels: int = 192,
        hidden: int = 768,
        n_heads: int = 2,
        n_layers: int = 6,
        kernel_size: int = 3,
        window: int = 4,
    ) -> None:
        super().__init__()
        self.channels = channels
        self.emb = nn.Embedding(n_symbols, channels)
        self.encoder = Encoder(channels, hidden, n_heads, n_layers, kernel_size, window)
        self.proj = nn.Conv1d(channels, 2 * channels, 1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor):
        """ids [B, T]; mask [B, 1, T]. Returns hidden [B, C, T], mean and log-std [B, C, T]."""
        x = self.emb(ids) * math.sqrt(self.channels)
        x = self.encoder(x.transpose(1, 2), mask)
        mean, log_std = torch.split(self.proj(x) * mask, self.channels, dim=1)
        return x, mean, log_std


def expand_by_durations(
    stats: torch.Tensor, durations: torch.Tensor, frame_mask: torch.Tensor
) -> torch.Tensor:
    """Repeat each phoneme's statistics for its number of frames.

    stats [B, C, Tx]; durations [B, Tx] integer frames; frame_mask [B, 1, Ty].
    Built as a hard alignment matrix so a padded batch expands in one matmul.
    """
    ends = torch.cumsum(durations, dim=1)
    starts = ends - durations
    frames = torch.arange(frame_mask.shape[-1], device=stats.device)[None, :, None]
    path = (frames >= starts[:, None, :]) & (frames < ends[:, None, :])
    path = path.to(stats.dtype) * frame_mask.transpose(1, 2)
    return torch.bmm(path, stats.transpose(1, 2)).transpose(1, 2)
