"""HiFi-GAN generator (the vocoder): latent frames -> waveform, 256 samples per frame.

Activations beyond each item's length are zeroed before every convolution. For one item this is
exactly what zero padding already does; for a padded batch it makes every item's audio equal to
decoding it alone, which is what lets the lab batch without changing the sound.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from lab.models.vits.layers import same_padding

SLOPE = 0.1


class ResBlock(nn.Module):
    """Two dilated convolutions with residual connections (HiFi-GAN's 'type 2' block)."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, int]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(
                channels, channels, kernel_size, dilation=d, padding=same_padding(kernel_size, d)
            )
            for d in dilations
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, SLOPE) * mask)
        return x * mask


class Generator(nn.Module):
    def __init__(
        self,
        in_channels: int = 192,
        channels: int = 256,
        upsample_rates: tuple[int, ...] = (8, 8, 4),
        upsample_kernels: tuple[int, ...] = (16, 16, 8),
        resblock_kernels: tuple[int, ...] = (3, 5, 7),
        resblock_dilations: tuple[tuple[int, int], ...] = ((1, 2), (2, 6), (3, 12)),
    ) -> None:
        super().__init__()
        self.upsample_rates = upsample_rates
        self.n_kernels = len(resblock_kernels)
        self.conv_pre = nn.Conv1d(in_channels, channels, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(upsample_rates, upsample_kernels, strict=True)):
            c_in, c_out = channels // 2**i, channels // 2 ** (i + 1)
            self.ups.append(
                nn.ConvTranspose1d(c_in, c_out, kernel, rate, padding=(kernel - rate) // 2)
            )
            for k, d in zip(resblock_kernels, resblock_dilations, strict=True):
                self.resblocks.append(ResBlock(c_out, k, d))
        self.conv_post = nn.Conv1d(
            channels // 2 ** len(upsample_rates), 1, 7, padding=3, bias=False
        )

    @property
    def hop_length(self) -> int:
        hop = 1
        for rate in self.upsample_rates:
            hop *= rate
        return hop

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """z [B, C, T] latent frames; mask [B, 1, T]. Returns audio [B, T * hop]."""
        x = self.conv_pre(z * mask)
        for i, (up, rate) in enumerate(zip(self.ups, self.upsample_rates, strict=True)):
            x = up(F.leaky_relu(x, SLOPE) * mask)
            mask = mask.repeat_interleave(rate, dim=-1)
            x = x * mask
            blocks = self.resblocks[i * self.n_kernels : (i + 1) * self.n_kernels]
            x = sum(block(x, mask) for block in blocks) / self.n_kernels
        x = self.conv_post(F.leaky_relu(x) * mask)
        return torch.tanh(x)[:, 0] * mask[:, 0]
