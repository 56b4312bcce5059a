"""TTS Optimization Lab: make text-to-speech inference fast and prove it still sounds right."""

from lab.config import ConfigError, PipelineConfig, SamplingConfig, list_presets, load_preset

__all__ = ["ConfigError", "PipelineConfig", "SamplingConfig", "list_presets", "load_preset"]
