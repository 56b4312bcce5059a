"""Intelligibility: what an offline recogniser hears in a rendering.

An optimisation that garbles words can keep a good MOS proxy, so we also transcribe the audio
and compare it with the input text. PocketSphinx with its bundled US English model runs on CPU
with no downloads; it is far weaker than modern recognisers, so its error rate is a relative
yardstick (candidate against baseline on the same text), not an absolute score.
"""

from __future__ import annotations

import threading
from functools import lru_cache

from pocketsphinx import Decoder

from lab.quality.audio import METER_RATE, prepare, to_pcm16

_decoder_lock = threading.Lock()


@lru_cache(maxsize=1)
def _decoder() -> Decoder:
    """One decoder per process: loading the model costs far more than decoding a sentence."""
    return Decoder(samprate=METER_RATE, loglevel="FATAL")


def transcribe(audio: object, sample_rate: int) -> str:
    """Lowercase words heard in `audio` (any sample rate); empty when nothing is recognised."""
    pcm = to_pcm16(prepare(audio, sample_rate))
    with _decoder_lock:
        decoder = _decoder()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""
