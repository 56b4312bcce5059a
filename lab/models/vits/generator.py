"""HiFi-GAN generator (the vocoder): latent frames -> waveform, 256 samples per frame.

Activations beyond each item's length are zeroed before every convolution. For one item this is
exactly what zero padding already does; for a padded batch it makes every item's audio equal to
decoding it alone, which is what lets the lab batch without changing the sound. Run eagerly, only
the padding itself is written (`Tails`); compiled, the activations are multiplied by the mask
(`MaskTails`). Where no item is padded the mask is None and nothing is zeroed.

The generator is most of the voice's time, so it runs on channels-last frames (`frames.py`) and
updates its residual sums in place: the long, 32-channel tensors of the last stage make every
extra pass over memory count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from lab.models.vits.frames import FrameConv, FrameUpsample, from_frames, to_frames
from lab.models.vits.layers import same_padding

SLOPE = 0.1


@dataclass(frozen=True)
class Tails:
    """Where each item of a padded batch ends, at one stage's rate: the frames past
    `lengths[b]` of a tensor `width` frames long are padding. Zeroing them touches only the
    padding: on channels-last frames an item's tail is one contiguous block, where multiplying
    by a mask reads and writes the whole tensor."""

    lengths: tuple[int, ...]
    width: int
    in_place = True

    @classmethod
    def of(cls, mask: torch.Tensor) -> Tails:
        """From a [B, 1, T] mask, 1 up to each item's length."""
        return cls(tuple(int(n) for n in mask.sum(dim=-1).flatten().tolist()), mask.shape[-1])

    def scaled(self, rate: int) -> Tails:
        return Tails(tuple(n * rate for n in self.lengths), self.width * rate)

    def zero(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, ..., width] with each item's padding zeroed, in place."""
        for row, n in enumerate(self.lengths):
            if n < self.width:
                x[row, ..., n:] = 0
        return x


@dataclass(frozen=True)
class MaskTails:
    """`Tails` for compiled code: a product with the [B, 1, 1, T] frame mask traces without
    data-dependent lengths, so one compiled graph serves every padding."""

    mask: torch.Tensor
    in_place = False

    @classmethod
    def of(cls, mask: torch.Tensor) -> MaskTails:
        return cls(to_frames(mask))

    def scaled(self, rate: int) -> MaskTails:
        return MaskTails(self.mask.repeat_interleave(rate, dim=-1))

    def zero(self, x: torch.Tensor) -> torch.Tensor:
        """x (frames, or audio [B, T]) times the mask, out of place."""
        return x * (self.mask if x.dim() == 4 else from_frames(self.mask)[:, 0])


def _zero_padding(y: torch.Tensor, tails: Tails | MaskTails | None, *,
                  kept: bool) -> torch.Tensor:
    """y with each item's padding zeroed. `kept`: autograd keeps y as it is (the output of an
    in-place op, or of tanh), so under autograd in-place zeroing works on a copy."""
    if tails is None:
        return y
    if kept and tails.in_place and torch.is_grad_enabled():
        y = y.clone()
    return tails.zero(y)


def _activate(x: torch.Tensor, tails: Tails | MaskTails | None, slope: float = SLOPE, *,
              inplace: bool = False) -> torch.Tensor:
    """leaky_relu(x), zeroed beyond each item's length: what every convolution here reads.
    In place where nothing reads x again, which spares a fresh tensor the size of x."""
    return _zero_padding(F.leaky_relu(x, slope, inplace=inplace), tails, kept=inplace)


class ResBlock(nn.Module):
    """Two dilated convolutions with residual connections (HiFi-GAN's 'type 2' block)."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, int]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            FrameConv(
                channels, channels, kernel_size, dilation=d, padding=same_padding(kernel_size, d)
            )
            for d in dilations
        )

    def forward(self, x: torch.Tensor, activated: torch.Tensor,
                tails: Tails | MaskTails | None) -> torch.Tensor:
        """x [B, C, 1, T] frames; `activated` is `_activate(x, tails)`, computed once for all
        of a stage's blocks since they start from the same x. Beyond each length the result
        is not zeroed: whatever reads it masks first."""
        for i, conv in enumerate(self.convs):
            x = conv(activated if i == 0 else _activate(x, tails)).add_(x)
        return x


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
        self.conv_pre = FrameConv(in_channels, channels, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(upsample_rates, upsample_kernels, strict=True)):
            c_in, c_out = channels // 2**i, channels // 2 ** (i + 1)
            self.ups.append(
                FrameUpsample(c_in, c_out, kernel, rate, padding=(kernel - rate) // 2)
            )
            for k, d in zip(resblock_kernels, resblock_dilations, strict=True):
                self.resblocks.append(ResBlock(c_out, k, d))
        self.conv_post = FrameConv(
            channels // 2 ** len(upsample_rates), 1, 7, padding=3, bias=False
        )

    @property
    def hop_length(self) -> int:
        hop = 1
        for rate in self.upsample_rates:
            hop *= rate
        return hop

    def _stage(self, i: int, x: torch.Tensor, tails: Tails | MaskTails | None) -> torch.Tensor:
        """The mean of stage i's resblocks, summed in place."""
        blocks = self.resblocks[i * self.n_kernels : (i + 1) * self.n_kernels]
        activated = _activate(x, tails)
        total = blocks[0](x, activated, tails)
        for block in blocks[1:]:
            total.add_(block(x, activated, tails))
        return total.div_(self.n_kernels)

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """z [B, C, T] latent frames; mask [B, 1, T], or None when no item is padded.
        Returns audio [B, T * hop]."""
        kind = MaskTails if torch.compiler.is_compiling() else Tails
        tails = None if mask is None else kind.of(mask)
        x = self.conv_pre(to_frames(z if mask is None else z * mask))
        for i, (up, rate) in enumerate(zip(self.ups, self.upsample_rates, strict=True)):
            x = up(_activate(x, tails, inplace=True))
            tails = None if tails is None else tails.scaled(rate)
            x = self._stage(i, x, tails)
        audio = self.conv_post(_activate(x, tails, 0.01, inplace=True))
        audio = torch.tanh(from_frames(audio))[:, 0]
        return _zero_padding(audio, tails, kept=True)
