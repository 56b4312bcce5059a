"""The serving loop: requests in, one step at a time, new tokens out.

`step()` is the whole engine: admit and prefill (in chunks) whoever the scheduler lets in, launch
one decode step over every running request, then take in the tokens of the previous step, apply
stop rules, free finished slots, and report what each request produced. Callers that stream (a
codec turning tokens into audio) call `step()` themselves and consume each `StepOutput` as it
comes; `generate()` is the batch form.

The device runs one step ahead of the host: step k's tokens feed step k+1 on the device while
the host applies stop rules to them and hands them to the codec. The price is that a request
that stops at step k has one wasted row in step k+1; the gain is that host bookkeeping no longer
leaves the device idle between steps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from lab.engine.request import Request, RequestError, SamplingParams, StepOutput
from lab.engine.runner import LogitsProcessor, ModelRunner, PendingTokens
from lab.engine.scheduler import Scheduler, SchedulerConfig


@dataclass(frozen=True)
class EngineConfig:
    """Serving shape: `n_slots` concurrent requests of at most `max_len` tokens each.

    `kv_cache` is what a slot keeps between steps ('static', 'dynamic' or 'none', see
    `kv_modes`); a `decode_mode` other than eager needs 'static' and is otherwise noted in
    the fallbacks and run eagerly.

    A captured or compiled decode step has fixed shapes: `buckets` are the batch sizes it is
    captured at (None: `slots.default_buckets`) and `key_buckets` the cache prefixes it reads
    (None: `graphs.default_key_buckets`, 64, 128 ... `max_len`; an empty tuple: the whole
    cache every step). Each (batch, key) pair is one graph, so their product is the capture
    time and the number of graphs kept.

    `kv_dtype` is what the static cache stores K/V in: 'auto' (the model's dtype) or
    'fp8-e4m3' (half the bytes of bf16 plus a scale per head vector, see `kv_dtype`); where
    fp8 cannot run, or the cache is not static, the fallbacks say so. fp8 buys slots or
    context, not speed: the real-length decode attention reads it as stored; elsewhere pair it
    with a compiled `decode_mode`, which fuses its dequantization.

    `mixed_prefill` > 0 lets a decode step carry one prompt chunk of up to that many tokens
    (static cache only; the fallbacks say so otherwise): a request arriving while others
    decode is prefilled inside their step instead of in a forward of its own, which would
    stall every running stream for a whole extra pass over the weights. Each (batch, key)
    pair then has a second graph with the chunk. With nothing decoding, prompts still prefill
    on their own, several at once, within `prefill_chunk` and `prefill_budget`.

    `real_length_attention` lets each row of a static decode step on a GPU read only its own
    filled positions (`decode_attention`) rather than the whole key bucket; off, or where the
    kernel cannot run, every row reads the bucket (the fallbacks say why).
    """

    n_slots: int = 16
    max_len: int = 2048
    prefill_chunk: int = 512
    prefill_budget: int = 4096
    policy: str = "continuous"
    kv_cache: str = "static"
    decode_mode: str = "eager"
    buckets: tuple[int, ...] | None = None
    key_buckets: tuple[int, ...] | None = None
    kv_dtype: str = "auto"
    mixed_prefill: int = 0
    real_length_attention: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.mixed_prefill < self.max_len:
            raise ValueError(f"mixed_prefill={self.mixed_prefill} must lie in "
                             f"[0, max_len={self.max_len})")


@dataclass
class EngineStats:
    """Counters that show where the time goes: idle rows are decode work thrown away,
    `decode_tokens` is what the cache mode costs (one token per row with a cache, the whole
    prefix of every running request without one), and `carried_prefill_tokens` the part of
    `prefill_tokens` written inside decode steps (`EngineConfig.mixed_prefill`);
    `cached_prefix_tokens` are prompt tokens copied from a stored prefix instead of
    prefilled (`LLMEngine.cache_prefix`)."""

    steps: int = 0
    prefill_tokens: int = 0
    carried_prefill_tokens: int = 0
    cached_prefix_tokens: int = 0
    decode_steps: int = 0
    decode_rows: int = 0
    active_rows: int = 0
    decode_tokens: int = 0
    last_decode_tokens: int = 0
    generated: int = 0
    token_wait_s: float = 0.0
    """Seconds the host spent waiting for sampled tokens to reach it: the device's share of
    the host thread's time. The rest of a busy serving thread's time is host work."""

    @property
    def row_utilisation(self) -> float:
        return self.active_rows / self.decode_rows if self.decode_rows else 0.0


class LLMEngine:
    """Continuous (or static) batching over one LM and its per-slot cache.

    `logits_processor` is the family's hook between logits and sampling (see `runner`).
    """

    def __init__(self, model, config: EngineConfig | None = None, *,
                 logits_processor: LogitsProcessor | None = None) -> None:
        self.config = config or EngineConfig()
        c = self.config
        self.scheduler = Scheduler(SchedulerConfig(
            n_slots=c.n_slots, max_len=c.max_len, prefill_chunk=c.prefill_chunk,
            prefill_budget=c.prefill_budget, policy=c.policy))
        self.runner = ModelRunner(model, n_slots=c.n_slots, max_len=c.max_len,
                                  kv_cache=c.kv_cache, decode_mode=c.decode_mode,
                                  buckets=c.buckets, key_buckets=c.key_buckets,
                                  kv_dtype=c.kv_dtype, mixed_prefill=c.mixed_prefill,
                                  real_length_attention=c.real_length_attention,
                                  logits_processor=logits_processor)
        self.vocab_size = model.cfg.vocab_size
        self.requests: dict[str, Request] = {}
        self.stats = EngineStats()
        self._pending: list[PendingTokens] = []

    @property
    def fallbacks(self) -> list[str]:
        return self.runner.fallbacks

    def _token_ids(self, prompt_ids: Sequence[int]) -> list[int]:
        ids = [int(t) for t in prompt_ids]
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise RequestError(f"prompt token {bad[0]} is outside the vocabulary "
                               f"(0..{self.vocab_size - 1})")
        return ids

    def cache_prefix(self, prompt_ids: Sequence[int]) -> int:
        """Prefill `prompt_ids` once now and keep their K/V (see `prefix`): a later request
        whose prompt starts with them and goes on takes a copy instead of prefilling them.
        Returns the tokens kept, 0 where the cache mode cannot keep them (the fallbacks say
        why). Needs a free slot for the moment it prefills, so call it before serving."""
        ids = self._token_ids(prompt_ids)
        if not 1 <= len(ids) < self.config.max_len - 1:
            raise RequestError(f"a prefix of {len(ids)} tokens does not fit the cache "
                               f"({self.config.max_len} positions)")
        if not self.scheduler.slots.n_free:
            raise RequestError("every slot is busy: cache prefixes before serving")
        slot = self.scheduler.slots.allocate()
        try:
            return self.runner.keep_prefix(ids, slot, self.config.prefill_chunk)
        finally:
            self.scheduler.slots.free(slot)

    def add_request(self, prompt_ids: Sequence[int], sampling: SamplingParams | None = None,
                    request_id: str | None = None) -> str:
        """Queue a request; returns its id. Bad input raises RequestError and queues nothing."""
        ids = self._token_ids(prompt_ids)
        if request_id is not None and request_id in self.requests:
            raise RequestError(f"request id {request_id!r} is already in use")
        request = Request(ids, sampling or SamplingParams(), request_id=request_id or "",
                          n_cached=self.runner.prefixes.match(ids))
        self.scheduler.add(request)
        self.requests[request.request_id] = request
        return request.request_id

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its slot; False when it is unknown or already done."""
        request = self.requests.get(request_id)
        slot = None if request is None else request.slot
        if self.scheduler.abort(request_id) is None:
            return False
        if slot is not None:
            self.runner.free(slot)
        return True

    def release(self, request_id: str) -> Request:
        """Hand back a finished request's record and forget it (a long-lived server calls this
        once it has consumed the outputs, so finished requests do not pile up)."""
        request = self.requests.get(request_id)
        if request is None or not request.is_finished:
            raise RequestError(f"request {request_id!r} is unknown or still running")
        return self.requests.pop(request_id)

    def gate_admission(self, open_: bool | None) -> None:
        """Pace or stop continuous admission (see `Scheduler.gate`; None: admit whoever
        fits); the caller decides from its streams whether they keep up."""
        self.scheduler.gate = open_

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work or bool(self._pending)

    def step(self) -> list[StepOutput]:
        """Launch this step's prefill and decode, then retire the previous step's tokens.

        A prompt completed this step is sampled first; it joins the decode batch next step.
        """
        launched: list[PendingTokens] = []
        self.stats.last_decode_tokens = 0
        batch = [r for r in self.scheduler.decode_batch() if r.can_launch and r.n_launched]
        rows = self.scheduler.decode_rows()
        carry = self.runner.carried_prefill if batch else 0
        chunks = self.scheduler.plan_prefill(carry)
        decoded = None
        if carry and chunks:
            completed, decoded = self.runner.decode_with_prefill(batch, rows, chunks[0])
            self.stats.carried_prefill_tokens += chunks[0].stop - chunks[0].start
        else:
            completed = self.runner.prefill(chunks)
        for chunk in chunks:
            self.scheduler.prefilled(chunk)
            self.stats.prefill_tokens += chunk.stop - chunk.start
            if chunk.starts_prompt:
                self.stats.cached_prefix_tokens += chunk.start
        if completed:
            ready = list(completed)
            logits = torch.stack([completed[r] for r in ready])
            launched.append(self._launch(ready, logits))
        if batch:
            self._count_decode(batch, rows)
            if decoded is None:
                decoded = self.runner.decode(batch, rows)
            launched.append(self._launch(batch, decoded))
        self.stats.steps += 1
        previous, self._pending = self._pending, launched
        return self._retire(previous)

    def _count_decode(self, batch: list[Request], rows: int) -> None:
        computed, tokens = self.runner.decode_work(batch, rows)
        self.stats.decode_steps += 1
        self.stats.decode_rows += computed
        self.stats.active_rows += len(batch)
        self.stats.decode_tokens += tokens
        self.stats.last_decode_tokens = tokens

    def _launch(self, requests: list[Request], logits: torch.Tensor) -> PendingTokens:
        pending = self.runner.sample(requests, logits)
        for request in requests:
            request.n_launched += 1
        return pending

    def _retire(self, pending: list[PendingTokens]) -> list[StepOutput]:
        """Hand sampled tokens to their requests; a request finished meanwhile drops its own."""
        outputs: dict[str, StepOutput] = {}
        for flight in pending:
            start = time.perf_counter()
            tokens = flight.wait()
            self.stats.token_wait_s += time.perf_counter() - start
            for request, token in zip(flight.requests, tokens, strict=True):
                if request.is_finished:
                    continue
                request.append(token)
                self.stats.generated += 1
                out = outputs.setdefault(request.request_id, StepOutput(request.request_id))
                out.token_ids.append(token)
                out.n_generated = len(request.output_ids)
                slot = request.slot
                if self.scheduler.after_token(request):
                    self.runner.free(slot)
                    out.finished, out.finish_reason = True, request.finish_reason
        return list(outputs.values())

    def iterate(self) -> Iterator[list[StepOutput]]:
        """Step until every queued request has finished, yielding each step's outputs."""
        while self.has_unfinished():
            yield self.step()

    def generate(self, prompts: Sequence[Sequence[int]],
                 sampling: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[list[int]]:
        """Generated tokens per prompt, in prompt order (runs everything queued to the end)."""
        params = sampling if isinstance(sampling, Sequence) else [sampling] * len(prompts)
        if len(params) != len(prompts):
            raise RequestError(f"{len(params)} sampling settings for {len(prompts)} prompts")
        ids = [self.add_request(p, s) for p, s in zip(prompts, params, strict=True)]
        for _ in self.iterate():
            pass
        return [self.release(i).output_ids for i in ids]
