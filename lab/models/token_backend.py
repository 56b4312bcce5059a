"""What every family that speaks through codec tokens shares: the engine's settings from the
app's config, and a backend base class that runs units through `TokenTTS`.

Orpheus and the lab's own voice differ only in how they load, what a unit is and how long it
may run; the knobs (`kv_cache`, `kv_dtype`, `mixed_prefill`, `continuous_batching`,
`compile`, `cuda_graphs`, sampling, `decode_interval`, `max_decode_interval`, `overlap`,
`codec_side_stream`) are translated here once, so they act the same on both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import torch

from lab.config import PipelineConfig, SamplingConfig
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.heap import freeze_survivors
from lab.engine.request import SamplingParams
from lab.engine.scheduler import POLICIES
from lab.metrics.timers import RequestMeter
from lab.models.backend import EngineQueue, Family
from lab.models.token_tts import TokenTTS
from lab.quant.plan import PrecisionPlan, PrecisionReport, run_dtype
from lab.quant.precision import dtype_name
from lab.stages import stage
from lab.stream.codec_stream import StreamWindow
from lab.turns import Shared


def _after_cast(lm: torch.nn.Module) -> None:
    """A cast rounds the rotary tables and can untie the output head from the embedding."""
    lm.reset_rope()
    lm.tie_weights()


def decode_mode(compile_mode: str, cuda_graphs: bool) -> str:
    """The engine's decode mode for the `compile` and `cuda_graphs` knobs: a compiled step is
    always captured as a graph on a GPU; without compile, `cuda_graphs` picks graph or eager."""
    if compile_mode == "none":
        return "cuda-graph" if cuda_graphs else "eager"
    return compile_mode


def engine_config(cfg: PipelineConfig, *, n_slots: int | None = None,
                  max_len: int = 2048) -> EngineConfig:
    """The engine's settings for a pipeline config: slots default to its batch size, and
    `continuous_batching`, `kv_cache`, `kv_dtype`, `mixed_prefill`, `compile` and
    `cuda_graphs` become plain engine values (the engine never sees the app's config)."""
    return EngineConfig(n_slots=n_slots or cfg.batch_size, max_len=max_len,
                        policy=POLICIES[0] if cfg.continuous_batching else POLICIES[1],
                        kv_cache=cfg.kv_cache, kv_dtype=cfg.kv_dtype,
                        mixed_prefill=min(cfg.mixed_prefill, max_len - 1),
                        decode_mode=decode_mode(cfg.compile, cfg.cuda_graphs))


def start_engine(lm: torch.nn.Module, config: EngineConfig, processor) -> LLMEngine:
    """The engine over `lm`, its KV cache allocated and its kernels probed, as a set-up stage."""
    with stage(f"setting up the engine ({config.n_slots} x {config.max_len}-position "
               f"{config.kv_cache} KV cache)"):
        return LLMEngine(lm, config, logits_processor=processor)


def chosen_codec_dtype(cfg: PipelineConfig, device: torch.device,
                       notes: list[str]) -> torch.dtype | None:
    """The codec precision the config names, as it can run here; None for "auto", where the
    family chooses. What holds for the LM's dtype holds for the codec's (fp16 runs as bf16 on
    a CPU, emulated bf16 is slow), and the notes say so, naming the codec."""
    if cfg.codec_dtype == "auto":
        return None
    found: list[str] = []
    dtype = run_dtype(cfg.codec_dtype, device, found)
    notes += [f"codec_dtype={cfg.codec_dtype}: {note}" for note in found]
    return dtype


def sampling_params(cfg: SamplingConfig, *, seed: int | None = None) -> SamplingParams:
    """A pipeline config's sampling section as the engine's per-request settings."""
    return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                          repetition_penalty=cfg.repetition_penalty, max_tokens=cfg.max_tokens,
                          seed=seed)


# The engine compiles and captures the LM's decode step itself (`compile` becomes its decode
# mode), so the plan compiles nothing; quantization acts on every linear of the LM.
LM_PLAN = PrecisionPlan(after_cast=_after_cast)


def stream_window(cfg: PipelineConfig) -> StreamWindow:
    """`decode_interval` codec frames per chunk (growing up to `max_decode_interval` while the
    listener is more than `grow_lead_ms` ahead, the first `first_chunk_frames` once
    `first_chunk_wait` frames exist), with `overlap` frames of context each side (one fewer on
    the right for a listener down to `rush_lead_ms`)."""
    return StreamWindow(hop=cfg.decode_interval, left=cfg.overlap, right=cfg.overlap,
                        max_hop=cfg.max_decode_interval, first=cfg.first_chunk_frames,
                        wait=cfg.first_chunk_wait, guard_s=cfg.grow_lead_ms / 1000,
                        rush_s=cfg.rush_lead_ms / 1000)


def tts_options(cfg: PipelineConfig) -> dict:
    """`TokenTTS`'s streaming and sampling settings from the config, the same for every family."""
    return {"window": stream_window(cfg), "side_stream": cfg.codec_side_stream,
            "sampling": sampling_params(cfg.sampling, seed=cfg.seed),
            "admit_lead_s": cfg.admit_lead_ms / 1000, "admit_round_s": cfg.admit_round_ms / 1000}


class TokenBackend:
    """Meets `lab.models.backend.Backend` for a family built on `TokenTTS`; a subclass sets
    `family`, builds `tts` and `precision`, and says what a unit is (`prepare`) and how many
    tokens it may take (`max_tokens`)."""

    family: Family
    warmup_tokens: int = 16

    def __init__(self, config: PipelineConfig, tts: TokenTTS,
                 precision: PrecisionReport) -> None:
        self.config, self.tts, self.precision = config, tts, precision
        self.sample_rate = tts.sample_rate
        self.model = tts.engine.runner.model
        self.kv_cache = tts.engine.runner.cache

    def max_tokens(self, unit) -> int:
        return self.tts.sampling.max_tokens

    def fallbacks(self) -> list[str]:
        dummy = [self.family.dummy_warning] if self.config.weights == "dummy" else []
        return [*self.precision.notes, *self.tts.engine.fallbacks, *self.tts.codec.fallbacks,
                *self.tts.decoder.notes, *self.tts.notes, *dummy]

    def memory_facts(self) -> dict[str, str]:
        facts = {"KV cache": self.kv_cache.describe()}
        prefixes = self.tts.engine.runner.prefixes
        if len(prefixes):
            facts["Prefix cache"] = (f"{len(prefixes)} voice prefixes, "
                                     f"{prefixes.nbytes() / 2**20:.2f} MiB")
        return facts

    def engine_queue(self) -> EngineQueue:
        engine, decoder = self.tts.engine, self.tts.decoder
        return EngineQueue(len(engine.scheduler.waiting), self.tts.held_steps,
                           engine.stats.token_wait_s, self.tts.round_s,
                           decoder.collected_windows, decoder.collect_lag_s)

    def applied(self) -> dict[str, object]:
        """Precision as the plan applied it, the codec's as it runs (a named one may run as
        another here), and the decode step as it runs now: a graph or compile failure at load
        turns the step eager."""
        runner = self.tts.engine.runner
        mode = "eager" if runner.decoder is None else runner.decoder.mode
        captured = mode == "cuda-graph" or (mode != "eager" and runner.device.type == "cuda")
        compiled = mode not in ("eager", "cuda-graph")
        codec = "auto" if self.config.codec_dtype == "auto" else dtype_name(self.tts.codec.dtype)
        return {"dtype": self.precision.dtype, "quant": self.precision.quant,
                "compile": mode if compiled else "none", "cuda_graphs": captured,
                "codec_dtype": codec}

    def _sampling(self, unit, seed: int) -> SamplingParams:
        return dataclasses.replace(self.tts.sampling, seed=seed,
                                   max_tokens=min(self.tts.sampling.max_tokens,
                                                  self.max_tokens(unit)))

    def warm_up(self, texts: tuple[str, ...]) -> None:
        """Capture or compile every decode bucket, then run a few tokens of one request per
        text through the engine and the codec and capture sampling at every bucket for the
        shapes that run showed, so set-up (and any failure of it) happens at load rather than
        in the first request. What is alive then lives as long as the backend, so it is
        frozen out of later garbage collections (see `heap`)."""
        self.tts.engine.runner.warmup()
        units = [self.prepare(text)[0][0] for text in texts]
        params = [dataclasses.replace(self._sampling(u, 0), max_tokens=self.warmup_tokens)
                  for u in units]
        with stage(f"running {len(units)} warm-up requests of {self.warmup_tokens} tokens"):
            self.tts.synthesize(units, self.config.voice, params)
        self.tts.engine.runner.sampler.capture_every_bucket()
        self.tts.notes.clear()  # the warm-up stops short on purpose
        freeze_survivors()

    def synthesize(self, units: list, seeds: list[int],
                   meter: RequestMeter) -> list[np.ndarray]:
        params = [self._sampling(u, s) for u, s in zip(units, seeds, strict=True)]
        return self.tts.synthesize(units, self.config.voice, params, meter)

    def stream(self, unit, seed: int, meter: RequestMeter) -> Iterator[np.ndarray | Shared]:
        chunks = self.tts.stream(unit, self.config.voice, self._sampling(unit, seed), meter,
                                 share=True)
        try:
            for chunk in chunks:
                if isinstance(chunk, Shared):
                    yield chunk
                    continue
                yield chunk.audio.numpy()  # float32 on the host already (the codec stage)
        finally:
            chunks.close()
