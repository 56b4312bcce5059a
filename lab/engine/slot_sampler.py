"""Sample each request's next token and record it in its slot, eagerly or as a CUDA graph.

Sampling is about forty small kernels a step (gather, penalty, top-k, softmax, cumulative sums,
search, the slot updates). Launched one by one from Python they cost the serving thread more
than the captured decode step does: with 72 Orpheus streams on an H100 the worker spent about
40% of its time launching them while the GPU waited. Captured once per batch bucket (and
candidate width), a step's sampling is three copies into fixed buffers (its rows' settings from
pinned memory, its logits, its shortlist) and one replay.

A captured batch is padded up to its bucket. Padding rows sample greedily from whatever their
logits row holds and write their token to the scratch slot, row `n_slots` of `seen` and
`last_token`, which no request owns. Every kernel works row by row, so a row's token does not
depend on the bucket or on its neighbours: replay gives the tokens eager sampling gives.

A shortlist named by rows of a table (`Candidates.rows`) reaches the step as one more column of
the rows' settings, and the step gathers the rows itself.

Captured sampling needs every row to take the fixed-size top-k (`TOPK_CAP`); a batch with a row
whose top-k is off or larger samples eagerly, and so does a batch past the largest bucket.
The repetition penalty always runs in the graph: a penalty of 1 divides or multiplies by one,
which leaves every logit exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lab.engine.request import UNIFORM_BLOCK, Request
from lab.engine.sampler import Candidates, SamplingBatch, fixed_topk, sample
from lab.engine.slots import smallest_bucket
from lab.engine.transfer import copy_from_host, to_device
from lab.stages import stage

PADDING = [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
"""Settings of a padding row: greedy, top-k 1 (so the fixed-size top-k holds), no penalty, and
a table's first row for a shortlist."""
UNIFORM, TABLE_ROW = 5, 6
"""The columns of `_Buffers.rows` that hold a row's next uniform and its shortlist's row of
its table."""


class SlotRows:
    """The host's copy of each slot's row of settings and block of uniforms, taken from the
    request when it takes the slot.

    A row's settings hold for its request's life and its uniforms come a block at a time, so a
    step gathers its rows and their next draws with numpy indexing instead of building and
    converting a tuple per row, a large part of the sampler's 434 us a step at 150 Orpheus
    streams on an H200. A request keeps one slot for its life, so its stream continues where
    the slot's cursor stands.
    """

    def __init__(self, n_slots: int, padding_row: tuple) -> None:
        self.padding = np.asarray(padding_row, dtype=np.float64)
        self.table = np.tile(self.padding, (n_slots + 1, 1))
        self.uniforms = np.zeros((n_slots + 1, UNIFORM_BLOCK))
        self.drawn = np.zeros(n_slots + 1, dtype=np.int64)
        self.owners: list[Request | None] = [None] * (n_slots + 1)

    def rows(self, requests: list[Request], table_rows: list[int] | None,
             bucket: int) -> np.ndarray:
        """[bucket, 7]: the requests' rows, each with its next uniform, then padding."""
        for r in requests:
            if self.owners[r.slot] is not r:
                self._take(r)
        n = len(requests)
        slots = np.fromiter((r.slot for r in requests), np.int64, n)
        for slot in slots[self.drawn[slots] == UNIFORM_BLOCK]:
            self.uniforms[slot], self.drawn[slot] = self.owners[slot].uniform_block(), 0
        out = np.empty((bucket, self.padding.shape[0]), dtype=np.float64)
        out[:n] = self.table[slots]
        out[:n, UNIFORM] = self.uniforms[slots, self.drawn[slots]]
        self.drawn[slots] += 1
        if table_rows is not None:
            out[:n, TABLE_ROW] = table_rows
        out[n:] = self.padding
        return out

    def free(self, slot: int) -> None:
        """The slot's request has finished: let go of it (the next tenant takes the slot)."""
        self.owners[slot] = None

    def _take(self, request: Request) -> None:
        """A request's first sampling in its slot: its settings and first block of draws."""
        slot = request.slot
        self.table[slot, :UNIFORM] = (slot, *request.settings)
        self.uniforms[slot], self.drawn[slot] = request.uniform_block(), 0
        self.owners[slot] = request


@dataclass
class _Buffers:
    """What a captured step reads and writes, sized for the largest bucket. Column 0 of `rows`
    is the slot, then `SamplingBatch.from_rows`' columns, then the row of a shortlist's table. A
    shortlist given per row is copied into `ids` and `allowed`; one named by rows of a table
    (`Candidates.rows`) is read from `table`, which stays where it is."""

    rows: torch.Tensor            # [B, 7] float64
    logits: torch.Tensor          # [B, V]
    ids: torch.Tensor | None      # [B, K] int64, a shortlist's token ids
    allowed: torch.Tensor | None  # [B, K] bool
    tokens: torch.Tensor          # [B] int64
    table: Candidates | None = None


class SlotSampler:
    """`sampler(requests, logits, shortlist)` -> each request's next token [n] on the device;
    `first_id` is the token of logits column 0 (see `sample`).

    `seen` [n_slots + 1, V] and `last_token` [n_slots + 1] are the runner's per-slot state
    (the last row is scratch); each sampled token is marked seen and becomes its slot's next
    decode input. `static` runs through the fixed buffers a graph reads, captured on CUDA and
    uncaptured elsewhere (so the padding logic can be checked on any machine).
    """

    def __init__(self, seen: torch.Tensor, last_token: torch.Tensor, buckets: tuple[int, ...],
                 static: bool, first_id: int = 0) -> None:
        self.seen, self.last_token, self.first_id = seen, last_token, first_id
        self.scratch = seen.shape[0] - 1
        self._padding_row = (self.scratch, *PADDING)
        self._rows = SlotRows(self.scratch, self._padding_row)
        self.buckets, self.static = buckets, static
        self.device = seen.device
        self.fallbacks: list[str] = []
        self._true = torch.ones((), dtype=torch.bool, device=self.device)
        self._buffers: dict[tuple, _Buffers] = {}
        self._graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self._failed: set[tuple] = set()
        self._pool = None

    def free(self, slot: int) -> None:
        """Forget the slot's finished request (`SlotRows.free`)."""
        self._rows.free(slot)

    @property
    def captures(self) -> bool:
        return self.static and self.device.type == "cuda"

    @property
    def captured(self) -> list[tuple]:
        """(batch bucket, logits width, shortlist width or 0, logits dtype, the address of a
        shortlist's table or 0) of every graph so far."""
        return sorted(self._graphs)

    @torch.inference_mode()
    def capture_every_bucket(self) -> None:
        """Capture every batch bucket for each logits shape sampled so far (a warm-up run
        shows the shapes), so no request pays for a capture when the batch first grows past a
        bucket; a failure lands in `fallbacks` as it would at first use. Runs in inference
        mode, as the runner's sampling does: the buffers were made there, and writing them
        outside it fails."""
        if not self._buffers:
            return
        with stage(f"capturing the sampler: {len(self._buffers)} logits shape(s) x "
                   f"{len(self.buckets)} batch sizes"):
            for key, buffers in list(self._buffers.items()):
                for bucket in self.buckets:
                    self._graph(key, bucket, buffers)

    def __call__(self, requests: list[Request], logits: torch.Tensor,
                 shortlist: Candidates | None = None) -> torch.Tensor:
        fits = len(requests) <= self.buckets[-1]
        if self.static and fits and all(fixed_topk(r) for r in requests):
            return self._padded(requests, logits, shortlist)
        return self._eager(requests, logits, shortlist)

    def _eager(self, requests: list[Request], logits: torch.Tensor,
               shortlist: Candidates | None) -> torch.Tensor:
        shortlist = None if shortlist is None else shortlist.gathered()
        rows = to_device(self._rows.rows(requests, None, len(requests)), torch.float64,
                         self.device)
        slots = rows[:, 0].long()
        seen = None
        if any(r.sampling.repetition_penalty != 1.0 for r in requests):
            seen = self._seen(slots, shortlist)
        batch = SamplingBatch.from_rows(rows[:, 1:UNIFORM + 1], [fixed_topk(r) for r in requests])
        tokens = sample(logits, batch, seen, shortlist, self.first_id)
        self._record(slots, tokens)
        return tokens

    def _seen(self, slots: torch.Tensor, shortlist: Candidates | None) -> torch.Tensor:
        if shortlist is None:
            return self.seen[slots]
        return self.seen[slots[:, None], shortlist.ids]

    def _record(self, slots: torch.Tensor, tokens: torch.Tensor) -> None:
        self.seen[slots, tokens] = self._true
        self.last_token[slots] = tokens

    def _padded(self, requests: list[Request], logits: torch.Tensor,
                shortlist: Candidates | None) -> torch.Tensor:
        """Fill the bucket's buffers, then replay its graph (capturing it on first use)."""
        n = len(requests)
        bucket = smallest_bucket(self.buckets, n, "batch")
        table = shortlist if shortlist is not None and shortlist.rows is not None else None
        key = (logits.shape[-1], 0 if shortlist is None else shortlist.ids.shape[-1],
               logits.dtype, 0 if table is None else table.ids.data_ptr())
        buffers = self._buffers.get(key) or self._allocate(key, table)
        graph = self._graph(key, bucket, buffers)
        rows = self._rows.rows(requests, None if table is None else table.rows, bucket)
        copy_from_host(buffers.rows[:bucket], rows, torch.float64)
        buffers.logits[:n].copy_(logits)
        if shortlist is not None and table is None:
            buffers.ids[:n].copy_(shortlist.ids)
            if shortlist.allowed is None:
                buffers.allowed[:n].fill_(True)
            else:
                buffers.allowed[:n].copy_(shortlist.allowed)
        if graph is None:
            self._step(buffers, bucket)
        else:
            graph.replay()
        return buffers.tokens[:n]

    def _allocate(self, key: tuple, table: Candidates | None) -> _Buffers:
        """Buffers whose padding rows hold finite logits (zeros) and a shortlist of the first
        token the logits cover (or a table's first row), so even a narrowed head's padding
        rows gather in bounds."""
        b, (vocab, width, dtype, _), dev = self.buckets[-1], key, self.device
        rows = torch.tensor([self._padding_row] * b, dtype=torch.float64, device=dev)
        own = width and table is None
        ids = torch.full((b, width), self.first_id, dtype=torch.long, device=dev) if own else None
        allowed = torch.ones(b, width, dtype=torch.bool, device=dev) if own else None
        self._buffers[key] = _Buffers(
            rows, torch.zeros(b, vocab, dtype=dtype, device=dev), ids, allowed,
            torch.zeros(b, dtype=torch.long, device=dev),
            None if table is None else Candidates(table.ids, table.allowed))
        return self._buffers[key]

    def _step(self, buffers: _Buffers, bucket: int) -> None:
        """What a graph captures: sample rows [0, bucket) and record them in their slots."""
        rows = buffers.rows[:bucket]
        slots = rows[:, 0].long()
        shortlist = self._shortlist(buffers, bucket)
        tokens = sample(buffers.logits[:bucket], SamplingBatch.from_rows(rows[:, 1:UNIFORM + 1],
                                                                         [True] * bucket),
                        self._seen(slots, shortlist), shortlist, self.first_id)
        self._record(slots, tokens)
        buffers.tokens[:bucket].copy_(tokens)

    @staticmethod
    def _shortlist(buffers: _Buffers, bucket: int) -> Candidates | None:
        """The step's shortlist: looked up in a table by each row's table row, or as copied."""
        if buffers.table is not None:
            return buffers.table.take(buffers.rows[:bucket, TABLE_ROW].long())
        if buffers.ids is None:
            return None
        return Candidates(buffers.ids[:bucket], buffers.allowed[:bucket])

    def _graph(self, key: tuple, bucket: int,
               buffers: _Buffers) -> torch.cuda.CUDAGraph | None:
        """The bucket's graph, captured now if new; None where nothing captures. A capture
        failure is noted and that shape samples uncaptured from then on."""
        if not self.captures or (bucket, *key) in self._failed:
            return None
        graph = self._graphs.get((bucket, *key))
        if graph is None:
            try:
                graph = self._capture(buffers, bucket)
            except Exception as err:  # any capture failure: say why, then run uncaptured
                self._failed.add((bucket, *key))
                self.fallbacks.append(f"sampling graph at batch {bucket} failed: "
                                      f"{type(err).__name__}: {err}; sampling uncaptured")
                return None
            self._graphs[(bucket, *key)] = graph
        return graph

    def _capture(self, buffers: _Buffers, bucket: int) -> torch.cuda.CUDAGraph:
        """Warm up and capture on a side stream while the buffers still hold padding rows, so
        the runs that execute touch only the scratch slot."""
        buffers.rows[:bucket] = torch.tensor(self._padding_row, dtype=torch.float64,
                                             device=self.device)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._step(buffers, bucket)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            self._step(buffers, bucket)
        return graph
