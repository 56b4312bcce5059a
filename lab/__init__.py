"""TTS Optimization Lab: make text-to-speech inference fast and prove it still sounds right."""

from lab.config import ConfigError, PipelineConfig, SamplingConfig, list_presets, load_preset
from lab.pipeline import AudioChunk, Pipeline, Synthesis, SynthesisMetrics

__all__ = [
    "AudioChunk",
    "ConfigError",
    "Pipeline",
    "PipelineConfig",
    "SamplingConfig",
    "Synthesis",
    "SynthesisMetrics",
    "list_presets",
    "load_preset",
]
