"""TTS Optimization Lab: make text-to-speech inference fast and prove it still sounds right.

`Pipeline` and its result types load on first use, so that `import lab.engine` or `lab.config`
does not pull in the text frontend and its phonemizer.
"""

from lab.config import ConfigError, PipelineConfig, SamplingConfig, list_presets, load_preset

_PIPELINE_NAMES = ("AudioChunk", "Pipeline", "Synthesis", "SynthesisMetrics")

__all__ = ["ConfigError", "PipelineConfig", "SamplingConfig", "list_presets", "load_preset",
           *_PIPELINE_NAMES]


def __getattr__(name: str):
    if name in _PIPELINE_NAMES:
        from lab import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'lab' has no attribute {name!r}")
