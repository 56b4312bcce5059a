"""How a step reaches the past, one class per `kv_cache` mode, over the same slots.

The runner hands each mode a step's prefill chunks (and gets the last-token logits of each
prompt they complete) or its decode batch (and gets each request's next-token logits); the
modes differ only in what a slot keeps between steps:

- `static`: K/V preallocated per slot (`StaticKVCache`); the decode step runs over rows
  [0, n_rows) with fixed shapes and addresses, so it can be captured as a CUDA graph, and
  reads only the prefix of the cache that the batch's longest row needs (a key bucket).
- `dynamic`: K/V per slot that grow by concatenation (`SlotDynamicCache`); only the running
  rows are computed, but every step copies their whole history. Always eager.
- `none`: only token ids (`NoKVCache`); every step recomputes each running request's whole
  prefix, so its work grows with the length generated. Always eager.

`work()` says what a decode step made the model do (rows covered, tokens fed), so the engine's
counters show the cost of a mode without timing it.
"""

from __future__ import annotations

import numpy as np
import torch

from lab.engine.cache import NoKVCache, SlotDynamicCache, StaticKVCache
from lab.engine.graphs import GraphedDecoder
from lab.engine.kv_dtype import KV_DTYPES, storage_dtype
from lab.engine.request import Request
from lab.engine.scheduler import PrefillChunk
from lab.engine.slots import default_buckets
from lab.engine.transfer import to_device


def _left_padded(rows: list[list[int]], starts: list[int], scratch: int, width: int = 0):
    """Token rows left-padded to the longest (or `width`), with their positions (padding at
    `scratch`), so every row's last real token sits in the last column."""
    width = max(width, *(len(r) for r in rows))
    tokens = [[0] * (width - len(r)) + r for r in rows]
    positions = [[scratch] * (width - len(r)) + list(range(s, s + len(r)))
                 for r, s in zip(rows, starts, strict=True)]
    return tokens, positions


def _completed(chunks: list[PrefillChunk], logits: torch.Tensor) -> dict[Request, torch.Tensor]:
    """Logits row i belongs to chunks[i]; only a completed prompt has a next token to sample."""
    return {c.request: logits[i] for i, c in enumerate(chunks) if c.completes_prompt}


class _SlotMode:
    """Hooks a mode may leave alone: nothing to capture, nothing to note per sampled token,
    nothing to drop when a request leaves its slot, no prompt chunk carried in a decode step
    (`carried_prefill` is the most prompt tokens `decode_with_prefill` takes), no prompt
    prefixes kept for reuse (`keeps_prefixes`: only fixed slot rows can take a copy, see
    `prefix`)."""

    carried_prefill = 0
    keeps_prefixes = False

    def warmup(self) -> None:
        """Nothing to capture."""

    def read_real_lengths(self) -> None:
        """Nothing to change: only the static cache's decode step reads a key bucket."""

    def record(self, requests: list[Request], tokens: torch.Tensor) -> None:
        """Nothing to do: a sampled token reaches the model as the next step's input."""

    def free(self, slot: int) -> None:
        """Nothing to drop: the next prefill overwrites what it will read."""


class StaticSlots(_SlotMode):
    """Preallocated K/V rows; decode goes through GraphedDecoder (eager, graph or compiled)."""

    keeps_prefixes = True

    def __init__(self, model, *, n_slots: int, max_len: int, decode_mode: str,
                 buckets: tuple[int, ...] | None, key_buckets: tuple[int, ...] | None,
                 kv_dtype: str, prefill_tokens: int = 0) -> None:
        cfg, weight = model.cfg, model.embed.weight
        self.model, self.max_len = model, max_len
        dtype, why = storage_dtype(kv_dtype, weight.dtype, weight.device)
        self._notes = [] if why is None else [why]
        self.cache = StaticKVCache(cfg.n_layers, n_slots, max_len, cfg.n_kv_heads, cfg.head_dim,
                                   dtype, weight.device)
        self.decoder = GraphedDecoder(model, self.cache, decode_mode,
                                      buckets or default_buckets(n_slots), key_buckets,
                                      prefill_tokens)
        self.device = weight.device

    @property
    def fallbacks(self) -> list[str]:
        return [*self._notes, *self.decoder.fallbacks]

    def warmup(self) -> None:
        self.decoder.capture()

    def read_real_lengths(self) -> None:
        """Let each decode row read its own filled positions (`decode_attention`) instead of
        the batch's key bucket, where the kernel runs: on a GPU, over K/V in the model's dtype
        or fp8, after it matched the reference on a probe. Elsewhere the fallbacks say why
        not; an eager step on a CPU already reads exactly the keys its longest row needs."""
        if self.device.type != "cuda":
            return
        why = self.model.read_real_lengths(self.cache.k.dtype)
        if why is not None:
            self._notes.append(f"decode attention reads the batch's key bucket: {why}")

    def prefill(self, chunks: list[PrefillChunk]) -> dict[Request, torch.Tensor]:
        """The chunks' rows are gathered only up to the furthest chunk's end: padding writes
        at the scratch position, past that prefix."""
        tokens, positions = _left_padded([c.tokens for c in chunks], [c.start for c in chunks],
                                         self.max_len - 1)
        rows = to_device([c.request.slot for c in chunks], torch.long, self.device)
        view = self.cache.prefix(max(c.stop for c in chunks))
        logits = self.model(to_device(tokens, torch.long, self.device),
                            to_device(positions, torch.long, self.device), view,
                            rows=rows, last_only=True)
        return _completed(chunks, logits[:, -1])

    def decode(self, requests: list[Request], n_rows: int,
               last_token: torch.Tensor) -> torch.Tensor:
        """A captured or compiled step covers rows [0, n_rows) over the key bucket that holds
        the longest request; rows without a running request compute a throw-away token at the
        scratch position. An eager step needs no fixed shape, so it runs only the requests,
        over exactly the positions the longest of them has."""
        if self.decoder.mode == "eager":
            return self._decode_live(requests, last_token)
        slots, positions = [r.slot for r in requests], [r.position for r in requests]
        logits = self.decoder(last_token[:n_rows, None],
                              self._row_positions(slots, positions, n_rows), max(positions) + 1)
        return self._rows_of(slots, logits)

    @property
    def carried_prefill(self) -> int:
        return self.decoder.prefill_tokens

    def decode_with_prefill(self, requests: list[Request], n_rows: int,
                            last_token: torch.Tensor, chunk: PrefillChunk
                            ) -> tuple[dict[Request, torch.Tensor], torch.Tensor]:
        """A decode step that also writes a prompt chunk: (the prompt's last-token logits if
        the chunk completes it, the decode logits). The chunk rides in the decode step's
        forward (rows [0, n_rows) as in `decode`, eager included, since one forward still beats
        two), padded to the decoder's `prefill_tokens`; the step reads keys as far as the
        furthest of both needs."""
        tokens, positions = _left_padded([chunk.tokens], [chunk.start], self.max_len - 1,
                                         self.decoder.prefill_tokens)
        slots, at = [r.slot for r in requests], [r.position for r in requests]
        logits, last = self.decoder.with_prefill(
            last_token[:n_rows, None], self._row_positions(slots, at, n_rows),
            max(chunk.stop, max(at) + 1),
            to_device(tokens, torch.long, self.device),
            to_device(positions, torch.long, self.device),
            to_device([chunk.request.slot], torch.long, self.device))
        return _completed([chunk], last[:, -1]), self._rows_of(slots, logits)

    def _row_positions(self, slots: list[int], positions: list[int], n_rows: int
                       ) -> torch.Tensor:
        """[n_rows, 1]: each request's position in its slot's row, scratch elsewhere."""
        rows = np.full(n_rows, self.max_len - 1, dtype=np.int64)
        rows[slots] = positions
        return to_device(rows, torch.long, self.device)[:, None]

    def _rows_of(self, slots: list[int], logits: torch.Tensor) -> torch.Tensor:
        """Each request's row of the step's logits: a view where the requests hold slots 0 to
        n-1 in order (the slot manager packs them low, so most steps), which spares a gather
        and its index copy every step; a gather elsewhere."""
        if _packed(slots):
            return logits[:len(slots), -1]
        return logits[to_device(slots, torch.long, self.device), -1]

    def _decode_live(self, requests: list[Request], last_token: torch.Tensor) -> torch.Tensor:
        """Slots 0..n-1 (the usual case) are a view of the cache; other sets are gathered."""
        slots = [r.slot for r in requests]
        rows = to_device(slots, torch.long, self.device)
        positions = to_device([[r.position] for r in requests], torch.long, self.device)
        view = self.cache.prefix(max(r.position for r in requests) + 1)
        contiguous = _packed(slots)
        return self.model(last_token[rows, None], positions, view,
                          rows=None if contiguous else rows, last_only=True)[:, -1]

    def work(self, requests: list[Request], n_rows: int) -> tuple[int, int]:
        rows = len(requests) if self.decoder.mode == "eager" else n_rows
        return rows, rows


class _EagerSlots(_SlotMode):
    """What the modes without fixed shapes share: no graphs, so a request for them is noted."""

    decoder = None

    def __init__(self, model, *, n_slots: int, max_len: int, decode_mode: str,
                 buckets: tuple[int, ...] | None, key_buckets: tuple[int, ...] | None,
                 kv_dtype: str, prefill_tokens: int = 0) -> None:
        self.model, self.n_slots, self.max_len = model, n_slots, max_len
        self.device = model.embed.weight.device
        self.fallbacks: list[str] = []
        if decode_mode != "eager":
            self.fallbacks.append(
                f"CUDA graphs need the static KV cache; kv_cache={self.mode} ran eager")
        if KV_DTYPES[kv_dtype] is not None:
            self.fallbacks.append(f"kv_dtype={kv_dtype} needs the static KV cache; "
                                  f"kv_cache={self.mode} keeps K/V in the model's dtype")
        if prefill_tokens:
            self.fallbacks.append(f"prompt chunks ride in the decode step only with the static "
                                  f"KV cache; kv_cache={self.mode} prefills in its own forward")


class DynamicSlots(_EagerSlots):
    """Per-slot growing K/V; a step computes only the running rows."""

    mode = "dynamic"

    def __init__(self, model, **settings) -> None:
        super().__init__(model, **settings)
        self.cache = SlotDynamicCache(model.cfg.n_layers, self.n_slots, self.max_len)

    def prefill(self, chunks: list[PrefillChunk]) -> dict[Request, torch.Tensor]:
        """A slot's first chunk drops whatever an earlier request left there."""
        for chunk in chunks:
            if chunk.start == 0:
                self.cache.free(chunk.request.slot)
        tokens, positions = _left_padded([c.tokens for c in chunks], [c.start for c in chunks],
                                         self.max_len - 1)
        view = self.cache.batch([c.request.slot for c in chunks],
                                [c.stop - c.start for c in chunks])
        logits = self.model(to_device(tokens, torch.long, self.device),
                            to_device(positions, torch.long, self.device), view, last_only=True)
        return _completed(chunks, logits[:, -1])

    def decode(self, requests: list[Request], n_rows: int,
               last_token: torch.Tensor) -> torch.Tensor:
        slots = [r.slot for r in requests]
        tokens = last_token[to_device(slots, torch.long, self.device), None]
        positions = to_device([[r.position] for r in requests], torch.long, self.device)
        view = self.cache.batch(slots, [1] * len(slots))
        return self.model(tokens, positions, view, last_only=True)[:, -1]

    def work(self, requests: list[Request], n_rows: int) -> tuple[int, int]:
        return len(requests), len(requests)

    def free(self, slot: int) -> None:
        self.cache.free(slot)


class Recompute(_EagerSlots):
    """No K/V: each slot keeps its token ids and every step runs the whole prefix again."""

    mode = "none"

    def __init__(self, model, **settings) -> None:
        super().__init__(model, **settings)
        self.cache = NoKVCache(self.n_slots, self.max_len, self.device)

    def prefill(self, chunks: list[PrefillChunk]) -> dict[Request, torch.Tensor]:
        """Store the chunks' tokens; only a completed prompt needs a forward (over all of it,
        since nothing of the earlier chunks was kept)."""
        for c in chunks:
            ids = to_device(c.tokens, torch.long, self.device)
            self.cache.tokens[c.request.slot, c.start:c.stop] = ids
        done = [c.request for c in chunks if c.completes_prompt]
        if not done:
            return {}
        return dict(zip(done, self._recompute(done, [len(r.prompt_ids) for r in done]),
                        strict=True))

    def decode(self, requests: list[Request], n_rows: int,
               last_token: torch.Tensor) -> torch.Tensor:
        return self._recompute(requests, [r.position + 1 for r in requests])

    def _recompute(self, requests: list[Request], lengths: list[int]) -> torch.Tensor:
        """Last-token logits of each request's first `length` tokens, in one left-padded batch."""
        width, scratch = max(lengths), self.max_len - 1
        columns = [[0] * (width - n) + list(range(n)) for n in lengths]
        positions = [[scratch] * (width - n) + list(range(n)) for n in lengths]
        slots = to_device([[r.slot] for r in requests], torch.long, self.device)
        tokens = self.cache.tokens[slots, to_device(columns, torch.long, self.device)]
        return self.model(tokens, to_device(positions, torch.long, self.device), None,
                          last_only=True)[:, -1]

    def work(self, requests: list[Request], n_rows: int) -> tuple[int, int]:
        return len(requests), sum(r.position + 1 for r in requests)

    def record(self, requests: list[Request], tokens: torch.Tensor) -> None:
        """Write each sampled token at its position, where the next step's prefix reads it."""
        slots = to_device([r.slot for r in requests], torch.long, self.device)
        positions = to_device([r.position + 1 for r in requests], torch.long, self.device)
        self.cache.tokens[slots, positions] = tokens


def _packed(slots: list[int]) -> bool:
    """Whether the requests hold slots 0 to n-1 in order: their rows are then a prefix of the
    cache's or of a step's, a view rather than a gather."""
    return slots == list(range(len(slots)))


KV_MODES = {"static": StaticSlots, "dynamic": DynamicSlots, "none": Recompute}
