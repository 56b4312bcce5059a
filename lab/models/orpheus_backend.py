"""Runs the Orpheus family for the pipeline: each sentence becomes one engine request.

Sentences of all texts in a batch are submitted together, so the continuous-batching engine
keeps `batch_size` of them decoding at once and admits the next as soon as a slot frees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import torch

from lab.config import PipelineConfig
from lab.frontend import check_text, is_speakable, normalize_text, split_sentences
from lab.metrics.timers import StageTimer
from lab.models.orpheus import OrpheusTTS
from lab.models.snac_codec import FRAME_CODES

WARMUP_FRAMES = 4
DUMMY_WARNING = "dummy weights: the LM and codec are random, so the audio is noise, not speech"


class OrpheusBackend:
    def __init__(self, config: PipelineConfig, device: torch.device) -> None:
        self.config = config
        self.tts = OrpheusTTS.from_config(config.replace(device=device.type))
        self.sample_rate = self.tts.sample_rate
        self.model = self.tts.engine.runner.model
        self.kv_cache = self.tts.engine.runner.cache
        self.fallbacks = [*self.tts.fallbacks, *self.tts.engine.fallbacks]
        if config.weights == "dummy":
            self.fallbacks.append(DUMMY_WARNING)
        self.tokens = 0

    def prepare(self, text: str) -> tuple[list[str], list[str]]:
        """Checked, normalized sentences: Orpheus reads words, so there are no phonemes."""
        checked = check_text(text, self.config.max_chars)
        units = [normalize_text(s) for s in split_sentences(checked.text) if is_speakable(s)]
        return units, list(checked.warnings)

    def _sampling(self, seed: int):
        return dataclasses.replace(self.tts.sampling, seed=seed)

    def warm_up(self, texts: tuple[str, ...]) -> None:
        """A few frames of one request per text through the engine and the codec, so compile,
        graph capture and first-call set-up happen at load rather than in the first request."""
        sampling = dataclasses.replace(self._sampling(0), max_tokens=WARMUP_FRAMES * FRAME_CODES)
        units = [self.prepare(text)[0][0] for text in texts]
        self.tts.synthesize(units, self.config.voice, [sampling] * len(units))

    def synthesize(self, units: list[str], seeds: list[int],
                   timer: StageTimer) -> list[np.ndarray]:
        self.tts.timer = timer
        before = self.tts.engine.stats.generated
        audio = self.tts.synthesize(units, self.config.voice, [self._sampling(s) for s in seeds])
        self.tokens = self.tts.engine.stats.generated - before
        return audio

    def stream(self, unit: str, seed: int, timer: StageTimer) -> Iterator[np.ndarray]:
        self.tts.timer = timer
        before = self.tts.engine.stats.generated
        for chunk in self.tts.stream(unit, self.config.voice, self._sampling(seed)):
            self.tokens = self.tts.engine.stats.generated - before
            with timer.stage("to_cpu"):
                yield chunk.audio.float().cpu().numpy()
