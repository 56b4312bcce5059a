"""The VITS inference path as one module tree, split into the stages the lab times separately.

encode (text encoder) -> durations (stochastic duration predictor) -> expand + flow -> vocoder.
Keeping the stages as methods lets the pipeline time each one, stream the vocoder in windows, and
still cast, quantize or compile the whole tree as an ordinary nn.Module.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lab.models.vits.duration import DurationPredictor
from lab.models.vits.flow import ResidualCouplingFlow
from lab.models.vits.generator import Generator
from lab.models.vits.layers import sequence_mask
from lab.models.vits.text_encoder import TextEncoder, expand_by_durations


@dataclass(frozen=True)
class VitsHyper:
    """Shape of a Piper 'medium' voice; other qualities change only these numbers."""

    n_symbols: int = 256
    channels: int = 192
    ffn_hidden: int = 768
    n_heads: int = 2
    n_layers: int = 6
    upsample_rates: tuple[int, ...] = (8, 8, 4)
    upsample_kernels: tuple[int, ...] = (16, 16, 8)
    decoder_channels: int = 256


@dataclass
class Latents:
    """What the vocoder consumes: latent frames z [B, C, T] and their mask [B, 1, T], plus the
    frames each input id was given [B, N] (what a student learns to place phonemes from)."""

    z: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    durations: torch.Tensor


class Synthesizer(nn.Module):
    def __init__(self, hyper: VitsHyper = VitsHyper()) -> None:
        super().__init__()
        self.hyper = hyper
        self.enc_p = TextEncoder(
            hyper.n_symbols, hyper.channels, hyper.ffn_hidden, hyper.n_heads, hyper.n_layers
        )
        self.dp = DurationPredictor(hyper.channels)
        self.flow = ResidualCouplingFlow(hyper.channels, hyper.channels)
        self.dec = Generator(
            hyper.channels, hyper.decoder_channels, hyper.upsample_rates, hyper.upsample_kernels
        )

    @property
    def hop_length(self) -> int:
        return self.dec.hop_length

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the voice runs in: its text encoder's, which stays in it while int8-static
        holds the vocoder and the flow in fp32 to calibrate them."""
        return self.enc_p.emb.weight.dtype

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor):
        mask = sequence_mask(lengths, ids.shape[1]).unsqueeze(1).to(self.dtype)
        hidden, mean, log_std = self.enc_p(ids, mask)
        return hidden, mean, log_std, mask

    def durations(
        self, hidden: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor, length_scale: float
    ) -> torch.Tensor:
        """Integer frames per phoneme, from noise [B, 2, T] already scaled by noise_w.

        Runs in the duration predictor's own dtype, which may differ from the rest of the
        model (the Piper plan keeps it as an fp32 island).
        """
        dtype = self.dp.pre.weight.dtype
        log_w = self.dp(hidden.to(dtype), mask.to(dtype), noise.to(dtype))
        return torch.ceil(torch.exp(log_w) * mask.to(dtype) * length_scale)[:, 0].long()

    def latents(
        self,
        mean: torch.Tensor,
        log_std: torch.Tensor,
        durations: torch.Tensor,
        noise: torch.Tensor,
        span: int | None = None,
    ) -> Latents:
        """Expand phoneme priors to frames, sample with noise [B, C, frames], run the flow back.
        `span` pads the frame axis beyond the longest item (None: no padding)."""
        lengths = durations.sum(dim=1).clamp_min(1)
        mask = sequence_mask(lengths, span).unsqueeze(1).to(mean.dtype)
        mean = expand_by_durations(mean, durations, mask)
        log_std = expand_by_durations(log_std, durations, mask)
        z_p = mean + noise[..., : mean.shape[-1]] * torch.exp(log_std)
        return Latents(self.flow.inverse(z_p, mask), mask, lengths, durations)

    def vocode(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Audio [B, frames * hop]. Where no item is padded (one sentence, a streamed window)
        the mask is all ones, and the vocoder is spared multiplying by it."""
        return self.dec(z, None if bool(mask.all()) else mask)
