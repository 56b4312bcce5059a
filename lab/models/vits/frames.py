"""Convolutions over frames held as [B, C, 1, T] channels-last tensors.

On the vocoder's long, narrow tensors, oneDNN (PyTorch's CPU convolutions) runs 1.5 to 3 times
faster on channels-last (NHWC) activations than on the [B, C, T] layout Conv1d uses: measured on
one AVX2 core, 32 channels x 138,752 samples with a 7-tap kernel took 22 ms against 72 ms (and
onnxruntime's kernel 32 ms). A 1-D convolution is the 2-D one with a height of 1, so the modules
here keep Conv1d's parameters (trained weights load by name, and anything that walks Conv1d
modules still finds them) and run the 2-D op on a layout that stays channels-last from one layer
to the next.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def to_frames(x: torch.Tensor) -> torch.Tensor:
    """[B, C, T] -> [B, C, 1, T] in channels-last memory."""
    return x.unsqueeze(2).contiguous(memory_format=torch.channels_last)


def from_frames(x: torch.Tensor) -> torch.Tensor:
    """[B, C, 1, T] -> [B, C, T] (a view: strides stay channels-last)."""
    return x.squeeze(2)


class FrameConv(nn.Conv1d):
    """Conv1d on [B, C, 1, T] channels-last frames."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight.unsqueeze(2), self.bias, (1, self.stride[0]),
                        (0, self.padding[0]), (1, self.dilation[0]), self.groups)


class FrameUpsample(nn.ConvTranspose1d):
    """ConvTranspose1d on [B, C, 1, T] channels-last frames.

    HiFi-GAN's upsampling layers have a kernel of twice their stride `s` and a padding of `s/2`.
    Such a layer is `s` two-tap convolutions, one per output phase, so it runs as one plain
    stride-1 convolution with `s * C` outputs (`phase_weight`) and no transposed kernel at all.
    Why: oneDNN builds a kernel for every new input shape, and its strided deconvolution's
    build grows with the length. At 384 frames the voice's three upsampling layers took 53 ms
    the first time and 9 ms after as transposed convolutions; 22 ms and 8 ms as phases. Every
    padded sentence length pays its first time once per process.

    The phase convolution reads frames `n - 1` and `n`. Phases `r < s - p` take their two taps
    from output row `n`, the others (`r >= s - p`) from row `n + 1`; with those `p` phases stored
    first in each row, output sample `n * s + r` lies at row `n`, slot `p + r` of the flat
    channels-last output, so the upsampled tensor is a view of it with no copy (one item; a
    padded batch is copied into place). Other shapes run the transposed convolution.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        s, p = self.stride[0], self.padding[0]
        self.phased = (self.kernel_size[0] == 2 * s and 2 * p == s and self.groups == 1
                       and self.dilation[0] == 1 and self.output_padding[0] == 0)
        taps = [(r + p, r + p - s) if r >= s - p else (r + p + s, r + p)
                for r in [*range(s - p, s), *range(s - p)]]
        self.register_buffer("taps", torch.tensor(taps), persistent=False)
        self._cached: tuple[tuple, torch.Tensor] | None = None

    def phase_weight(self) -> torch.Tensor:
        """[s * C_out, C_in, 1, 2]: per stored phase, its taps on frames n - 1 and n."""
        w = self.weight[:, :, self.taps]  # [C_in, C_out, s, 2]
        return w.permute(2, 1, 0, 3).reshape(-1, self.in_channels, 1, 2)

    def _weight(self) -> torch.Tensor:
        """`phase_weight`, rebuilt only when the weight changes; traced code, and code that
        trains the weight, build it inline."""
        if torch.compiler.is_compiling() or (torch.is_grad_enabled()
                                              and self.weight.requires_grad):
            return self.phase_weight()
        key = (self.weight.data_ptr(), self.weight._version, self.weight.dtype)
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, self.phase_weight())
        return self._cached[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.phased:
            return F.conv_transpose2d(x, self.weight.unsqueeze(2), self.bias, (1, self.stride[0]),
                                      (0, self.padding[0]), (0, self.output_padding[0]),
                                      self.groups, (1, self.dilation[0]))
        s, c = self.stride[0], self.out_channels
        bias = None if self.bias is None else self.bias.repeat(s)
        rows = F.conv2d(x.contiguous(memory_format=torch.channels_last), self._weight(), bias,
                        padding=(0, 1)).contiguous(memory_format=torch.channels_last)
        n, t1 = rows.shape[0], rows.shape[-1]
        width, start = (t1 - 1) * s, self.padding[0] * c
        flat = rows.permute(0, 2, 3, 1).reshape(n, -1)[:, start : start + width * c]
        if n == 1:  # one item's samples are contiguous: a view with channels-last strides
            flat = flat[0]
        up = flat.reshape(n, 1, width, c).permute(0, 3, 1, 2)
        return up if n == 1 else up.contiguous(memory_format=torch.channels_last)
