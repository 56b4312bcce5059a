"""The state every tab of the app shares, built once per app.

The context holds what outlives a request: the pipeline cache, the vote store under the data
directory and the telemetry sampler. Tabs receive it instead of reaching for globals, so a
test can build an app on a temporary data directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab.config import PipelineConfig, list_presets, load_preset
from lab.estimate import estimate, require
from lab.listening import VoteStore
from lab.metrics.telemetry import TelemetrySampler
from lab.pipeline import Pipeline
from lab.ui.pipelines import PipelineCache
from lab.ui.player import StreamHub

DEFAULT_PRESET = "cpu-default"
GUARD_CHARS = 200  # the text length a load is judged for when no request text is known yet


def default_config() -> PipelineConfig:
    """The shipped CPU preset when present, so the app opens on something that runs anywhere."""
    return load_preset(DEFAULT_PRESET) if DEFAULT_PRESET in list_presets() else PipelineConfig()


@dataclass
class LabContext:
    """Long-lived state shared by every tab and every browser session."""

    data_dir: Path
    cache: PipelineCache | None = None
    votes: VoteStore | None = None
    telemetry: TelemetrySampler = field(default_factory=TelemetrySampler)
    player: StreamHub = field(default_factory=StreamHub)
    cuda_available: bool = field(default_factory=torch.cuda.is_available)
    default: PipelineConfig = field(default_factory=default_config)
    default_preset: str | None = DEFAULT_PRESET if DEFAULT_PRESET in list_presets() else None

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.votes is None:
            self.votes = VoteStore(self.data_dir)
        if self.cache is None:
            self.cache = PipelineCache(factory=self.build_pipeline)

    def build_pipeline(self, cfg: PipelineConfig,
                       on_stage: Callable[[str], None] | None = None) -> Pipeline:
        """A fresh pipeline (benchmarks use it uncached, so they share no warm state), built
        only after an estimate says it fits: every tab's load is refused with the numbers,
        before any weights load, when it would not."""
        require(estimate(cfg, GUARD_CHARS, rates_dir=self.data_dir))
        return Pipeline(cfg, on_stage)
