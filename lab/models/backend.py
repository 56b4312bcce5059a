"""The contract every model family meets, and the declaration of what each one supports.

A family is one module holding one backend class. The pipeline, the app, the CLI and the
benchmarks never ask which family they run: they build the backend through `registry`, read
its `family` declaration to know which knobs act, and call the methods below. So a new family
(a Fish-Speech-like model, the lab's own autoregressive voice) is a new module that meets this
contract and one line in `registry.FAMILIES`, and no caller changes.

A knob that a family cannot honour is declared with the reason, once: the app greys the widget
out and shows the reason, and a preset or `--set` that changes it is refused with the same
sentence, so the UI and the CLI cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, ClassVar, Protocol

from lab.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from lab.config import PipelineConfig
    from lab.metrics.timers import RequestMeter
    from lab.models.sizing import Plan, Work
    from lab.turns import Shared


@dataclass(frozen=True)
class Family:
    """What a family is and which of the config's knobs act on it.

    `unsupported` maps each knob the family ignores to the reason, in words for the user.
    `dummy_warning` is what a listener must be told when the family runs on random weights.
    """

    name: str
    description: str
    autoregressive: bool
    quantization: str
    unsupported: Mapping[str, str] = field(default_factory=dict)
    dummy_warning: str = ""

    def __post_init__(self) -> None:
        from lab.config import PipelineConfig

        knobs = {f.name for f in fields(PipelineConfig)}
        unknown = sorted(set(self.unsupported) - knobs)
        if unknown:
            raise ValueError(f"{self.name} declares unknown knobs {unknown}")

    def supports(self, knob: str) -> bool:
        return knob not in self.unsupported

    def refusals(self, changed: set[str]) -> list[str]:
        """Each changed knob this family ignores, as 'knob does not apply to name: reason'."""
        return [f"{knob} does not apply to {self.name}: {self.unsupported[knob]}"
                for knob in sorted(changed) if knob in self.unsupported]

    def check(self, config: PipelineConfig) -> None:
        """Refuse a config that moves a knob this family cannot honour off its default."""
        from lab.config import PipelineConfig

        default = PipelineConfig()
        changed = {k for k in self.unsupported if getattr(config, k) != getattr(default, k)}
        problems = self.refusals(changed)
        if problems:
            raise ConfigError("; ".join(problems))


@dataclass(frozen=True)
class EngineQueue:
    """A family's own engine as it stands now: requests it holds back (no free slot yet, or
    shut out by the `admit_lead_ms` or `admit_round_ms` gate), the steps that gate has been
    shut so far, the seconds the serving thread has waited for the device's tokens, the
    engine's recent round (`TokenTTS.round_s`: what the `admit_round_ms` gate reads), and the
    codec windows handed out so far with their summed seconds from launch to hand-out
    (`StreamingDecoder.collect_lag_s`). A server's queue only sees requests waiting for one of
    its slots; these wait inside the pipeline after taking one."""

    waiting: int
    held_steps: int
    device_wait_s: float = 0.0
    round_s: float = 0.0
    codec_windows: int = 0
    codec_lag_s: float = 0.0


class Backend(Protocol):
    """A loaded family: text in, audio out, and what it cost.

    Per-request state (timings, token counts, per-step times) travels in the `RequestMeter`
    the caller passes in; nothing per-request is kept on the backend, so one worker can
    interleave many requests on it.
    """

    family: ClassVar[Family]
    sample_rate: int
    model: torch.nn.Module

    @classmethod
    def load(cls, config: PipelineConfig, device: torch.device) -> Backend:
        """Load weights and apply the model knobs (precision, quantization, compile)."""

    @classmethod
    def size(cls, work: Work) -> Plan:
        """Bytes and phases of `work` from shapes alone, before anything loads: what
        `lab.estimate` turns into a memory verdict and a first guess at time."""

    def prepare(self, text: str) -> tuple[list, list[str]]:
        """Text -> units of work (one per sentence) and notes for the user."""

    def warm_up(self, texts: tuple[str, ...]) -> None:
        """Run the configured path once per text, capturing and compiling now so that
        failures are recorded at load and no request pays for set-up."""

    def synthesize(self, units: list, seeds: list[int],
                   meter: RequestMeter) -> list[np.ndarray]:
        """One waveform per unit, rendered together."""

    def stream(self, unit, seed: int, meter: RequestMeter) -> Iterator[np.ndarray | Shared]:
        """One unit's audio, piece by piece as it is decoded; closing the iterator early
        cancels the unit and frees what it held. A family whose streams share one engine
        yields a `lab.turns.Shared` while it has no audio of its own yet: the worker steps
        that engine once a round for all of them and starts new streams between steps."""

    def fallbacks(self) -> list[str]:
        """Every fallback and note that has fired so far, read live from each component."""

    def applied(self) -> dict[str, object]:
        """The model knobs as they really run now (after fallbacks), by config field name."""

    def memory_facts(self) -> dict[str, str]:
        """What the family holds besides its weights (a KV cache), in comparable words."""

    def engine_queue(self) -> EngineQueue | None:
        """Its engine's admission, read live; None for a family without an engine that
        admits requests one by one."""

