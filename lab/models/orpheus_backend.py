"""The Orpheus family for the pipeline: each sentence becomes one engine request.

This adapter is the one place that reads the app's config for Orpheus: it translates it into
the engine's plain settings, loads and prepares the LM through the shared precision plan, and
builds the codec. Sentences of all texts in a batch are submitted together, so the
continuous-batching engine keeps `batch_size` of them decoding at once, and concurrent streams
share the same steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import torch

from lab.config import PipelineConfig, SamplingConfig
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.request import SamplingParams
from lab.engine.scheduler import POLICIES
from lab.engine.weights import load_lm
from lab.frontend import check_text, is_speakable, normalize_text, split_sentences
from lab.metrics.timers import RequestMeter
from lab.models.backend import Family
from lab.models.orpheus_format import (
    ORPHEUS,
    AudioTokenConstraint,
    ByteTokenizer,
    OrpheusLayout,
    load_tokenizer,
)
from lab.models.orpheus_tts import OrpheusTTS
from lab.models.sizing import Plan, Work
from lab.models.snac_codec import (
    FRAME_CODES,
    HUB_ID,
    SNAC_24KHZ,
    SnacCodec,
    StreamWindow,
    build_snac,
)
from lab.quant.plan import PrecisionPlan, PrecisionReport, apply_knobs

DEFAULT_MODEL = "canopylabs/orpheus-3b-0.1-ft"
PROMPT_ROOM = 256
"""Cache positions reserved for the prompt when sizing the cache from `max_tokens`."""
# A codec small enough for CPU tests, with SNAC 24 kHz's rates (so its frames and context match).
TINY_SNAC = {**SNAC_24KHZ, "encoder_dim": 8, "decoder_dim": 64}
WARMUP_FRAMES = 4


def _after_cast(lm: torch.nn.Module) -> None:
    """A cast rounds the rotary tables and can untie the output head from the embedding."""
    lm.reset_rope()
    lm.tie_weights()


# The engine compiles and captures the LM's decode step itself (`compile` becomes its decode
# mode), so the plan compiles nothing; quantization acts on every linear of the LM.
LM_PLAN = PrecisionPlan(after_cast=_after_cast)
ORPHEUS_FAMILY = Family(
    "orpheus", "Orpheus: a Llama language model emitting SNAC codec tokens",
    autoregressive=True,
    quantization=(
        "quantization acts on the language model's linear layers (the SNAC codec stays "
        "in the chosen precision); int8-weight and int8-dynamic run on CPU or GPU, "
        "int4-weight and fp8 need a CUDA GPU and bf16 (fp8 also compute capability "
        "8.9+) and otherwise fall back to int8"),
    unsupported={knob: "it samples codec tokens; these scale the VITS voice's noise and "
                       "durations (see sampling instead)"
                 for knob in ("noise_scale", "length_scale", "noise_w")},
    dummy_warning="dummy weights: the LM and codec are random, so the audio is noise, "
                  "not speech")


def decode_mode(compile_mode: str, cuda_graphs: bool) -> str:
    """The engine's decode mode for the `compile` and `cuda_graphs` knobs: a compiled step is
    always captured as a graph on a GPU; without compile, `cuda_graphs` picks graph or eager."""
    if compile_mode == "none":
        return "cuda-graph" if cuda_graphs else "eager"
    return compile_mode


def engine_config(cfg: PipelineConfig, *, n_slots: int | None = None,
                  max_len: int = 2048) -> EngineConfig:
    """The engine's settings for a pipeline config: slots default to its batch size, and
    `continuous_batching`, `kv_cache`, `compile` and `cuda_graphs` become plain engine values
    (the engine never sees the app's config)."""
    return EngineConfig(n_slots=n_slots or cfg.batch_size, max_len=max_len,
                        policy=POLICIES[0] if cfg.continuous_batching else POLICIES[1],
                        kv_cache=cfg.kv_cache,
                        decode_mode=decode_mode(cfg.compile, cfg.cuda_graphs))


def sampling_params(cfg: SamplingConfig, *, seed: int | None = None) -> SamplingParams:
    """A pipeline config's sampling section as the engine's per-request settings."""
    return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                          repetition_penalty=cfg.repetition_penalty, max_tokens=cfg.max_tokens,
                          seed=seed)


def _load_parts(cfg: PipelineConfig, device: torch.device):
    """(LM, its config, token layout, tokenizer, codec) for real or dummy weights.

    Real weights: `cfg.model` is a checkpoint directory or hub id ("default" is the Orpheus 3B
    fine-tune) holding the LM and its tokenizer; SNAC comes from its hub id. Dummy weights:
    `cfg.model` may name an LM shape (e.g. "tiny-llama"); vocabularies too small for Orpheus
    get the compact token layout and a tiny codec.
    """
    codec_compile = cfg.compile if device.type == "cuda" else "none"
    if cfg.weights == "dummy":
        shape = "orpheus-3b" if cfg.model == "default" else cfg.model
        lm, lm_cfg = load_lm("dummy", shape=shape, dtype=cfg.dtype, device=device, seed=cfg.seed)
        layout = OrpheusLayout.fitting(lm_cfg.vocab_size)
        base = SNAC_24KHZ if layout == ORPHEUS else TINY_SNAC
        codec = SnacCodec(build_snac({**base, "codebook_size": layout.codebook_size},
                                     seed=cfg.seed),
                          device=device, noise=False, compile_mode=codec_compile, is_dummy=True)
        return lm, lm_cfg, layout, ByteTokenizer(layout.bos), codec
    source = DEFAULT_MODEL if cfg.model == "default" else cfg.model
    lm, lm_cfg = load_lm(source, dtype=cfg.dtype, device=device)
    codec = SnacCodec.from_source(HUB_ID, device=device, noise=False, compile_mode=codec_compile)
    return lm, lm_cfg, ORPHEUS, load_tokenizer(source), codec


def build_tts(cfg: PipelineConfig, device: torch.device, *, n_slots: int | None = None,
              max_len: int | None = None) -> tuple[OrpheusTTS, PrecisionReport]:
    """LM (cast and quantized by the shared plan), engine, codec and tokenizer for a config."""
    lm, lm_cfg, layout, tokenizer, codec = _load_parts(cfg, device)
    report = apply_knobs(lm, LM_PLAN, dtype=cfg.dtype, quant=cfg.quant, compile_mode="none",
                         device=device)
    room = max_len or cfg.sampling.max_tokens + PROMPT_ROOM
    engine = LLMEngine(lm, engine_config(cfg, n_slots=n_slots,
                                         max_len=min(room, lm_cfg.max_seq_len)),
                       logits_processor=AudioTokenConstraint(layout))
    window = StreamWindow(hop=cfg.decode_interval, left=cfg.overlap, right=cfg.overlap)
    tts = OrpheusTTS(engine, codec, tokenizer, layout=layout, window=window,
                     sampling=sampling_params(cfg.sampling, seed=cfg.seed))
    return tts, report


class OrpheusBackend:
    """Meets `lab.models.backend.Backend` for Orpheus."""

    family = ORPHEUS_FAMILY

    def __init__(self, config: PipelineConfig, device: torch.device) -> None:
        self.config = config
        self.tts, self.precision = build_tts(config, device)
        self.sample_rate = self.tts.sample_rate
        self.model = self.tts.engine.runner.model
        self.kv_cache = self.tts.engine.runner.cache

    @classmethod
    def load(cls, config: PipelineConfig, device: torch.device) -> OrpheusBackend:
        return cls(config, device)

    @classmethod
    def size(cls, work: Work) -> Plan:
        """What `work` would hold and do, from shapes alone, before anything loads."""
        from lab.models.orpheus_sizing import size_orpheus

        return size_orpheus(work)

    def fallbacks(self) -> list[str]:
        dummy = [self.family.dummy_warning] if self.config.weights == "dummy" else []
        return [*self.precision.notes, *self.tts.engine.fallbacks, *self.tts.codec.fallbacks,
                *dummy]

    def memory_facts(self) -> dict[str, str]:
        return {"KV cache": self.kv_cache.describe()}

    def applied(self) -> dict[str, object]:
        """Precision as the plan applied it, and the decode step as it runs now: a graph or
        compile failure at load turns the step eager."""
        runner = self.tts.engine.runner
        mode = "eager" if runner.decoder is None else runner.decoder.mode
        captured = mode == "cuda-graph" or (mode != "eager" and runner.device.type == "cuda")
        compiled = mode not in ("eager", "cuda-graph")
        return {"dtype": self.precision.dtype, "quant": self.precision.quant,
                "compile": mode if compiled else "none", "cuda_graphs": captured}

    def prepare(self, text: str) -> tuple[list[str], list[str]]:
        """Checked, normalized sentences: Orpheus reads words, so there are no phonemes."""
        checked = check_text(text, self.config.max_chars)
        units = [normalize_text(s) for s in split_sentences(checked.text) if is_speakable(s)]
        return units, list(checked.warnings)

    def _sampling(self, seed: int) -> SamplingParams:
        return dataclasses.replace(self.tts.sampling, seed=seed)

    def warm_up(self, texts: tuple[str, ...]) -> None:
        """Capture or compile every decode bucket, then run a few frames of one request per
        text through the engine and the codec, so set-up (and any failure of it) happens at
        load rather than in the first request."""
        self.tts.engine.runner.warmup()
        sampling = dataclasses.replace(self._sampling(0), max_tokens=WARMUP_FRAMES * FRAME_CODES)
        units = [self.prepare(text)[0][0] for text in texts]
        self.tts.synthesize(units, self.config.voice, [sampling] * len(units))

    def synthesize(self, units: list[str], seeds: list[int],
                   meter: RequestMeter) -> list[np.ndarray]:
        params = [self._sampling(s) for s in seeds]
        return self.tts.synthesize(units, self.config.voice, params, meter)

    def stream(self, unit: str, seed: int, meter: RequestMeter) -> Iterator[np.ndarray]:
        chunks = self.tts.stream(unit, self.config.voice, self._sampling(seed), meter)
        try:
            for chunk in chunks:
                with meter.timer.stage("to_cpu"):
                    yield chunk.audio.float().cpu().numpy()
        finally:
            chunks.close()
