"""The decode step (B rows, one token each, static cache) run eagerly, as a CUDA graph, or compiled.

At batch 1 a 3B model's decode step is a few hundred small kernels; launched one by one from
Python the GPU waits on the CPU between them. Capturing the step once per batch-size bucket and
replaying it removes that gap. A batch is padded up to its bucket; padded rows write at the last
cache position of their slot, which no live request reads before overwriting it itself.

A captured step also has a fixed key length, and reading every slot's whole cache costs as much
as the weights once many streams run (128 slots of 512 positions: ~7 GB a step for a 3B
model). So the step is captured once per (batch bucket, key bucket): a key bucket is a prefix
of the cache (64, 128, 256 ... and always `max_len`), and each step replays the smallest one
that holds its longest row. Attention and any gather then touch only that prefix. This is
per-batch, not per-slot, sparsity: every row reads as many keys as the batch's longest row
rounded up to a bucket (the mask still stops each row at its own position, so a short row
reads padding it ignores), and the rounding reads up to twice what that row needs. On an H100
(3B bf16, 128 slots of 2048 positions) a graphed step at 128 rows took 5.7 ms with the rows
near position 100 against 15.7 over the whole cache, and 12.0 ms against 17.7 on average over
1200-token generations through the engine; the capture is ~4 s for 18 graphs.

The torch.compile modes compile one transformer block and the head (regional compilation:
the identical blocks share one compiled version), and the whole step is then captured as one
CUDA graph here, so 'reduce-overhead' and 'max-autotune' run without inductor's own graphs.
At one row per step inductor folds the norms into the matmuls and turns them into fused
reductions (with coordinate-descent tuning, which one-row steps ask for: `decode_options`):
about half the kernels of the eager step (on an H100, 3B bf16: 2.98 ms/step
against 4.03 for the captured eager step). Each batch bucket is compiled once, which costs
tens of seconds for a 3B model, so give compiled decoders few buckets; the key length is left
symbolic, so prefixes shorter than the cache share one compiled block (the whole cache is a
second), while each (batch, key) pair is still captured as its own graph.

Whatever cannot run here (no CUDA, a compiler or capture error) falls back to eager, and the
reason is appended to `.fallbacks`: a slow path is never taken silently.
"""

from __future__ import annotations

import torch

from lab.engine.cache import StaticKVCache
from lab.engine.llm import call_block, call_head, call_mixed_block
from lab.engine.slots import bucket_sizes, smallest_bucket
from lab.quant.compile import COMPILED_MODES, decode_options
from lab.stages import counted, stage

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
KEY_BASE = 64
MODES = ("eager", "cuda-graph", *COMPILED_MODES)
Shape = tuple[int, int, int]  # (batch bucket, key bucket, prompt tokens) of one captured step


def default_key_buckets(max_len: int, base: int = KEY_BASE) -> tuple[int, ...]:
    """`base`, twice that, and so on below `max_len`, then `max_len`: a step reads at most
    twice the keys its longest row needs (or `base`), at six lengths for 2048 positions."""
    sizes = []
    while base < max_len:
        sizes.append(base)
        base *= 2
    return (*sizes, max_len)


class GraphedDecoder:
    """Callable as `decoder(tokens[B, 1], positions[B, 1], n_keys) -> logits[B, 1, V]`.

    `n_keys` is one past the highest position among the B rows, which the caller knows on the
    host (reading it off `positions` would wait for the device); None reads the whole cache. A
    smaller `n_keys` than that would hide a row's newest keys from it: the decoder cannot check.
    `key_buckets` are the prefix lengths captured (None: `default_key_buckets`; an empty tuple
    reads the whole cache every step, as before key buckets).

    `prefill_tokens` > 0 also prepares, for every (batch, key) pair, a step that carries one
    prompt chunk of that many tokens (`with_prefill`), so an arriving prompt rides along
    with the decode step instead of stalling it with a forward of its own.

    The returned logits live in a static buffer that the next call overwrites: consume them
    (sample, copy) before calling again.
    """

    def __init__(
        self, model, cache: StaticKVCache, mode: str = "cuda-graph", buckets=BUCKETS,
        key_buckets=None, prefill_tokens: int = 0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"decode mode {mode!r} is not valid; choose one of {list(MODES)}")
        if not isinstance(cache, StaticKVCache):
            raise ValueError("GraphedDecoder needs a StaticKVCache (fixed shapes and addresses)")
        self.model, self.cache = model, cache
        self.requested_mode = mode
        self.fallbacks: list[str] = []
        self.buckets = bucket_sizes(buckets, cache.n_slots)
        keys = default_key_buckets(cache.max_len) if key_buckets is None else key_buckets
        self.key_buckets = bucket_sizes(keys, cache.max_len)
        if not 0 <= prefill_tokens < cache.max_len:
            raise ValueError(f"prefill_tokens={prefill_tokens} must lie in [0, {cache.max_len})")
        self.prefill_tokens = prefill_tokens
        self.device = cache.k.device
        self.mode = mode
        self._step = self._decode_fn()
        n, dev = self.buckets[-1], self.device
        self._tokens = torch.zeros(n, 1, dtype=torch.long, device=dev)
        self._positions = torch.full((n, 1), cache.max_len - 1, dtype=torch.long, device=dev)
        t = max(prefill_tokens, 1)
        self._pre_tokens = torch.zeros(1, t, dtype=torch.long, device=dev)
        self._pre_positions = torch.full((1, t), cache.max_len - 1, dtype=torch.long, device=dev)
        self._pre_rows = torch.zeros(1, dtype=torch.long, device=dev)
        self._logits: torch.Tensor | None = None  # every graph's output, rows [0, bucket]
        self._graphs: dict[Shape, torch.cuda.CUDAGraph] = {}
        self._ready: set[Shape] = set()
        self._pool = None
        if self.device.type != "cuda" and mode != "eager":
            if mode == "cuda-graph":
                self._fall_back(f"CUDA graphs need a CUDA device; the cache is on {dev.type}")
            else:
                self.fallbacks.append(f"{mode}: no CUDA device, compiled code runs uncaptured")
        elif self.captures:
            self._pool = torch.cuda.graph_pool_handle()

    @property
    def captures(self) -> bool:
        """True where steps replay as CUDA graphs (a capture that fails turns this off)."""
        return self.mode != "eager" and self.device.type == "cuda"

    @property
    def prepared(self) -> list[Shape]:
        """The (batch bucket, key bucket, prompt tokens) steps captured or compiled so far,
        ascending (prompt tokens 0: a decode-only step)."""
        return sorted(self._ready)

    def _fall_back(self, reason: str) -> None:
        self.fallbacks.append(f"{reason}; decoding eagerly")
        self.mode = "eager"
        self._step = self._decode_fn()

    def _decode_fn(self):
        model = self.model
        if self.mode not in COMPILED_MODES:
            return lambda tokens, positions, view, pre=(): (
                model.forward_mixed(tokens, positions, view, *pre) if pre
                else model(tokens, positions, view))
        _allow_recompiles(8 * len(self.buckets) * len(self.key_buckets) + 16)
        # One-row steps and the others are compiled apart: only the first gain from the
        # tuning `decode_options` adds for them, and it costs compile time (see there).
        options = {rows: dict(options=decode_options(self.mode, rows), fullgraph=True,
                              dynamic=False) for rows in (1, 2)}
        block = {rows: _any_key_length(torch.compile(call_block, **o), (4,))
                 for rows, o in options.items()}
        head = {rows: torch.compile(call_head, **o) for rows, o in options.items()}
        mixed = (_any_key_length(torch.compile(call_mixed_block, **options[2]), (4, 6))
                 if self.prefill_tokens else None)  # compiled only where a chunk can ride

        def step(tokens, positions, view, pre=()):
            if pre:
                return model.forward_mixed(tokens, positions, view, *pre, block_fn=mixed,
                                           head_fn=head[2])
            rows = min(len(tokens), 2)
            return model(tokens, positions, view, block_fn=block[rows], head_fn=head[rows])

        return step

    def bucket_for(self, batch: int) -> int:
        return smallest_bucket(self.buckets, batch, "batch")

    def key_bucket_for(self, n_keys: int) -> int:
        """The shortest captured prefix holding `n_keys` positions (`max_len` at most)."""
        if n_keys < 1:
            raise ValueError(f"n_keys={n_keys} must be >= 1")
        return smallest_bucket(self.key_buckets, n_keys, "key length")

    @torch.inference_mode()
    def capture(self, batch_sizes=None, key_lengths=None) -> None:
        """Compile/capture the given buckets now (all by default, with and without a prompt
        chunk), so first calls are fast. Each batch size is said with its seconds as it is
        done (`lab.stages`): for a 3B model this takes minutes."""
        if self.mode == "eager":
            return
        prompts = sorted({0, self.prefill_tokens})
        batches, keys = batch_sizes or self.buckets, key_lengths or self.key_buckets
        what = "capturing" if self.captures else "compiling"
        with stage(f"{what} the decode step ({self.mode}): "
                   f"{len(batches) * len(keys) * len(prompts)} shapes"):
            for b in counted(batches, lambda b: f"batch size {b}"):
                for n in keys:
                    for pre in prompts:
                        self._prepare((self.bucket_for(b), self.key_bucket_for(n), pre))

    def _prepare(self, shape: Shape) -> None:
        if shape in self._ready or self.mode == "eager":
            return
        try:
            if self.captures:
                self._graphs[shape] = self._capture(*shape)
            else:
                self._run_padded(*shape)
        except Exception as err:  # any compiler or capture failure: say why, then run eagerly
            self._fall_back(f"{self.mode} failed at batch {shape[0]}, {shape[1]} keys, "
                            f"{shape[2]} prompt tokens: {type(err).__name__}: {err}")
            self._graphs.clear()
            return
        self._ready.add(shape)

    def _capture(self, bucket: int, length: int, pre: int) -> torch.cuda.CUDAGraph:
        """One graph for `bucket` rows (and a `pre`-token prompt chunk) over the first
        `length` positions. It copies its logits into the one shared buffer, so its own output
        returns to the pool for the next graph instead of every shape keeping a [bucket, V]
        tensor alive."""
        # Replays overwrite these rows' last cache position only (see the module docstring).
        for buffer, value in ((self._tokens, 0), (self._positions, self.cache.max_len - 1),
                              (self._pre_tokens, 0), (self._pre_rows, 0),
                              (self._pre_positions, self.cache.max_len - 1)):
            buffer.fill_(value)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                out = self._run_padded(bucket, length, pre)
        torch.cuda.current_stream().wait_stream(side)
        if self._logits is None:
            rows = (self.buckets[-1] + 1, *out.shape[1:])
            self._logits = torch.empty(rows, dtype=out.dtype, device=self.device)
        rows = out.shape[0]
        del out
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._logits[:rows].copy_(self._run_padded(bucket, length, pre))
        return graph

    def _run_padded(self, bucket: int, length: int, pre: int) -> torch.Tensor:
        """The step a graph captures: padded rows at the scratch position `max_len - 1`,
        keys read up to `length`, and with `pre` the prompt chunk's row after the decode rows.

        The scratch position lies past every shorter prefix, so the padded rows' writes are
        never read as keys; and it is never a request's position, since the scheduler admits
        only requests that fit below it. A padded row could not write at `length - 1` instead:
        rows [0, bucket) include slots outside this batch (a prompt being prefilled in
        chunks), whose history may already pass `length`. The padded rows' own queries see
        every key of the prefix, so their (discarded) softmax stays finite.
        """
        view = self.cache.prefix(length)
        prompt = (self._pre_tokens, self._pre_positions, self._pre_rows) if pre else ()
        return self._step(self._tokens[:bucket], self._positions[:bucket], view, prompt)

    @torch.inference_mode()
    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor,
                 n_keys: int | None = None) -> torch.Tensor:
        _check_decode(tokens, positions)
        return self._run(tokens, positions, n_keys, None)[0][:tokens.shape[0]]

    @torch.inference_mode()
    def with_prefill(self, tokens: torch.Tensor, positions: torch.Tensor, n_keys: int,
                     pre_tokens: torch.Tensor, pre_positions: torch.Tensor,
                     pre_row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The decode step of `__call__` carrying one prompt chunk for cache row `pre_row` [1]:
        `pre_tokens`, `pre_positions` [1, prefill_tokens], left-padded at the scratch position.
        `n_keys` must hold the chunk's positions too. Returns (decode logits [B, 1, V], the
        chunk's last-token logits [1, 1, V])."""
        _check_decode(tokens, positions)
        if self.prefill_tokens < 1:
            raise ValueError("this decoder carries no prompt chunks (prefill_tokens=0)")
        want = (1, self.prefill_tokens)
        if pre_tokens.shape != want or pre_positions.shape != want or pre_row.shape != (1,):
            raise ValueError(f"a prompt chunk is tokens and positions {want} and a row [1]; got "
                             f"{tuple(pre_tokens.shape)}, {tuple(pre_positions.shape)}, "
                             f"{tuple(pre_row.shape)}")
        logits, row = self._run(tokens, positions, n_keys, (pre_tokens, pre_positions, pre_row))
        return logits[:tokens.shape[0]], logits[row:row + 1]

    def _run(self, tokens, positions, n_keys, prompt) -> tuple[torch.Tensor, int]:
        """The step's logits, the B decode rows first (then padding), and the row of the prompt
        chunk's logits when one rides along; views, so no step copies its logits again."""
        b = tokens.shape[0]
        n_keys = self.cache.max_len if n_keys is None else n_keys
        shape = (self.bucket_for(b), self.key_bucket_for(n_keys),
                 self.prefill_tokens if prompt else 0)
        self._prepare(shape)
        if self.mode == "eager":  # no fixed shapes: only the real rows, over their own keys
            return self._step(tokens, positions, self.cache.prefix(n_keys), prompt or ()), b
        bucket = shape[0]
        self._tokens[:b].copy_(tokens)
        self._positions[:b].copy_(positions)
        if b < bucket:
            self._tokens[b:bucket].zero_()
            self._positions[b:bucket].fill_(self.cache.max_len - 1)
        for buffer, value in zip((self._pre_tokens, self._pre_positions, self._pre_rows),
                                 prompt or (), strict=False):
            buffer.copy_(value)
        graph = self._graphs.get(shape)
        if graph is not None:
            graph.replay()
            out = self._logits
        else:
            out = self._run_padded(*shape)
        return out, bucket


def _check_decode(tokens: torch.Tensor, positions: torch.Tensor) -> None:
    if tokens.dim() != 2 or tokens.shape[1] != 1 or tokens.shape != positions.shape:
        raise ValueError(
            f"decode takes tokens and positions of shape [B, 1]; got {tuple(tokens.shape)} "
            f"and {tuple(positions.shape)}"
        )


def _any_key_length(block_fn, masks: tuple[int, ...]):
    """A compiled block that leaves the key count of its masks (the arguments at `masks`)
    symbolic, so every prefix shorter than the cache shares one compiled version instead of
    costing a compile each."""

    def run(*args):
        for i in masks:
            torch._dynamo.maybe_mark_dynamic(args[i], args[i].dim() - 1)
        return block_fn(*args)

    return run


def _allow_recompiles(n: int) -> None:
    """Each bucket is one more compiled shape of the same block function; past dynamo's limit
    (8 by default) further buckets would silently run uncompiled. The limit counts every
    (batch, key) pair in case a key length is specialised after all."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), n))
