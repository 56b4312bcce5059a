"""The teacher: the embedded Piper voice renders training text into what the student learns.

For each sentence it keeps the voice's phoneme ids, the frames the duration predictor gave each
id, and the latent frames its flow produced: the 192-channel input of the voice's own HiFi-GAN,
which the lab's codec quantizes. The audio itself is never made (the vocoder is the costly
stage and the codec's decoder *is* that vocoder). The voice's noise scales stay on, so the data
carries the natural variety of its takes; each sentence's noise is seeded by its index, so the
same text set gives the same data on any device.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lab.config import PipelineConfig
from lab.metrics.timers import StageTimer
from lab.models.piper_backend import PiperBackend
from lab.models.piper_voice import load_voice


@dataclass
class Take:
    """One sentence as the teacher spoke it."""

    index: int
    piper_ids: list[int]
    durations: np.ndarray   # [len(piper_ids)] frames per id
    latents: torch.Tensor   # [frames, channels], float32 on the CPU

    @property
    def seconds(self) -> float:
        return len(self.latents) * 256 / 22050


class Teacher:
    """The default voice on a device, turning phoneme ids into takes in padded batches."""

    def __init__(self, device: str = "cpu", dtype: str = "fp32", voice: str = "default") -> None:
        """`voice` is any source `load_voice` reads: a GPU machine without the voice's package
        gets its safetensors export."""
        config = PipelineConfig(family="piper-vits", device=device, dtype=dtype)
        self.device = torch.device(device)
        self.backend = PiperBackend(load_voice(voice), config, self.device)
        self.timer = StageTimer(self.device)

    def ids(self, text: str) -> list[list[int]]:
        """One id list per sentence the voice's frontend finds in `text`."""
        return self.backend.prepare(text)[0]

    def render(self, ids: Sequence[list[int]], indices: Sequence[int],
               seed: int = 0) -> list[Take]:
        """Takes for a batch of id lists. Sentence i's noise is seeded by its own index, not
        its batch position (spaced by 2: the backend draws the flow's noise from seed + 1)."""
        seeds = [2 * (seed + i) for i in indices]
        latents = self.backend.latents(list(ids), seeds, self.timer)
        z = latents.z.float().transpose(1, 2).cpu()
        durations = latents.durations.cpu().numpy()
        lengths = latents.lengths.tolist()
        return [Take(index, list(seq), durations[row, :len(seq)].astype(np.int16), z[row, :n])
                for row, (index, seq, n) in enumerate(zip(indices, ids, lengths, strict=True))]

    def takes(self, ids: Sequence[list[int]], batch_size: int = 64,
              seed: int = 0) -> Iterator[Take]:
        """Every sentence's take, in order, rendered `batch_size` at a time; sentences are
        batched by length so padding stays small."""
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        done: dict[int, Take] = {}
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            for take in self.render([ids[i] for i in chunk], chunk, seed):
                done[take.index] = take
        for i in range(len(ids)):
            yield done.pop(i)
