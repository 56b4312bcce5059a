"""Orpheus sized before it loads: the LM from its config's dims, the cache, the codec.

The LM can be many GB, so it is never allocated: its bytes come from its dims (a shipped shape
for dummy weights, or a checkpoint's config.json) as the quant mode that will really run stores
them. The SNAC codec is small, so it is built once on the CPU and counted.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from types import SimpleNamespace

import torch

from lab.config import PipelineConfig
from lab.engine.engine import EngineConfig
from lab.engine.llm import LM_SHAPES
from lab.engine.slots import default_buckets
from lab.engine.weights import config_from_hf
from lab.metrics.probe import Phase
from lab.metrics.rates import EstimateError
from lab.models.orpheus_backend import DEFAULT_MODEL, PROMPT_ROOM, TINY_SNAC, WARMUP_FRAMES
from lab.models.orpheus_format import ORPHEUS, OrpheusLayout
from lab.models.sizing import CONV_EFFICIENCY, Plan, Work, conv_flops, load_fixed_s, param_count
from lab.models.snac_codec import (
    FRAME_CODES,
    SNAC_24KHZ,
    build_snac,
    fold_weight_norm,
    strip_noise,
)
from lab.quant.precision import chain

CODEC_ACT_BYTES_PER_SAMPLE = 1300
"""Peak working set of the fp32 SNAC decoder per output sample (1024 decoder dims), measured."""
LOGIT_BYTES = 24
"""Per row and vocabulary entry at a decode step: fp32 logits and probabilities, sorted values
and their int64 indices."""
STEP_OPS, ROW_OPS, LAYER_OPS = 1500, 1200, 60
"""Small-op counts that bound a tiny model's decode step: per step (scheduler, sampler), per
running row (token bookkeeping, codec windows) and per layer."""
QUANT_BYTES = {
    "int8-weight": lambda i, o, b: i * o + o * b,
    "int8-dynamic": lambda i, o, b: i * o + o * b,
    "int4-weight": lambda i, o, b: i * o // 2 + 4 * (i // 128) * o,
    "fp8": lambda i, o, b: i * o + o * 4,
}
"""Bytes of one quantized linear (in, out, float bytes): its weights plus scales (and zeros)."""


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


def quant_here(cfg: PipelineConfig, w: Work):
    """The quant mode that will run here (the first of its chain available) and why others
    fell back."""
    notes = []
    for mode in chain(cfg.quant):
        why = mode.unavailable(w.device, w.dtype)
        if why is None:
            return mode, tuple(notes)
        notes.append(f"quant {mode.name} would fall back: {why}")
    raise EstimateError(f"quant {cfg.quant!r} has no mode that runs here")  # chains end in none


def linear_bytes(lm, mode, nbytes: int) -> tuple[int, int]:
    """(bytes, parameters) of the LM's linears as `mode` stores them; linears its kernel
    cannot take stay float."""
    hd = lm.head_dim
    shapes = [(lm.dim, (lm.n_heads + 2 * lm.n_kv_heads) * hd), (lm.n_heads * hd, lm.dim),
              (lm.dim, 2 * lm.intermediate_size), (lm.intermediate_size, lm.dim)]
    counts = [lm.n_layers] * 4
    if not lm.tie_embeddings:
        shapes.append((lm.dim, lm.vocab_size))
        counts.append(1)
    total = params = 0
    for (i, o), n in zip(shapes, counts, strict=True):
        quantized = mode.name in QUANT_BYTES and mode.fits(SimpleNamespace(in_features=i,
                                                                           out_features=o))
        total += n * (QUANT_BYTES[mode.name](i, o, nbytes) if quantized else i * o * nbytes)
        params += n * i * o
    return total, params


def size_orpheus(w: Work) -> Plan:
    """Bytes and phases of `w` for Orpheus (`OrpheusBackend.size`)."""
    cfg, b = w.cfg, w.nbytes
    lm, notes = lm_config(cfg)
    mode, quant_notes = quant_here(cfg, w)
    notes += quant_notes
    layout = OrpheusLayout.fitting(lm.vocab_size)
    base = SNAC_24KHZ if cfg.weights == "real" or layout == ORPHEUS else TINY_SNAC
    snac = {**base, "codebook_size": layout.codebook_size}
    codec_params, frame_flops = codec_shape(tuple(sorted((k, _hashable(v))
                                                         for k, v in snac.items())))
    frame_samples = 2048
    tokens_per_s = FRAME_CODES * snac["sampling_rate"] / frame_samples
    lin_bytes, lin_params = linear_bytes(lm, mode, b)
    weights = (lin_bytes + (lm.n_params - lin_params) * b
               + 2 * lm.max_seq_len * lm.head_dim * b)
    cache_len = min(cfg.sampling.max_tokens + PROMPT_ROOM, lm.max_seq_len)
    slots, L, H = cfg.batch_size, lm.n_layers, lm.n_heads
    kv_slot = 2 * L * lm.n_kv_heads * lm.head_dim * cache_len * b
    kv = kv_slot * slots if cfg.kv_cache != "none" else slots * cache_len * 8
    if cfg.kv_cache == "dynamic":
        notes += ("kv_cache=dynamic grows to this when every slot reaches its full length",)
    max_tokens = cfg.sampling.max_tokens
    if cfg.weights == "dummy":
        per_unit = max_tokens
        notes += ("random weights stop at random: sized at sampling.max_tokens per sentence",)
    else:
        per_unit = min(max_tokens, math.ceil(w.unit_chars * w.audio_s_per_char * tokens_per_s))
    rows, units = w.rows, w.units
    waves = math.ceil(units / rows)
    prompt = (w.unit_chars if cfg.weights == "dummy" else w.unit_chars // 4) + 12
    window = cfg.decode_interval + 2 * cfg.overlap
    hidden = (2 * lm.intermediate_size + (H + 2 * lm.n_kv_heads) * lm.head_dim + 4 * lm.dim) * b
    recompute = cfg.kv_cache == "none"
    fed = rows * (cache_len if recompute else 1)
    prefill_tokens = min(EngineConfig().prefill_budget, rows * prompt)
    act = max(prefill_tokens, fed) * (hidden + H * cache_len * 4)
    act += rows * lm.vocab_size * LOGIT_BYTES + slots * lm.vocab_size
    act += kv_slot // L * rows if cfg.kv_cache == "dynamic" else 0
    act += int(rows * window * frame_samples * CODEC_ACT_BYTES_PER_SAMPLE
               * snac["decoder_dim"] / 1024)
    attend = cache_len if cfg.kv_cache == "static" else prompt + per_unit / 2
    row_flops = 2 * lin_params + 4 * L * H * lm.head_dim * attend
    row_flops *= attend if recompute else 1
    row_flops += frame_flops * window / cfg.decode_interval / FRAME_CODES / CONV_EFFICIENCY
    read = lin_bytes + (0 if recompute else kv_slot * attend / cache_len * rows)

    def decode(count: float, n: int) -> Phase:
        return Phase(count, bytes=read, flops=n * row_flops, ops=STEP_OPS + ROW_OPS * n
                     + LAYER_OPS * L)

    def prefill(count: float, n: int) -> Phase:
        return Phase(count, bytes=lin_bytes, flops=2 * lin_params * n * prompt,
                     ops=LAYER_OPS * L)

    warm = [decode(WARMUP_FRAMES * FRAME_CODES, 2), prefill(1, 2)]
    if w.device.type == "cuda" and (cfg.cuda_graphs or cfg.compile != "none"):
        warm.append(decode(3 * len(default_buckets(slots)), max(1, slots // 2)))
    dummy = cfg.weights == "dummy"
    return Plan(
        weights=weights, kv_cache=kv, activations=act, codec=codec_params * 4,
        audio_s=units * per_unit / tokens_per_s,
        synth=(decode(waves * per_unit, rows), prefill(waves, rows)), warmup=tuple(warm),
        host=0 if dummy else lm.n_params * b, read_bytes=0 if dummy else lm.n_params * 2,
        fill_bytes=lm.n_params * b if dummy else 0, load_fixed_s=load_fixed_s(cfg),
        notes=tuple(notes))


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
