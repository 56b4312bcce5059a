"""Residual coupling flow, run in reverse: prior sample z_p -> latent z the decoder consumes."""

from __future__ import annotations

import torch
from torch import nn

from lab.models.vits.layers import same_padding


class WaveNet(nn.Module):
    """Gated dilated convolutions with residual and skip outputs (non-causal, unconditioned)."""

    def __init__(self, channels: int, kernel_size: int, dilation_rate: int, n_layers: int) -> None:
        super().__init__()
        self.channels = channels
        self.in_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()
        for i in range(n_layers):
            dilation = dilation_rate**i
            self.in_layers.append(
                nn.Conv1d(
                    channels,
                    2 * channels,
                    kernel_size,
                    dilation=dilation,
                    padding=same_padding(kernel_size, dilation),
                )
            )
            out = 2 * channels if i < n_layers - 1 else channels
            self.res_skip_layers.append(nn.Conv1d(channels, out, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        skip = torch.zeros_like(x)
        last = len(self.in_layers) - 1
        for i, (conv, res_skip) in enumerate(
            zip(self.in_layers, self.res_skip_layers, strict=True)
        ):
            h = conv(x)
            acts = res_skip(
                torch.tanh(h[:, : self.channels]) * torch.sigmoid(h[:, self.channels :])
            )
            if i < last:
                x = (x + acts[:, : self.channels]) * mask
                skip = skip + acts[:, self.channels :]
            else:
                skip = skip + acts
        return skip * mask


class CouplingLayer(nn.Module):
    """Mean-only affine coupling: the second half is shifted by a WaveNet of the first half."""

    def __init__(
        self, channels: int, hidden: int, kernel_size: int, dilation_rate: int, n_layers: int
    ) -> None:
        super().__init__()
        self.half = channels // 2
        self.pre = nn.Conv1d(self.half, hidden, 1)
        self.enc = WaveNet(hidden, kernel_size, dilation_rate, n_layers)
        self.post = nn.Conv1d(hidden, self.half, 1)

    def inverse(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x0, x1 = x[:, : self.half], x[:, self.half :]
        shift = self.post(self.enc(self.pre(x0) * mask, mask)) * mask
        return torch.cat([x0, (x1 - shift) * mask], dim=1)


class ResidualCouplingFlow(nn.Module):
    """Coupling layers between channel flips; names match the trained layout (0, 2, 4, 6)."""

    def __init__(
        self,
        channels: int = 192,
        hidden: int = 192,
        kernel_size: int = 5,
        dilation_rate: int = 1,
        n_layers: int = 4,
        n_flows: int = 4,
    ) -> None:
        super().__init__()
        self.flows = nn.ModuleDict(
            {
                str(2 * i): CouplingLayer(channels, hidden, kernel_size, dilation_rate, n_layers)
                for i in range(n_flows)
            }
        )

    def inverse(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for key in sorted(self.flows, key=int, reverse=True):
            z = self.flows[key].inverse(torch.flip(z, [1]), mask)
        return z
