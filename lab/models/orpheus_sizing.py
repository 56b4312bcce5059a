"""Orpheus sized before it loads: the LM from its config's dims, the cache, the codec.

The LM can be many GB, so it is never allocated: its bytes come from its dims (a shipped shape
for dummy weights, or a checkpoint's config.json) as the quant mode that will really run stores
them. The SNAC codec is small, so it is built once on the CPU and counted.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from lab.config import PipelineConfig
from lab.engine.llm import LM_SHAPES
from lab.engine.weights import config_from_hf
from lab.metrics.rates import EstimateError
from lab.models.orpheus_format import ORPHEUS, OrpheusLayout
from lab.models.sizing import Plan, Work, conv_flops, param_count
from lab.models.snac_codec import (
    FRAME_CODES,
    SNAC_24KHZ,
    build_snac,
    fold_weight_norm,
    strip_noise,
)
from lab.models.token_sizing import TokenCost, size_tokens

DEFAULT_MODEL = "canopylabs/orpheus-3b-0.1-ft"
PROMPT_ROOM = 256
"""Cache positions reserved for the prompt when sizing the cache from `max_tokens`."""
# A codec small enough for CPU tests, with SNAC 24 kHz's rates (so its frames and context match).
TINY_SNAC = {**SNAC_24KHZ, "encoder_dim": 8, "decoder_dim": 64}
WARMUP_FRAMES = 4

CODEC_ACT_BYTES_PER_SAMPLE = 1300
"""Peak working set of the fp32 SNAC decoder per output sample (1024 decoder dims), measured."""


def lm_config(cfg: PipelineConfig):
    """The LM's dims: a shipped shape for dummy weights, else the checkpoint's config.json
    (a local directory, or the hub's cache; never a download)."""
    if cfg.weights == "dummy":
        shape = "orpheus-3b" if cfg.model == "default" else cfg.model
        if shape not in LM_SHAPES:
            raise EstimateError(f"model {shape!r} is not a known LM shape for dummy weights; "
                                f"choose one of {sorted(LM_SHAPES)}")
        return LM_SHAPES[shape], ()
    source = DEFAULT_MODEL if cfg.model == "default" else cfg.model
    path = Path(source) / "config.json"
    if not path.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(source, "config.json")
        except Exception:  # noqa: BLE001  not a hub id, or no cache: handled below
            cached = None
        path = Path(cached) if isinstance(cached, str) else None
    if path is not None:
        return config_from_hf(json.loads(path.read_text())), ()
    if source == DEFAULT_MODEL:
        return LM_SHAPES["orpheus-3b"], (f"{source} is not downloaded yet; sized as the "
                                         "orpheus-3b shape it has",)
    raise EstimateError(f"cannot read the shape of {source!r} without downloading it: give a "
                        "local checkpoint directory holding config.json")


@functools.lru_cache(maxsize=4)
def codec_shape(items: tuple) -> tuple[int, float]:
    """(parameters, flops per frame) of a SNAC codec, built on the CPU like the voice."""
    codec = build_snac(dict(items))
    strip_noise(codec)  # as the family runs it
    fold_weight_norm(codec)
    frames = 2
    codes = [torch.zeros(1, k * frames, dtype=torch.long) for k in (1, 2, 4)]
    return param_count(codec), conv_flops(codec, lambda: codec.decode(codes)) / frames


def size_orpheus(w: Work) -> Plan:
    """Bytes and phases of `w` for Orpheus (`OrpheusBackend.size`)."""
    cfg = w.cfg
    lm, notes = lm_config(cfg)
    layout = OrpheusLayout.fitting(lm.vocab_size)
    base = SNAC_24KHZ if cfg.weights == "real" or layout == ORPHEUS else TINY_SNAC
    snac = {**base, "codebook_size": layout.codebook_size}
    params, frame_flops = codec_shape(tuple(sorted((k, _hashable(v)) for k, v in snac.items())))
    cost = TokenCost(
        codec_params=params, frame_flops=frame_flops, frame_samples=2048,
        frame_codes=FRAME_CODES, sample_rate=snac["sampling_rate"],
        act_bytes_per_sample=CODEC_ACT_BYTES_PER_SAMPLE * snac["decoder_dim"] / 1024,
        prompt_room=PROMPT_ROOM, warmup_tokens=WARMUP_FRAMES * FRAME_CODES,
        prompt_per_char=1.0 if cfg.weights == "dummy" else 0.25, prompt_fixed=12)
    return size_tokens(w, lm, cost, notes)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
