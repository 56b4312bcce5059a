"""The lab's voice sized before it loads: its LM from the config in the weights file's header,
its codebooks and learned decoder from theirs, and the codec's generator as the Piper voice's
vocoder it is."""

from __future__ import annotations

import math

from lab.engine.weights import WeightsError
from lab.metrics.rates import EstimateError
from lab.models.latent_codec import HOP, CodecError
from lab.models.piper_sizing import PIPER_ACT_BYTES_PER_SAMPLE, voice_shape
from lab.models.sizing import Plan, Work
from lab.models.token_sizing import TokenCost, size_tokens
from lab.models.voice_weights import (
    CODEBOOK_FILE,
    DECODER_FILE,
    LM_FILE,
    read_voice_config,
    teacher_voice,
    weights_dir,
)

CACHE_ROOM = 256 + 8
"""Positions a slot's cache holds beyond `sampling.max_tokens`: the phoneme prompt (256) and
its framing tokens (8). The estimate and the server's memory plan size the same number."""

PHONEMES_PER_CHAR = 0.9
"""espeak-ng's phonemes per character of English text, roughly: the prompt's length."""


def _shapes(path, what: str) -> dict[str, list[int]]:
    """Every tensor's shape from a safetensors header, without reading the tensors."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_slice(k).get_shape() for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise CodecError(f"cannot read {what} {path} ({err})") from err


def codebook_shape(path) -> tuple[int, int, int]:
    """(levels, size, dim) from the codebook file's header."""
    shape = _shapes(path, "codebooks").get("codebooks")
    if shape is None:
        raise CodecError(f"cannot read codebooks {path} (no 'codebooks' tensor)")
    return tuple(shape)


def decoder_params(path) -> int:
    """The learned decoder's parameter count, 0 where the voice has none."""
    if not path.is_file():
        return 0
    return sum(math.prod(shape) for shape in _shapes(path, "the codec's decoder").values())


def size_voice(w: Work) -> Plan:
    """Bytes and phases of `w` for the lab's voice (`VoiceBackend.size`)."""
    folder = weights_dir(w.cfg.model)
    try:
        lm = read_voice_config(folder / LM_FILE)
        levels, size, dim = codebook_shape(folder / CODEBOOK_FILE)
        learned = decoder_params(folder / DECODER_FILE)
    except (WeightsError, CodecError) as err:
        raise EstimateError(str(err)) from err
    _, _, dec, _, rate, frame_flops, _ = voice_shape(teacher_voice(w.cfg.model))
    group = dim // 192
    cost = TokenCost(
        codec_params=dec + levels * size * dim + learned, frame_flops=frame_flops * group,
        frame_samples=group * HOP, frame_codes=levels, sample_rate=rate,
        act_bytes_per_sample=PIPER_ACT_BYTES_PER_SAMPLE, prompt_room=CACHE_ROOM,
        warmup_tokens=16, prompt_per_char=PHONEMES_PER_CHAR, prompt_fixed=2)
    return size_tokens(w, lm, cost, ())
