"""Stochastic duration predictor, run in reverse: noise -> log-durations of each phoneme."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from lab.models.vits.layers import ChannelNorm, depthwise, pointwise
from lab.models.vits.spline import inverse_spline


class DilatedDepthSeparableConv(nn.Module):
    """Depthwise convs (dilation kernel**i), each with a 1x1 conv: wide context, cheaply."""

    def __init__(self, channels: int, kernel_size: int, n_layers: int) -> None:
        super().__init__()
        self.convs_sep = nn.ModuleList()
        for i in range(n_layers):
            dilation = kernel_size**i
            self.convs_sep.append(
                nn.Conv1d(
                    channels,
                    channels,
                    kernel_size,
                    groups=channels,
                    dilation=dilation,
                    padding=(kernel_size * dilation - dilation) // 2,
                )
            )
        self.convs_1x1 = nn.ModuleList(nn.Conv1d(channels, channels, 1) for _ in range(n_layers))
        self.norms_1 = nn.ModuleList(ChannelNorm(channels) for _ in range(n_layers))
        self.norms_2 = nn.ModuleList(ChannelNorm(channels) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cond: torch.Tensor | None = None):
        if cond is not None:
            x = x + cond
        layers = zip(self.convs_sep, self.norms_1, self.convs_1x1, self.norms_2, strict=True)
        for sep, norm_1, one_by_one, norm_2 in layers:
            y = F.gelu(norm_1(depthwise(sep, x * mask)))
            y = F.gelu(norm_2(pointwise(one_by_one, y)))
            x = x + y
        return x * mask


class ConvFlow(nn.Module):
    """Coupling layer whose second half is warped by a spline predicted from the first half."""

    def __init__(
        self,
        channels: int = 192,
        kernel_size: int = 3,
        n_layers: int = 3,
        n_bins: int = 10,
        tail_bound: float = 5.0,
    ) -> None:
        super().__init__()
        self.n_bins = n_bins
        self.tail_bound = tail_bound
        self.channels = channels
        self.pre = nn.Conv1d(1, channels, 1)
        self.convs = DilatedDepthSeparableConv(channels, kernel_size, n_layers)
        self.proj = nn.Conv1d(channels, 3 * n_bins - 1, 1)

    def inverse(self, z: torch.Tensor, mask: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        z0, z1 = z[:, :1], z[:, 1:]
        h = self.convs(pointwise(self.pre, z0), mask, cond)
        h = (pointwise(self.proj, h) * mask).unsqueeze(1).transpose(2, 3)
        scale = math.sqrt(self.channels)
        widths = h[..., : self.n_bins] / scale
        heights = h[..., self.n_bins : 2 * self.n_bins] / scale
        slopes = h[..., 2 * self.n_bins :]
        z1 = inverse_spline(z1, widths, heights, slopes, self.tail_bound)
        return torch.cat([z0, z1], dim=1) * mask


class ElementwiseAffine(nn.Module):
    def __init__(self, channels: int = 2) -> None:
        super().__init__()
        self.m = nn.Parameter(torch.zeros(channels, 1))
        self.logs = nn.Parameter(torch.zeros(channels, 1))

    def inverse(self, z: torch.Tensor, mask: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return (z - self.m) * torch.exp(-self.logs) * mask


class DurationPredictor(nn.Module):
    """VITS's stochastic duration predictor, keeping only what inference runs.

    Training order is [affine, conv, flip, conv, flip, conv, flip, conv, flip]; inference walks it
    backwards and skips the first conv flow (VITS drops it as unused), so flows 3, 5 and 7 remain.
    Module names follow the training indices so trained weights load by name.
    """

    def __init__(self, channels: int = 192, kernel_size: int = 3, n_flows: int = 4) -> None:
        super().__init__()
        self.pre = nn.Conv1d(channels, channels, 1)
        self.convs = DilatedDepthSeparableConv(channels, kernel_size, 3)
        self.proj = nn.Conv1d(channels, channels, 1)
        self.flows = nn.ModuleDict({"0": ElementwiseAffine(2)})
        for i in range(1, n_flows):
            self.flows[str(2 * i + 1)] = ConvFlow(channels, kernel_size, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] encoder hidden; noise [B, 2, T] already scaled. Returns log-durations."""
        cond = pointwise(self.proj, self.convs(pointwise(self.pre, x), mask)) * mask
        z = noise
        conv_keys = sorted((k for k in self.flows if k != "0"), key=int, reverse=True)
        for key in [*conv_keys, "0"]:
            z = self.flows[key].inverse(torch.flip(z, [1]), mask, cond)
        return z[:, :1]
