"""Which families exist, and where each one's backend lives.

One table maps a family name to `module:Class`. The module is imported only when the family is
asked for, so naming the families (the config's choices) costs nothing, and a family with heavy
imports is paid for only by whoever uses it. What a family supports is read off its class
(`Backend.family`), never from a second hand-kept table.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from lab.config import PipelineConfig
    from lab.models.backend import Backend, Family

FAMILIES: dict[str, str] = {
    "piper-vits": "lab.models.piper_backend:PiperBackend",
    "ar-voice": "lab.models.voice_backend:VoiceBackend",
    "orpheus": "lab.models.orpheus_backend:OrpheusBackend",
}


def backend_class(name: str) -> type[Backend]:
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; choose one of {sorted(FAMILIES)}")
    module, _, cls = FAMILIES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def family(name: str) -> Family:
    """A family's declaration: its description and the knobs that act on it."""
    return backend_class(name).family


def load_backend(config: PipelineConfig, device: torch.device) -> Backend:
    """The family's backend for `config`, which its `family(...).check` has passed (the
    pipeline checks before it says anything of loading)."""
    return backend_class(config.family).load(config, device)
