"""The autoregressive engine: model, caches, weights, generation loop and decode graphs."""

from lab.engine.cache import (
    DynamicKVCache,
    NoKVCache,
    SlotDynamicCache,
    StaticKVCache,
)
from lab.engine.generate import GenerationResult, StepClock, generate, greedy, make_cache
from lab.engine.graphs import BUCKETS, MODES, GraphedDecoder
from lab.engine.hf_baseline import hf_config, hf_generate, to_hf_model
from lab.engine.kv_dtype import KV_DTYPES
from lab.engine.kv_modes import KV_MODES
from lab.engine.llm import LM, LM_SHAPES, Llama3RopeScaling, LMConfig
from lab.engine.weights import WeightsError, load_lm

__all__ = [
    "BUCKETS",
    "KV_DTYPES",
    "KV_MODES",
    "LM",
    "LM_SHAPES",
    "MODES",
    "DynamicKVCache",
    "GenerationResult",
    "GraphedDecoder",
    "LMConfig",
    "Llama3RopeScaling",
    "NoKVCache",
    "SlotDynamicCache",
    "StaticKVCache",
    "StepClock",
    "WeightsError",
    "generate",
    "greedy",
    "hf_config",
    "hf_generate",
    "load_lm",
    "make_cache",
    "to_hf_model",
]
