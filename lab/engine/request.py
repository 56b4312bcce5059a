"""One generation request as the engine sees it, and what each engine step hands back.

A request owns everything that must not depend on its batch neighbours: its prompt, its sampling
settings, its own random stream and its outputs. The scheduler only moves requests between
queues and the runner only reads them, so a request generates the same tokens whether it runs
alone or among a hundred others.
"""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch


class RequestError(ValueError):
    """A request that cannot be served as given (empty prompt, bad sampling value, too long)."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling. `top_k=0` and `top_p=1.0` switch those filters off;
    `temperature=0` is greedy. `seed=None` draws a fresh seed at admission."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 50
    repetition_penalty: float = 1.1
    max_tokens: int = 1200
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise RequestError(f"temperature={self.temperature} must be >= 0")
        if not 0 < self.top_p <= 1:
            raise RequestError(f"top_p={self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise RequestError(f"top_k={self.top_k} must be >= 0 (0 switches it off)")
        if self.repetition_penalty <= 0:
            raise RequestError(f"repetition_penalty={self.repetition_penalty} must be > 0")
        if self.max_tokens < 1:
            raise RequestError(f"max_tokens={self.max_tokens} must be >= 1")


class State(enum.Enum):
    WAITING = "waiting"        # queued, holds no cache slot
    PREFILLING = "prefilling"  # holds a slot, prompt partly written to the cache
    RUNNING = "running"        # prompt done, one token per decode step
    FINISHED = "finished"


_ids = itertools.count()
UNIFORM_BLOCK = 64
"""Draws a request's random stream hands out at a time (`Request.uniform_block`)."""


@dataclass(eq=False)
class Request:
    """Prompt, settings and progress of one generation."""

    prompt_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = ""
    arrival: float = field(default_factory=time.perf_counter)
    admitted: float | None = None  # when the scheduler gave it a slot (perf_counter)
    state: State = State.WAITING
    slot: int | None = None
    n_prefilled: int = 0
    n_cached: int = 0  # leading prompt tokens whose K/V a stored prefix gives
    n_launched: int = 0
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    first_token_time: float | None = None
    finish_time: float | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise RequestError("prompt is empty: a request needs at least one token")
        if not self.request_id:
            self.request_id = f"req-{next(_ids)}"
        seed = self.sampling.seed
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self._generator = torch.Generator(device="cpu").manual_seed(seed)

    @property
    def position(self) -> int:
        """Cache position the next decode step writes: that of the newest sampled token.

        Sampling is launched a step before its token reaches the host, so this follows
        `n_launched` (tokens whose sampling has been queued), not `len(output_ids)`.
        """
        return len(self.prompt_ids) + self.n_launched - 1

    @property
    def can_launch(self) -> bool:
        """True while another token may be sampled without passing `max_tokens`."""
        return self.n_launched < self.sampling.max_tokens

    @property
    def admission_wait_s(self) -> float | None:
        """Seconds from arrival to a slot: how long the engine kept it out (no free slot, or
        an admission gate shut); None until it has one."""
        return None if self.admitted is None else self.admitted - self.arrival

    @property
    def is_finished(self) -> bool:
        return self.state is State.FINISHED

    @cached_property
    def settings(self) -> tuple[float, float, int, float]:
        """Temperature, top-p, top-k and repetition penalty, read once: they hold for the
        request's life, and a step with two hundred rows reads them for each row."""
        s = self.sampling
        return s.temperature, s.top_p, s.top_k, s.repetition_penalty

    def uniform_block(self) -> np.ndarray:
        """The next `UNIFORM_BLOCK` draws of this request's own random stream, in [0, 1).

        Each sampled token takes the next draw, so the sequence depends only on the seed and
        how many tokens this request has sampled, never on who shares the batch. The sampler
        keeps the block beside the request's slot (`lab.engine.slot_sampler`), which is where
        a step reads it.
        """
        return torch.rand(UNIFORM_BLOCK, generator=self._generator, dtype=torch.float64).numpy()

    def append(self, token: int) -> None:
        if self.first_token_time is None:
            self.first_token_time = time.perf_counter()
        self.output_ids.append(token)

    def stop_reason(self) -> str | None:
        """Why this request should stop after its latest token, or None to go on."""
        if self.output_ids and self.output_ids[-1] in self.sampling.stop_token_ids:
            return "stop"
        if len(self.output_ids) >= self.sampling.max_tokens:
            return "length"
        return None

    def finish(self, reason: str) -> None:
        self.state = State.FINISHED
        self.finish_reason = reason
        self.finish_time = time.perf_counter()


@dataclass
class StepOutput:
    """What one engine step produced for one request.

    Token models fill `token_ids` (the new tokens of this step, usually one); frame models
    (a mel-frame decoder) fill `frames` with a [n_new, frame_dim] tensor instead. Consumers
    (a codec or vocoder stage) read whichever is set, and `finished` says no more will come.
    """

    request_id: str
    token_ids: list[int] = field(default_factory=list)
    frames: torch.Tensor | None = None
    finished: bool = False
    finish_reason: str | None = None
    n_generated: int = 0
