"""Decide, at every engine step, who gets a cache slot, whose prompt is written and who decodes.

Continuous batching: a waiting request takes a slot the moment one is free, its prompt is written
in chunks between decode steps (so a long prompt never stalls everyone else's next token), and a
finished request gives its slot back at once. Static batching, kept for comparison, admits a
batch only when the previous one has fully finished, so early finishers leave their rows idle.

A caller that watches whether its running streams keep up (a listener's audio in hand) can
`gate` continuous admission: open, at most one waiting request goes in per step, so the effect
of each new stream shows before the next; shut, none goes in while anything prefills or runs,
so the streams in flight get the steps back instead of sharing them with one more row. With
nothing in flight a shut gate still lets one in, so gating never stops the engine. None, the
default, admits whoever fits.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from dataclasses import dataclass
from operator import attrgetter

from lab.engine.request import Request, RequestError, State
from lab.engine.slots import SlotManager

POLICIES = ("continuous", "static")


@dataclass(frozen=True)
class SchedulerConfig:
    """`prefill_chunk` caps the prompt tokens one request writes per step; `prefill_budget`
    caps the padded tokens (rows x longest chunk) of all prefill work in one step."""

    n_slots: int
    max_len: int
    prefill_chunk: int = 512
    prefill_budget: int = 4096
    policy: str = "continuous"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy={self.policy!r}; choose one of {list(POLICIES)}")
        for name in ("n_slots", "max_len", "prefill_chunk", "prefill_budget"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.prefill_budget < self.prefill_chunk:
            raise ValueError(f"prefill_budget={self.prefill_budget} must be >= "
                             f"prefill_chunk={self.prefill_chunk}")


@dataclass(frozen=True)
class PrefillChunk:
    """Prompt tokens [start, stop) of one request, written into its slot this step."""

    request: Request
    start: int
    stop: int

    @property
    def tokens(self) -> list[int]:
        return self.request.prompt_ids[self.start:self.stop]

    @property
    def starts_prompt(self) -> bool:
        """The request's first chunk: its prompt from just past any stored prefix."""
        return self.start == self.request.n_cached

    @property
    def completes_prompt(self) -> bool:
        return self.stop == len(self.request.prompt_ids)


class Scheduler:
    """Queues of waiting, prefilling and running requests over one SlotManager."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.slots = SlotManager(config.n_slots)
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.running: list[Request] = []
        self.gate: bool | None = None  # see the module's docstring
        self._batch_rows = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def add(self, request: Request) -> None:
        need = len(request.prompt_ids) + request.sampling.max_tokens
        if need > self.config.max_len:
            raise RequestError(
                f"prompt ({len(request.prompt_ids)} tokens) + max_tokens "
                f"({request.sampling.max_tokens}) = {need} exceeds the cache length "
                f"{self.config.max_len}")
        self.waiting.append(request)

    def plan_prefill(self, carry: int = 0) -> list[PrefillChunk]:
        """Admit what the policy allows, then cut this step's prompt chunks within budget; or,
        with `carry` > 0 (a decode step will carry the prompt), at most one chunk of at most
        `carry` tokens."""
        self._admit()
        if carry:
            return [self._carried(self.prefilling[0], carry)] if self.prefilling else []
        chunks: list[PrefillChunk] = []
        longest = 0
        for request in self.prefilling:
            size = min(len(request.prompt_ids) - request.n_prefilled, self.config.prefill_chunk)
            if (len(chunks) + 1) * max(longest, size) > self.config.prefill_budget:
                break
            longest = max(longest, size)
            start = request.n_prefilled
            chunks.append(PrefillChunk(request, start, start + size))
        return chunks

    @staticmethod
    def _carried(request: Request, carry: int) -> PrefillChunk:
        start = request.n_prefilled
        return PrefillChunk(request, start, min(len(request.prompt_ids), start + carry))

    def _admit(self) -> None:
        idle = not (self.prefilling or self.running)
        if self.config.policy == "static":
            if not idle:
                return
            self._batch_rows = min(len(self.waiting), self.config.n_slots)
        elif self.gate is not None:
            if self.waiting and self.slots.n_free and (self.gate or idle):
                self._start(self.waiting.popleft())
            return
        while self.waiting and self.slots.n_free:
            self._start(self.waiting.popleft())

    def _start(self, request: Request) -> None:
        request.slot = self.slots.allocate()
        request.admitted = time.perf_counter()
        request.n_prefilled = request.n_cached
        request.state = State.PREFILLING
        self.prefilling.append(request)

    def prefilled(self, chunk: PrefillChunk) -> None:
        """Record a written chunk; a finished prompt moves its request to the running set."""
        request = chunk.request
        request.n_prefilled = chunk.stop
        if chunk.completes_prompt:
            self.prefilling.remove(request)
            request.state = State.RUNNING
            bisect.insort(self.running, request, key=attrgetter("slot"))

    def decode_batch(self) -> list[Request]:
        """Running requests, ascending by slot (the row order of the decode batch): kept in
        that order as they join, so a step with hundreds of rows does not sort them again."""
        return list(self.running)

    def decode_rows(self) -> int:
        """Cache rows a decode step covers: one past the highest running slot, or under the
        static policy the whole admitted batch until its last request finishes."""
        return max(self.running[-1].slot + 1, self._batch_rows) if self.running else 0

    def after_token(self, request: Request) -> bool:
        """Apply the stop rules after a request's newest token; True when it finished."""
        reason = request.stop_reason()
        if reason is None:
            return False
        self._release(request, reason)
        return True

    def abort(self, request_id: str) -> Request | None:
        """Drop a request wherever it is; its slot is free for the next admission."""
        for queue in (self.waiting, self.prefilling, self.running):
            for request in queue:
                if request.request_id == request_id:
                    self._release(request, "abort")
                    return request
        return None

    def _release(self, request: Request, reason: str) -> None:
        if request.state is State.WAITING:
            self.waiting.remove(request)
        elif request.state is State.PREFILLING:
            self.prefilling.remove(request)
        elif request.state is State.RUNNING:
            self.running.remove(request)
        if request.slot is not None:
            self.slots.free(request.slot)
            request.slot = None
        request.finish(reason)
