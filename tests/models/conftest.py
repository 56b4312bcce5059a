"""Model tests compare numbers across runs, so each runs on one thread."""

import math

import pytest
import torch

from lab.stream.codec_stream import StreamingDecoder, StreamWindow


class Clock:
    """The decoder's clock, moved by the test: how fast frames come against playback."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    """Every model test uses the shared `one_thread` fixture."""


def streamed_snr_db(codec, codes: torch.Tensor, window: StreamWindow, push: int = 5) -> float:
    """SNR of a stream's joined chunks against the one-shot decode of the same codes, pushed
    `push` frames at a time: a boundary that clicks or drifts scores far below 40 dB."""
    whole = codec.decode(codes)[0]
    decoder = StreamingDecoder(codec, window)
    decoder.open("s")
    pieces = []
    for start in range(0, codes.shape[1], push):
        decoder.push("s", codes[0, start:start + push])
        pieces += decoder.decode_due()
    decoder.close("s")
    pieces += decoder.decode_due()
    joined = torch.cat([p.audio for p in sorted(pieces, key=lambda p: p.index)])
    assert joined.shape == whole.shape
    error = (whole - joined).pow(2).sum().clamp_min(1e-20)
    return 10 * math.log10(whole.pow(2).sum() / error)


@pytest.fixture
def streamed_snr():
    return streamed_snr_db
