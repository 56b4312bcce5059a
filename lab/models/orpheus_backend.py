"""The Orpheus family for the pipeline: each sentence becomes one engine request.

This adapter is the one place that reads the app's config for Orpheus: it translates it into
the engine's plain settings, loads and prepares the LM through the shared precision plan, and
builds the codec. Sentences of all texts in a batch are submitted together, so the
continuous-batching engine keeps `batch_size` of them decoding at once, and concurrent streams
share the same steps.
"""

from __future__ import annotations

import torch

from lab.config import PipelineConfig
from lab.engine.weights import load_lm
from lab.frontend import check_text, is_speakable, normalize_text, split_sentences
from lab.models.backend import Family
from lab.models.orpheus_format import (
    ORPHEUS,
    VOICES,
    AudioTokenConstraint,
    OrpheusFormat,
    OrpheusLayout,
    dummy_tokenizer,
    load_tokenizer,
)
from lab.models.orpheus_sizing import (
    DEFAULT_MODEL,
    PROMPT_ROOM,
    TINY_SNAC,
    WARMUP_FRAMES,
    size_orpheus,
)
from lab.models.sizing import Plan, Work
from lab.models.snac_codec import FRAME_CODES, HUB_ID, SNAC_24KHZ, SnacCodec, build_snac
from lab.models.token_backend import (
    LM_PLAN,
    TokenBackend,
    chosen_codec_dtype,
    engine_config,
    start_engine,
    tts_options,
)
from lab.models.token_tts import TokenTTS
from lab.quant.plan import PrecisionReport, apply_knobs
from lab.stages import stage

ORPHEUS_FAMILY = Family(
    "orpheus", "Orpheus: a Llama language model emitting SNAC codec tokens",
    autoregressive=True,
    quantization=(
        "quantization acts on the language model's linear layers (the SNAC codec is not "
        "quantized: it runs in `codec_dtype`, fp32 by default); int8-weight and int8-dynamic "
        "run on CPU or GPU, "
        "int4-weight and fp8 need a CUDA GPU and bf16 (fp8 also compute capability "
        "8.9+) and otherwise fall back to int8"),
    unsupported={knob: "it samples codec tokens; these scale the VITS voice's noise and "
                       "durations (see sampling instead)"
                 for knob in ("noise_scale", "length_scale", "noise_w")},
    dummy_warning="dummy weights: the LM and codec are random, so the audio is noise, "
                  "not speech")


def _load_parts(cfg: PipelineConfig, device: torch.device, n_slots: int, notes: list[str]):
    """(LM, its config, token layout, tokenizer, codec) for real or dummy weights.

    Real weights: `cfg.model` is a checkpoint directory or hub id ("default" is the Orpheus 3B
    fine-tune) holding the LM and its tokenizer; SNAC comes from its hub id. Dummy weights:
    `cfg.model` may name an LM shape (e.g. "tiny-llama"); vocabularies too small for Orpheus
    get the compact token layout and a tiny codec. With `cuda_graphs` on a GPU the codec's
    window decode is captured too, for batches of up to `n_slots` streams. The codec runs in
    fp32 unless `codec_dtype` names another precision (what that costs here lands in `notes`).
    """
    codec_compile = cfg.compile if device.type == "cuda" else "none"
    codec_options = {"cuda_graphs": cfg.cuda_graphs and device.type == "cuda",
                     "max_batch": n_slots,
                     "dtype": chosen_codec_dtype(cfg, device, notes) or torch.float32}
    if cfg.weights == "dummy":
        shape = "orpheus-3b" if cfg.model == "default" else cfg.model
        with stage(f"building the LM with random weights ({shape})"):
            lm, lm_cfg = load_lm("dummy", shape=shape, dtype=cfg.dtype, device=device,
                                 seed=cfg.seed)
        layout = OrpheusLayout.fitting(lm_cfg.vocab_size)
        base = SNAC_24KHZ if layout == ORPHEUS else TINY_SNAC
        codec = SnacCodec(build_snac({**base, "codebook_size": layout.codebook_size},
                                     seed=cfg.seed),
                          device=device, noise=False, compile_mode=codec_compile, is_dummy=True,
                          **codec_options)
        return lm, lm_cfg, layout, dummy_tokenizer(layout), codec
    source = DEFAULT_MODEL if cfg.model == "default" else cfg.model
    with stage(f"loading the LM from {source}"):
        lm, lm_cfg = load_lm(source, dtype=cfg.dtype, device=device)
    codec = SnacCodec.from_source(HUB_ID, device=device, noise=False, compile_mode=codec_compile,
                                  **codec_options)
    return lm, lm_cfg, ORPHEUS, load_tokenizer(source), codec


def build_tts(cfg: PipelineConfig, device: torch.device, *, n_slots: int | None = None,
              max_len: int | None = None) -> tuple[TokenTTS, PrecisionReport]:
    """LM (cast and quantized by the shared plan), engine, codec and tokenizer for a config."""
    codec_notes: list[str] = []
    lm, lm_cfg, layout, tokenizer, codec = _load_parts(cfg, device, n_slots or cfg.batch_size,
                                                       codec_notes)
    report = apply_knobs(lm, LM_PLAN, dtype=cfg.dtype, quant=cfg.quant, compile_mode="none",
                         device=device)
    report.notes += codec_notes
    room = max_len or cfg.sampling.max_tokens + PROMPT_ROOM
    engine = start_engine(lm, engine_config(cfg, n_slots=n_slots,
                                            max_len=min(room, lm_cfg.max_seq_len)),
                          AudioTokenConstraint(layout))
    fmt = OrpheusFormat(tokenizer, layout)
    tts = TokenTTS(engine, codec, fmt, **tts_options(cfg))
    codec.capture(tts.decoder.window.frames, tts.decoder.window.lengths)
    if cfg.prefix_cache:
        with stage(f"prefilling the prefixes of {len(VOICES)} voices"):
            for voice in VOICES:
                engine.cache_prefix(fmt.voice_prefix(voice))
    return tts, report


class OrpheusBackend(TokenBackend):
    """Meets `lab.models.backend.Backend` for Orpheus: a unit is a sentence's text."""

    family = ORPHEUS_FAMILY
    warmup_tokens = WARMUP_FRAMES * FRAME_CODES

    @classmethod
    def load(cls, config: PipelineConfig, device: torch.device) -> OrpheusBackend:
        return cls(config, *build_tts(config, device))

    @classmethod
    def size(cls, work: Work) -> Plan:
        """What `work` would hold and do, from shapes alone, before anything loads."""
        return size_orpheus(work)

    def prepare(self, text: str) -> tuple[list[str], list[str]]:
        """Checked, normalized sentences: Orpheus reads words, so there are no phonemes."""
        checked = check_text(text, self.config.max_chars)
        units = [normalize_text(s) for s in split_sentences(checked.text) if is_speakable(s)]
        return units, list(checked.warnings)
