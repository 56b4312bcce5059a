"""A token family sized before it loads: the LM from its dims, its KV cache, and the codec.

Orpheus and the lab's own voice share this arithmetic; each describes its codec and prompt in a
`TokenCost` (`orpheus_sizing`, `voice_sizing`). Nothing is allocated: a multi-GB LM is counted
from its config, as the quantization mode that will really run stores it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

from lab.engine.engine import EngineConfig
from lab.engine.graphs import default_key_buckets
from lab.engine.kv_dtype import kv_bytes_per_slot
from lab.engine.llm import LMConfig
from lab.engine.slots import default_buckets
from lab.metrics.probe import Phase
from lab.metrics.rates import EstimateError
from lab.models.sizing import CONV_EFFICIENCY, Plan, Work, load_fixed_s
from lab.models.token_backend import stream_window
from lab.quant.precision import chain

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


@dataclass(frozen=True)
class TokenCost:
    """What a token family's codec and prompt cost: the codec's parameters and flops per codec
    frame, a frame's samples and codes, the codec's working set per output sample, and the
    prompt's tokens per character of text."""

    codec_params: int
    frame_flops: float
    frame_samples: int
    frame_codes: int
    sample_rate: int
    act_bytes_per_sample: float
    prompt_room: int
    warmup_tokens: int
    prompt_per_char: float
    prompt_fixed: int

    @property
    def tokens_per_s(self) -> float:
        return self.frame_codes * self.sample_rate / self.frame_samples


def quant_here(cfg, w: Work):
    """The quant mode that will run here (the first of its chain available) and why others
    fell back."""
    notes = []
    for mode in chain(cfg.quant):
        why = mode.unavailable(w.device, w.dtype)
        if why is None:
            return mode, tuple(notes)
        notes.append(f"quant {mode.name} would fall back: {why}")
    raise EstimateError(f"quant {cfg.quant!r} has no mode that runs here")  # chains end in none


def linear_bytes(lm: LMConfig, mode, nbytes: int) -> tuple[int, int]:
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


def size_tokens(w: Work, lm: LMConfig, c: TokenCost, notes: tuple[str, ...]) -> Plan:
    """Bytes and phases of `w` for a token family with LM `lm` and codec and prompt `c`."""
    cfg, b = w.cfg, w.nbytes
    mode, quant_notes = quant_here(cfg, w)
    notes += quant_notes
    tokens_per_s = c.tokens_per_s
    lin_bytes, lin_params = linear_bytes(lm, mode, b)
    weights = (lin_bytes + (lm.n_params - lin_params) * b
               + 2 * lm.max_seq_len * lm.head_dim * b)
    cache_len = min(cfg.sampling.max_tokens + c.prompt_room, lm.max_seq_len)
    slots, L, H = cfg.batch_size, lm.n_layers, lm.n_heads
    kv_slot = kv_bytes_per_slot(L, lm.n_kv_heads, lm.head_dim, cache_len, w.dtype)
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
    prompt = int(w.unit_chars * c.prompt_per_char) + c.prompt_fixed
    window = stream_window(cfg)
    hidden = (2 * lm.intermediate_size + (H + 2 * lm.n_kv_heads) * lm.head_dim + 4 * lm.dim) * b
    recompute = cfg.kv_cache == "none"
    fed = rows * (cache_len if recompute else 1)
    prefill_tokens = min(EngineConfig().prefill_budget, rows * prompt)
    act = max(prefill_tokens, fed) * (hidden + H * cache_len * 4)
    act += rows * lm.vocab_size * LOGIT_BYTES + slots * lm.vocab_size
    act += kv_slot // L * rows if cfg.kv_cache == "dynamic" else 0
    act += int(rows * window.frames * c.frame_samples * c.act_bytes_per_sample)
    attend = cache_len if cfg.kv_cache == "static" else prompt + per_unit / 2
    row_flops = 2 * lin_params + 4 * L * H * lm.head_dim * attend
    row_flops *= attend if recompute else 1
    # Codec work at the smallest chunks: growing ones re-decode less context per frame.
    redo = (window.left + window.hop + window.right) / window.hop
    row_flops += c.frame_flops * redo / c.frame_codes / CONV_EFFICIENCY
    read = lin_bytes + (0 if recompute else kv_slot * attend / cache_len * rows)

    def decode(count: float, n: int) -> Phase:
        return Phase(count, bytes=read, flops=n * row_flops, ops=STEP_OPS + ROW_OPS * n
                     + LAYER_OPS * L)

    def prefill(count: float, n: int) -> Phase:
        return Phase(count, bytes=lin_bytes, flops=2 * lin_params * n * prompt,
                     ops=LAYER_OPS * L)

    warm = [decode(c.warmup_tokens, 2), prefill(1, 2)]
    if w.device.type == "cuda" and (cfg.cuda_graphs or cfg.compile != "none"):
        graphs = len(default_buckets(slots)) * len(default_key_buckets(cache_len))
        warm.append(decode(3 * graphs, max(1, slots // 2)))
    dummy = cfg.weights == "dummy"
    return Plan(
        weights=weights, kv_cache=kv, activations=act, codec=c.codec_params * 4,
        audio_s=units * per_unit / tokens_per_s,
        synth=(decode(waves * per_unit, rows), prefill(waves, rows)), warmup=tuple(warm),
        host=0 if dummy else lm.n_params * b, read_bytes=0 if dummy else lm.n_params * 2,
        fill_bytes=lm.n_params * b if dummy else 0, load_fixed_s=load_fixed_s(cfg),
        notes=tuple(notes), cache_len=cache_len)
