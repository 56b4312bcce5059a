"""The Piper voice sized before it loads: its weights, the vocoder's working set and its work.

The voice is small (tens of MB), so it is built once on the CPU without its weights and
counted, rather than described by a hand-kept table that could drift from the model.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from lab.metrics.probe import Phase
from lab.models.sizing import (
    CONV_EFFICIENCY,
    Plan,
    Work,
    conv_flops,
    load_fixed_s,
    param_count,
)

PIPER_ACT_BYTES_PER_SAMPLE = 1536
"""Peak working set of the fp32 vocoder per output sample (256 decoder channels), measured."""
VOICE_OPS, VOCODER_OPS = 2000, 300
"""Small ops per sentence (encoder, durations, flow) and per vocoder call of the voice."""


@functools.lru_cache(maxsize=8)
def voice_shape(model: str) -> tuple[int, int, int, int, int, float, int]:
    """(all params, duration predictor's, vocoder's, hop, sample rate, vocoder flops per
    frame, vocoder channels) of a Piper voice. Built on the CPU without its weights: it is
    small (tens of MB), and a build on the meta device costs seconds of one-time set-up."""
    from lab.models.piper_voice import read_settings, resolve_voice_file
    from lab.models.vits import Synthesizer, VitsHyper

    if model != "default" and not Path(model).exists():
        hyper, rate = VitsHyper(), 22050  # a hub voice: sized as the medium shape
    else:
        settings, hyper = read_settings(resolve_voice_file(model))
        rate = settings.sample_rate
    with torch.random.fork_rng(devices=[]):
        voice = Synthesizer(hyper).eval()
    frames = 4
    flops = conv_flops(voice.dec, lambda: voice.dec(torch.zeros(1, hyper.channels, frames),
                                                    torch.ones(1, 1, frames)))
    return (param_count(voice), param_count(voice.dp), param_count(voice.dec),
            voice.hop_length, rate, flops / frames, hyper.decoder_channels)


def size_piper(w: Work) -> Plan:
    """Bytes and phases of `w` for the Piper voice (`PiperBackend.size`)."""
    cfg = w.cfg
    total, dp, dec, hop, rate, frame_flops, channels = voice_shape(cfg.model)
    audio = w.texts * w.chars * w.audio_s_per_char
    per_sample = PIPER_ACT_BYTES_PER_SAMPLE * w.nbytes / 4 * channels / 256
    window = cfg.decode_interval + 2 * cfg.overlap
    streams = w.streaming
    span = window * hop if streams else min(w.chars, 400) * w.audio_s_per_char * rate
    redo = window / cfg.decode_interval if streams else 1.0

    def render(seconds: float, units: int) -> Phase:
        calls = seconds * rate / hop / cfg.decode_interval if streams else units
        return Phase(1, flops=frame_flops * rate / hop * seconds * redo / CONV_EFFICIENCY,
                     ops=units * VOICE_OPS + calls * VOCODER_OPS)

    warm = [render(len(t) * w.audio_s_per_char, 1) for t in w.warmup_texts]
    read = total * 4
    return Plan(
        weights=(total - dec - dp) * w.nbytes + dp * 4, kv_cache=0,
        activations=int(w.rows * span * per_sample), codec=dec * w.nbytes, audio_s=audio,
        synth=(render(audio, w.units),), warmup=tuple(warm), host=read, read_bytes=read,
        load_fixed_s=load_fixed_s(cfg))
