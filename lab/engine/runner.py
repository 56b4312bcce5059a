"""Run the model for a step's prefill chunks and decode batch, and sample the next tokens.

The runner owns the device state of serving: what each slot keeps between steps (its
`kv_cache` mode, see `kv_modes`: static K/V rows, in the model's dtype or fp8 (`kv_dtype`), with
an eager, graphed or compiled decode step; growing K/V; or only token ids), each slot's newest
token and a per-slot mask of tokens already seen (for the repetition penalty). Sampling goes
through `SlotSampler`, replayed as a CUDA graph wherever the decode step is. It never decides
who runs; the scheduler does.

Nothing here waits for the device. A sampled token goes straight into its slot's entry of
`last_token`, which is the next decode step's input, and reaches the host through a pinned copy
(`PendingTokens`) that the engine reads one step later, while the device already computes the
next step. Host-built inputs (positions, sampling settings) travel by pinned, non-blocking
copies for the same reason.

Cache position `max_len - 1` is scratch: the scheduler only admits requests whose prompt and
output fit below it, so padded prefill tokens and the idle rows of a decode batch all write
there, where no live request ever reads (and past any shorter prefix a step reads keys from).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lab.engine.kv_dtype import KV_DTYPES
from lab.engine.kv_modes import KV_MODES
from lab.engine.prefix import PrefixStore
from lab.engine.request import Request
from lab.engine.sampler import Candidates
from lab.engine.scheduler import PrefillChunk
from lab.engine.slot_sampler import SlotSampler
from lab.engine.slots import default_buckets
from lab.engine.transfer import to_device

LogitsProcessor = Callable[[torch.Tensor, list[Request], torch.Tensor],
                           torch.Tensor | Candidates]
"""Edits the logits [n, V] of the listed requests before sampling, or narrows them to a per-row
shortlist of token ids (a family that may only emit codec tokens in a fixed order). It sees
each request as it is at launch (`n_launched` tokens sampled so far) and each row's newest
token [n] on the device, which the host learns only a step later (meaningless for a request
whose `n_launched` is 0).

A processor may declare `vocab_range = (start, stop)`: every token it can ever return lies in
that span. The runner then narrows the model's output head to it (`LM.narrow_head`), so logits
column j is token start + j, and the processor must always return a shortlist (token ids).

A processor that decides from the requests alone may declare `reads_previous = False`: it is
then handed None instead of the newest tokens, and the step skips gathering them (a copy and a
launch, every step)."""


class PendingTokens:
    """Tokens sampled on the device for `requests`, on their way to the host."""

    def __init__(self, requests: list[Request], tokens: torch.Tensor) -> None:
        self.requests = requests
        if tokens.device.type == "cuda":
            self._host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            self._host.copy_(tokens, non_blocking=True)
            self._ready = torch.cuda.Event()
            self._ready.record()
        else:
            self._host, self._ready = tokens, None

    def wait(self) -> list[int]:
        if self._ready is not None:
            self._ready.synchronize()
        return self._host.tolist()


class ModelRunner:
    """Prefill, decode and sample over one LM and its per-slot cache."""

    def __init__(self, model, *, n_slots: int, max_len: int, kv_cache: str = "static",
                 decode_mode: str = "eager", buckets: tuple[int, ...] | None = None,
                 key_buckets: tuple[int, ...] | None = None, kv_dtype: str = "auto",
                 mixed_prefill: int = 0, real_length_attention: bool = True,
                 logits_processor: LogitsProcessor | None = None) -> None:
        if kv_cache not in KV_MODES:
            raise ValueError(f"kv_cache={kv_cache!r}; choose one of {list(KV_MODES)}")
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype={kv_dtype!r}; choose one of {list(KV_DTYPES)}")
        cfg = model.cfg
        if max_len > cfg.max_seq_len:
            raise ValueError(f"max_len={max_len} exceeds the model's max_seq_len={cfg.max_seq_len}")
        self.model, self.max_len = model, max_len
        self.device = model.embed.weight.device
        self.notes: list[str] = []
        self._narrow_head(model, logits_processor)
        # The model's own record: a head narrowed by an earlier engine over the same model
        # still maps logits columns to tokens from its first row.
        self.head_range: tuple[int, int] | None = getattr(model, "head_range", None)
        self.kv = KV_MODES[kv_cache](model, n_slots=n_slots, max_len=max_len,
                                     decode_mode=decode_mode, buckets=buckets,
                                     key_buckets=key_buckets, kv_dtype=kv_dtype,
                                     prefill_tokens=mixed_prefill)
        if real_length_attention:
            self.kv.read_real_lengths()
        self.cache, self.decoder = self.kv.cache, self.kv.decoder
        self.prefixes = PrefixStore()
        # One row past the slots: the scratch row that padded sampling rows write.
        self.seen = torch.zeros(n_slots + 1, cfg.vocab_size, dtype=torch.bool,
                                device=self.device)
        self.last_token = torch.zeros(n_slots + 1, dtype=torch.long, device=self.device)
        decoder = self.kv.decoder
        self.sampler = SlotSampler(
            self.seen, self.last_token,
            default_buckets(n_slots) if decoder is None else decoder.buckets,
            static=decoder is not None and decoder.captures,
            first_id=0 if self.head_range is None else self.head_range[0])
        # Index assignment from a Python scalar copies it host->device and waits for the
        # device; a device-resident True does not.
        self._true = torch.ones((), dtype=torch.bool, device=self.device)
        self.logits_processor = logits_processor

    def _narrow_head(self, model, processor) -> None:
        """Narrow the head to the processor's declared `vocab_range`, if any; where the head's
        weight cannot be sliced (a quantized layout without row slicing) it stays whole and
        the fallbacks say so."""
        span = getattr(processor, "vocab_range", None)
        if span is None:
            return
        try:
            model.narrow_head(*span)
        except (RuntimeError, NotImplementedError, TypeError) as err:
            self.notes.append(f"the output head computes every vocabulary row: narrowing it "
                              f"to tokens {span[0]}..{span[1] - 1} failed ({type(err).__name__}: "
                              f"{err})")

    @property
    def fallbacks(self) -> list[str]:
        return [*self.kv.fallbacks, *self.sampler.fallbacks, *self.notes]

    def warmup(self) -> None:
        """Capture or compile every decode bucket now, so no request pays for it later."""
        self.kv.warmup()

    @torch.inference_mode()
    def prefill(self, chunks: list[PrefillChunk]) -> dict[Request, torch.Tensor]:
        """Write the chunks' prompt tokens into their slots in one batched forward.

        Returns last-token logits [V] for the requests whose prompt is now complete.
        """
        if not chunks:
            return {}
        for chunk in chunks:
            if chunk.starts_prompt:
                self._begin(chunk.request)
        return self.kv.prefill(chunks)

    def keep_prefix(self, ids: list[int], slot: int, chunk: int) -> int:
        """Prefill `ids` into the free `slot` in chunks of `chunk` tokens and keep a copy of
        their K/V for requests that start with them (see `prefix`). Returns the tokens kept: 0
        where the cache mode cannot keep them, which the fallbacks then say."""
        if not self.kv.keeps_prefixes:
            note = (f"the prefix cache needs the static KV cache; kv_cache={self.kv.mode} "
                    "prefills every prompt whole")
            if note not in self.notes:
                self.notes.append(note)
            return 0
        request = Request(ids, request_id="prefix")
        request.slot = slot
        for start in range(0, len(ids), chunk):
            self.prefill([PrefillChunk(request, start, min(len(ids), start + chunk))])
        self.prefixes.add(ids, self.cache.read_slot(slot, len(ids)))
        return len(ids)

    @property
    def carried_prefill(self) -> int:
        """The most prompt tokens a decode step can carry (0: prompts prefill on their own)."""
        return self.kv.carried_prefill

    @torch.inference_mode()
    def decode_with_prefill(self, requests: list[Request], n_rows: int, chunk: PrefillChunk
                            ) -> tuple[dict[Request, torch.Tensor], torch.Tensor]:
        """`decode` and `prefill([chunk])` in one forward: (completed prompts' last-token
        logits, the decode logits). Needs `carried_prefill` >= the chunk's length."""
        if chunk.starts_prompt:
            self._begin(chunk.request)
        return self.kv.decode_with_prefill(requests, n_rows, self.last_token, chunk)

    def _begin(self, request: Request) -> None:
        """A request's first prompt chunk: its slot forgets the previous tenant's tokens
        and takes a copy of the stored prefix the prompt starts with, if any."""
        row = self.seen[request.slot]
        row.zero_()
        row[to_device(request.prompt_ids, torch.long, self.device)] = self._true
        if request.n_cached:
            self.cache.write_slot(request.slot,
                                  self.prefixes.saved(request.prompt_ids, request.n_cached))

    @torch.inference_mode()
    def decode(self, requests: list[Request], n_rows: int) -> torch.Tensor:
        """Logits [len(requests), V] for each request's next token, in request order.

        `n_rows` is one past the highest running slot: the rows a static decode step covers.
        The input tokens are the slots' newest tokens, already on the device.
        """
        return self.kv.decode(requests, n_rows, self.last_token)

    def decode_work(self, requests: list[Request], n_rows: int) -> tuple[int, int]:
        """(rows computed, tokens fed to the model) by `decode(requests, n_rows)`."""
        return self.kv.work(requests, n_rows)

    def free(self, slot: int) -> None:
        """Drop what a finished request left in its slot (the dynamic cache's memory, the
        sampler's hold on the request)."""
        self.kv.free(slot)
        self.sampler.free(slot)

    @torch.inference_mode()
    def sample(self, requests: list[Request], logits: torch.Tensor) -> PendingTokens:
        """Launch sampling of each request's next token (logits row i is requests[i]'s).

        The tokens become their slots' next decode input and are marked seen on the device;
        the host gets them from the returned PendingTokens.
        """
        shortlist = None
        if self.logits_processor is not None:
            edited = self.logits_processor(logits, requests, self._previous(requests))
            shortlist = edited if isinstance(edited, Candidates) else None
            if shortlist is None and self.head_range is not None:
                raise TypeError("a processor that declares vocab_range must return a "
                                "shortlist: its logits cover only that span")
            logits = logits if shortlist is not None else edited
        tokens = self.sampler(requests, logits, shortlist)
        self.kv.record(requests, tokens)
        return PendingTokens(requests, tokens)

    def _previous(self, requests: list[Request]) -> torch.Tensor | None:
        """Each request's newest token, for a processor that reads it."""
        if not getattr(self.logits_processor, "reads_previous", True):
            return None
        return self.last_token[to_device([r.slot for r in requests], torch.long, self.device)]
