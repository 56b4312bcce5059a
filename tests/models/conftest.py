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


def check_compiled_capture(graphed, eager, codes) -> None:
    """A compiled codec with CUDA graphs up to a batch of 4: its graphs start at a bucket of 2
    and one-frame windows run its compiled part eagerly (the compiler specialises a size of
    1), nothing fails, and every replay gives what the uncaptured `eager` codec gives for
    `codes(batch, frames, seed)`, a batch of 1 padded to 2."""
    graphed.capture(3)
    assert graphed.graphs.captured == [(b, f) for b in (2, 4) for f in range(1, 4)]
    assert graphed._decode.compiles and not graphed.graphs.failure
    for b, f in ((1, 1), (1, 3), (3, 2), (4, 1)):
        frames = codes(b, f, 20 + b)
        torch.testing.assert_close(graphed.decode(frames), eager.decode(frames),
                                   atol=1e-3, rtol=1e-3)
