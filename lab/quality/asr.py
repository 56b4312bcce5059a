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
    """Lowercase words heard in `audio` (any sample rate); empty when nothing is recognised.

    The front end adapts as it listens: its noise-floor estimate (and, in live mode, the
    cepstral mean) carries over into the next utterance, and `start_utt` resets neither. Left
    alone, a transcript would depend on what the decoder heard before, so an A/B verdict would
    depend on which side was scored first. `reinit_feat` rebuilds the front end from the
    decoder's config (fresh noise estimate, mean back to `cmninit`) in microseconds, so every
    call hears its audio exactly as a new decoder would, without paying for one.
    """
    pcm = to_pcm16(prepare(audio, sample_rate))
    with _decoder_lock:
        decoder = _decoder()
        decoder.reinit_feat()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""
