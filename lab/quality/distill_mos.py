"""Distill-MOS: a second neural MOS proxy, trained to predict how listeners rate speech.

DNSMOS was built to judge noise suppressors and hardly moves between two renderings of a TTS
voice. Distill-MOS (Stahl and Gamper, Microsoft, 2025) is a small convolution-plus-transformer
network distilled from an XLS-R speech-quality model fitted to listening-test scores, so it
watches the speech itself. It gives one score on the 1..5 scale.

The weights are Microsoft's `distill_mos_v7.pt` from the MIT-licensed `distillmos` 0.9.1 wheel,
stored here as `lab/data/distill_mos/distill_mos_v7.safetensors` (the same tensors, bit for
bit; licence beside them). The lab does not depend on the package itself: `distillmos`
requires `xls-r-sqa`, which requires `torchaudio`, `librosa` and `transformers`, and the newest
torchaudio on PyPI (2.11) is built for an older torch and fails to load beside the torch the lab
is tested with (2.13). A fresh `pip install` would fetch that broken torchaudio and numba,
llvmlite and scikit-learn with it, for a network that needs none of them. So the network is
written here, its state-dict keys following the checkpoint so it loads with `strict=True`.

Checked once against the package's own model (its module imported beside a stand-in torchaudio,
which the network never calls) on seven clips: the default voice's 3 s sentence, the same with
white noise at 5 dB SNR, the sentence six times over (17.7 s, 12 crops), a synthetic buzz of
0.5 s, 7.68 s and 12 s, and 30 s of noise (24 crops). Largest difference: 9.5e-7 MOS.

How a clip is scored: at 16 kHz, a clip shorter than 7.68 s is zero-padded to that length; a
longer one is cut into 7.68 s crops whose starts are spread evenly from the beginning to the end
of the clip, about one second apart at most. Each crop is scaled to a peak of one, turned into a
magnitude-compressed complex spectrogram (20 ms Hann frames every 10 ms, magnitudes raised to
0.3), and the network's per-crop outputs in [0, 1] are averaged and mapped to 1 + 4x.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from lab.quality.audio import METER_RATE, prepare

WEIGHTS = Path(__file__).resolve().parents[1] / "data/distill_mos/distill_mos_v7.safetensors"
CROP = 122_880
"""Samples per crop, 7.68 s at 16 kHz: the length the network was trained on."""
MAX_HOP = METER_RATE
"""The longest step between the starts of two crops of a long clip."""
FRAME, STEP = 320, 160
COMPRESSION = 0.3
CONV_CHANNELS = (64, 64, 128, 256, 256, 256)
WIDTH, HEADS, LAYERS = 200, 8, 7
FRAMES = 384
"""Feature frames per crop after the last convolution halves the 768 STFT frames."""
BATCH = 8
"""Crops run through the network together; a crop's activations peak near 40 MB."""


def compressed_spectrum(crops: torch.Tensor) -> torch.Tensor:
    """(batch, samples) -> (batch, 2, 161 bins, frames): real and imaginary parts of the STFT
    with each bin's magnitude raised to 0.3, which keeps quiet detail visible to the network."""
    edge = (FRAME - STEP) // 2
    padded = nn.functional.pad(crops[:, None, :], (edge, edge), mode="reflect")[:, 0]
    spec = torch.stft(padded, n_fft=FRAME, hop_length=STEP, win_length=FRAME,
                      window=torch.hann_window(FRAME, device=crops.device), center=False,
                      return_complex=True)
    parts = torch.view_as_real(spec)
    magnitude = parts.square().sum(-1, keepdim=True).sqrt().clamp_min(1e-12)
    return (parts * magnitude.pow(COMPRESSION - 1)).permute(0, 3, 1, 2)


class SpectrumConvs(nn.Module):
    """Six 3x3 convolutions over (frequency, time): frequency is halved from the second on,
    time only by the last, so 161 bins x 768 frames become 256 channels x 4 bins x 384 frames."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        before = 2
        for i, channels in enumerate(CONV_CHANNELS):
            stride = (1 if i == 0 else 2, 2 if i == len(CONV_CHANNELS) - 1 else 1)
            layers += [nn.Conv2d(before, channels, 3, stride=stride, padding=(0, 1)),
                       nn.LeakyReLU(0.1)]
            before = channels
        self.cnn = nn.Sequential(*layers)

    def forward(self, crops: torch.Tensor) -> torch.Tensor:
        """(batch, samples) -> (batch, frames, channels x bins)."""
        features = self.cnn(compressed_spectrum(crops))
        return features.flatten(1, 2).transpose(1, 2)


def _norm_over_time(norm: nn.BatchNorm1d, x: torch.Tensor) -> torch.Tensor:
    """Batch norm of (batch, frames, features), which BatchNorm1d wants as (batch, features,
    frames)."""
    return norm(x.transpose(1, 2)).transpose(1, 2)


class FixedPositions(nn.Module):
    """Sinusoidal position codes added to each frame; the table is read from the checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("pe", torch.zeros(1, FRAMES, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe[:, : x.shape[1]]


class FrameEncoder(nn.Module):
    """Normalise the 1024 conv features of each frame, project them to 200, add positions and
    run seven post-norm transformer layers (8 heads, feed-forward 400, ReLU)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(features)
        self.position_encoding = FixedPositions()
        self.linear_proj = nn.Linear(features, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=2 * WIDTH,
                                           dropout=0.0, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, LAYERS,
                                                         enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear_proj(_norm_over_time(self.norm, x))
        return self.transformer_encoder(self.position_encoding(x))


class AttentionPool(nn.Module):
    """One quality logit per crop: a small MLP weighs the frames, their weighted mean goes
    through a linear read-out."""

    def __init__(self) -> None:
        super().__init__()
        self.linear1 = nn.Linear(WIDTH, 2 * WIDTH)
        self.linear2 = nn.Linear(2 * WIDTH, 1)
        self.linear3 = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self.linear2(torch.relu(self.linear1(x))).softmax(dim=1)
        return self.linear3((weights * x).sum(dim=1))[:, 0]


class QualityHead(nn.Module):
    """Frame features -> a quality in [0, 1] per crop."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.norm_input = nn.BatchNorm1d(features)
        self.transformer = FrameEncoder(features)
        self.norm_trans = nn.BatchNorm1d(WIDTH)
        self.pool = AttentionPool()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.transformer(_norm_over_time(self.norm_input, x))
        return torch.sigmoid(self.pool(_norm_over_time(self.norm_trans, x)))


class DistillMos(nn.Module):
    """The whole network: 7.68 s crops at 16 kHz in, one MOS on 1..5 per crop out."""

    def __init__(self) -> None:
        super().__init__()
        self.cnn = SpectrumConvs()
        self.transformer_pool_attn = QualityHead(CONV_CHANNELS[-1] * 4)

    def forward(self, crops: torch.Tensor) -> torch.Tensor:
        peak = crops.abs().amax(dim=1, keepdim=True)
        return 1 + 4 * self.transformer_pool_attn(self.cnn(crops / (peak + 1e-8)))


def crops_of(samples: np.ndarray) -> np.ndarray:
    """The clip as (crops, CROP): zero-padded if short; if long, crops starting evenly from 0
    to the last possible start, at most MAX_HOP apart."""
    extra = samples.size - CROP
    if extra <= 0:
        return np.pad(samples, (0, -extra))[None, :]
    count = math.ceil(extra / MAX_HOP) + 1
    starts = [int(fraction * extra) for fraction in np.linspace(0.0, 1.0, count)]
    return np.stack([samples[s : s + CROP] for s in starts])


@lru_cache(maxsize=1)
def load_model() -> DistillMos:
    """The network with its weights, in eval mode; loaded once per process."""
    if not WEIGHTS.is_file():
        raise FileNotFoundError(f"Distill-MOS weights are missing: {WEIGHTS}")
    model = DistillMos()
    model.load_state_dict(load_file(WEIGHTS), strict=True)
    return model.eval().requires_grad_(False)


def distill_mos(audio: object, sample_rate: int) -> float:
    """Score one clip of speech at any sample rate (resampled to 16 kHz first) on 1..5.

    Refuses empty, silent, too short, NaN or malformed audio with an `AudioError`.
    """
    crops = torch.from_numpy(crops_of(prepare(audio, sample_rate)))
    model = load_model()
    with torch.inference_mode():
        return float(torch.cat([model(batch) for batch in crops.split(BATCH)]).mean())
