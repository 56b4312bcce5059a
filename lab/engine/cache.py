"""Key/value caches: what makes one decode step cost one token instead of the whole prefix.

`DynamicKVCache` grows by concatenation every step, as Hugging Face's default cache does: each
step allocates and copies, and shapes change, so the step cannot be captured as a graph.
`StaticKVCache` preallocates `n_slots` rows of `max_len` positions; a step writes in place at
each row's own position, so shapes and addresses never change and the step can be replayed
as a CUDA graph. Its rows are the slots a scheduler hands to requests.

The serving engine has a per-slot form of each mode: `StaticKVCache` itself, `SlotDynamicCache`
(each slot's K/V grow by concatenation, for requests of different lengths in one batch) and
`NoKVCache` (only each slot's token ids, so every step recomputes the whole prefix). Each says
what it holds with `describe()`, in words a user can compare across modes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from lab.engine.kv_dtype import SCALE_DTYPE, is_scaled, kv_bytes_per_slot, load, store


class StaticLayer(NamedTuple):
    """One layer of a static cache as a block sees it: the whole K/V buffers
    [n_slots, n_kv_heads, max_len, head_dim]. A step writes anywhere in them (padding goes to
    the scratch position `max_len - 1`) but reads back only as many leading positions as its
    mask has key columns (see `write_static`)."""

    k: torch.Tensor
    v: torch.Tensor
    k_scale: torch.Tensor | None = None  # [n_slots, n_kv_heads, max_len] when stored in fp8
    v_scale: torch.Tensor | None = None


class StaticKVCache(nn.Module):
    """K and V as [n_layers, n_slots, n_kv_heads, max_len, head_dim] buffers, written in place.

    `dtype` is what they are stored in: the model's dtype, or fp8, which adds a scale per head
    vector [n_layers, n_slots, n_kv_heads, max_len] (see `kv_dtype`); a step reads them back
    in its own compute dtype either way.
    """

    mode = "static"

    def __init__(
        self,
        n_layers: int,
        n_slots: int,
        max_len: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if min(n_layers, n_slots, max_len, n_kv_heads, head_dim) < 1:
            raise ValueError(
                "StaticKVCache sizes must be >= 1; got "
                f"n_layers={n_layers} n_slots={n_slots} max_len={max_len} "
                f"n_kv_heads={n_kv_heads} head_dim={head_dim}"
            )
        self.n_slots, self.max_len = n_slots, max_len
        shape = (n_layers, n_slots, n_kv_heads, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        scaled = is_scaled(dtype)
        for name in ("k_scale", "v_scale"):
            scale = torch.zeros(shape[:-1], dtype=SCALE_DTYPE, device=device) if scaled else None
            self.register_buffer(name, scale, persistent=False)

    @property
    def bytes_per_slot(self) -> int:
        n_layers, _, n_kv_heads, max_len, head_dim = self.k.shape
        return kv_bytes_per_slot(n_layers, n_kv_heads, head_dim, max_len, self.k.dtype)

    @property
    def nbytes(self) -> int:
        return self.bytes_per_slot * self.n_slots

    def describe(self) -> str:
        stored = " in fp8 with a scale per head vector" if self.k_scale is not None else ""
        return (f"static, {self.bytes_per_slot / 2**20:.2f} MiB per slot x {self.n_slots} slots "
                f"({self.max_len} positions){stored}")

    def reset(self, slot: int | None = None) -> None:
        """Zero one slot (or all). Not needed for correctness - the mask never reads past a
        request's position - but it keeps a freed slot from showing an old request's state."""
        if slot is not None and not 0 <= slot < self.n_slots:
            raise ValueError(f"slot {slot} is out of range for a cache of {self.n_slots} slots")
        rows = slice(None) if slot is None else slot
        for buffer in (self.k, self.v, self.k_scale, self.v_scale):
            if buffer is not None:
                buffer[:, rows].zero_()

    def check_batch(self, batch: int, rows: torch.Tensor | None) -> None:
        if rows is None and batch > self.n_slots:
            raise ValueError(f"batch of {batch} rows does not fit a cache of {self.n_slots} slots")

    def key_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Key j of every row is cache position j."""
        return torch.arange(self.max_len, device=positions.device)

    def layer_kv(self, layer: int) -> StaticLayer:
        """This layer's K and V buffers [n_slots, n_kv_heads, max_len, head_dim] (views)."""
        if self.k_scale is None:
            return StaticLayer(self.k[layer], self.v[layer])
        return StaticLayer(self.k[layer], self.v[layer], self.k_scale[layer], self.v_scale[layer])

    def read_slot(self, slot: int, length: int) -> StaticLayer:
        """Copies of one slot's first `length` positions in every layer (K, V and their fp8
        scales), [n_layers, n_kv_heads, length, ...]: what `write_slot` puts back in another
        slot, so a prompt prefix written once serves every request that starts with it."""
        if not 1 <= length < self.max_len:
            raise ValueError(f"prefix length {length} is outside [1, {self.max_len - 1}]")
        return StaticLayer(*(None if b is None else b[:, slot, :, :length].clone()
                             for b in (self.k, self.v, self.k_scale, self.v_scale)))

    def write_slot(self, slot: int, saved: StaticLayer) -> None:
        """Put `read_slot`'s copies at the start of `slot` (in place: graphs keep their
        addresses)."""
        length = saved.k.shape[-2]
        for buffer, part in zip((self.k, self.v, self.k_scale, self.v_scale), saved,
                                strict=True):
            if buffer is not None:
                buffer[:, slot, :, :length].copy_(part)

    def prefix(self, length: int) -> CachePrefix:
        """The first `length` positions of every slot, for a step that reads no further."""
        if not 1 <= length <= self.max_len:
            raise ValueError(f"prefix length {length} is outside [1, {self.max_len}]")
        return CachePrefix(self, length)


class CachePrefix:
    """A static cache seen up to `length` positions: a step whose requests all sit below
    `length` attends over (and gathers) only that much of each slot instead of all `max_len`
    positions, which is most of a decode step's memory traffic once many slots are running.
    Only the keys shrink: writes still reach the whole cache, so padding keeps its scratch
    position `max_len - 1`, which no prefix shorter than the cache reads."""

    def __init__(self, cache: StaticKVCache, length: int) -> None:
        self.cache, self.length = cache, length

    def check_batch(self, batch: int, rows: torch.Tensor | None) -> None:
        self.cache.check_batch(batch, rows)

    def key_positions(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.arange(self.length, device=positions.device)

    def layer_kv(self, layer: int) -> StaticLayer:
        return self.cache.layer_kv(layer)


def write_kv(layer: StaticLayer, k, v, positions, slot_index) -> None:
    """Write a step's K/V [B, kv, T, hd] into slot rows `slot_index` at `positions`, in place."""
    # Advanced indices on dims 0 and 2 put the [B, T] index dims first: [B, T, kv, hd].
    at = (slot_index.unsqueeze(1), slice(None), positions)
    store(layer.k, layer.k_scale, at, k.transpose(1, 2))
    store(layer.v, layer.v_scale, at, v.transpose(1, 2))


def write_static(layer: StaticLayer, k, v, positions, slot_index, contiguous: bool,
                 n_keys: int):
    """Write a step's K/V [B, kv, T, hd] into slot rows at each row's positions, in place, and
    return those rows' first `n_keys` positions (`read_static`)."""
    write_kv(layer, k, v, positions, slot_index)
    return read_static(layer, slot_index, contiguous, n_keys, k.dtype)


def read_static(layer: StaticLayer, slot_index, contiguous: bool, n_keys: int,
                dtype: torch.dtype):
    """Slot rows' first `n_keys` positions in `dtype`: a view of rows [0, B) when
    `contiguous`, else a gather of that prefix only (a dequantized copy either way for fp8).

    `n_keys` is the mask's key count (`bias.shape[-1]`), never a separate integer: under
    torch.compile it stays a symbolic size, so one compiled block serves every prefix length.
    """
    rows = slice(0, slot_index.shape[0]) if contiguous else slot_index
    return (load(layer.k, layer.k_scale, rows, n_keys, dtype),
            load(layer.v, layer.v_scale, rows, n_keys, dtype))


class DynamicKVCache:
    """A cache that grows by concatenation, one tensor pair per layer, like HF's DynamicCache.

    Rows are the batch rows; positions are assumed to start at 0 and advance by the number of
    tokens fed each call, so key index j is position j.
    """

    def __init__(self, n_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def seq_len(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)

    def check_batch(self, batch: int, rows: torch.Tensor | None) -> None:
        if rows is not None:
            raise ValueError("a DynamicKVCache's rows are its batch rows; pass rows=None")
        if self.keys[0] is not None and self.keys[0].shape[0] != batch:
            raise ValueError(
                f"this DynamicKVCache holds {self.keys[0].shape[0]} rows; got a batch of {batch}"
            )

    def key_positions(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.arange(self.seq_len + positions.shape[1], device=positions.device)

    def layer_kv(self, layer: int) -> _DynamicLayer:
        return _DynamicLayer(self, layer)


class _DynamicLayer:
    """One layer of a DynamicKVCache: appends this step's K/V and returns the whole history."""

    def __init__(self, cache: DynamicKVCache, layer: int) -> None:
        self.cache, self.layer = cache, layer

    def update(self, k: torch.Tensor, v: torch.Tensor):
        c, i = self.cache, self.layer
        if c.keys[i] is None:
            c.keys[i], c.values[i] = k, v
        else:
            c.keys[i] = torch.cat((c.keys[i], k), dim=2)
            c.values[i] = torch.cat((c.values[i], v), dim=2)
        return c.keys[i], c.values[i]


class SlotDynamicCache:
    """Per-slot K/V that grow by concatenation each step: the dynamic cache of a server.

    Slots hold histories of different lengths, so a batch view left-pads them to the longest
    (padded keys sit at a position no query reaches) and every step copies each row's whole
    history: the cost Hugging Face's growing cache pays, per request. Memory follows the
    tokens actually held, not `max_len`.
    """

    mode = "dynamic"

    def __init__(self, n_layers: int, n_slots: int, max_len: int) -> None:
        self.n_layers, self.n_slots, self.max_len = n_layers, n_slots, max_len
        self.kv: list[torch.Tensor | None] = [None] * n_slots  # [2, n_layers, kv, L, hd] a slot
        self.peak_nbytes = 0

    def length(self, slot: int) -> int:
        return 0 if self.kv[slot] is None else self.kv[slot].shape[3]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.kv if t is not None)

    def describe(self) -> str:
        """Now and at its largest: read after a request, 'now' is what is left (usually 0)."""
        return (f"dynamic, grows per step: {self.nbytes / 2**20:.2f} MiB in use now, "
                f"{self.peak_nbytes / 2**20:.2f} MiB at most so far")

    def free(self, slot: int) -> None:
        self.kv[slot] = None

    def batch(self, slots: list[int], n_new: list[int]) -> _SlotBatch:
        """The cache as one forward sees it: batch row b is `slots[b]`, and only the last
        `n_new[b]` tokens of that row (the rest are left padding) join its history."""
        return _SlotBatch(self, slots, n_new)


class _SlotBatch:
    """A SlotDynamicCache seen by one forward: every row's history, left-padded to the longest,
    gathered for all layers at the first layer; the new K/V join the slots after the last."""

    def __init__(self, cache: SlotDynamicCache, slots: list[int], n_new: list[int]) -> None:
        self.cache, self.slots, self.n_new = cache, slots, n_new
        self.lengths = [cache.length(s) for s in slots]
        self.width = max(self.lengths)
        self._past: torch.Tensor | None = None  # [2, n_layers, B, kv, width, hd]
        self._new: list[torch.Tensor] = []      # per layer [2, B, kv, T, hd]

    def check_batch(self, batch: int, rows: torch.Tensor | None) -> None:
        if rows is not None or batch != len(self.slots):
            raise ValueError(f"a slot batch of {len(self.slots)} rows takes exactly that many "
                             f"batch rows and rows=None; got {batch}")

    def key_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """[B, width + T]: padding at `max_len` (beyond every query), then 0..L-1, then the
        new tokens' own positions."""
        past = [[self.cache.max_len] * (self.width - n) + list(range(n)) for n in self.lengths]
        past = torch.tensor(past, dtype=positions.dtype).reshape(len(past), self.width)
        return torch.cat((past.to(positions.device), positions), dim=1)

    def layer_kv(self, layer: int) -> _SlotLayer:
        return _SlotLayer(self, layer)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        if self._past is None:
            self._past = self._gather(k)
        self._new.append(torch.stack((k, v)))
        keys = torch.cat((self._past[0, layer], k), dim=2)
        values = torch.cat((self._past[1, layer], v), dim=2)
        if layer == self.cache.n_layers - 1:
            self._commit()
        return keys, values

    def _gather(self, k: torch.Tensor) -> torch.Tensor:
        b, kv_heads, _, head_dim = k.shape
        past = k.new_zeros(2, self.cache.n_layers, b, kv_heads, self.width, head_dim)
        for row, slot in enumerate(self.slots):
            history = self.cache.kv[slot]
            if history is not None:
                past[:, :, row, :, self.width - history.shape[3]:] = history
        return past

    def _commit(self) -> None:
        new = torch.stack(self._new, dim=1)  # [2, n_layers, B, kv, T, hd]
        t = new.shape[4]
        for row, slot in enumerate(self.slots):
            fresh = new[:, :, row, :, t - self.n_new[row]:]
            old = self.cache.kv[slot]
            self.cache.kv[slot] = fresh.clone() if old is None else torch.cat((old, fresh), 3)
        self.cache.peak_nbytes = max(self.cache.peak_nbytes, self.cache.nbytes)


class _SlotLayer:
    """One layer's handle on a slot batch, in the shape the attention layer calls."""

    def __init__(self, view: _SlotBatch, layer: int) -> None:
        self.view, self.layer = view, layer

    def update(self, k: torch.Tensor, v: torch.Tensor):
        return self.view.update(self.layer, k, v)


class NoKVCache:
    """No K/V at all: only each slot's token ids [n_slots, max_len], so that every step can
    recompute the whole prefix of each request (the quadratic baseline)."""

    mode = "none"

    def __init__(self, n_slots: int, max_len: int, device: torch.device | str | None) -> None:
        self.n_slots, self.max_len = n_slots, max_len
        self.tokens = torch.zeros(n_slots, max_len, dtype=torch.long, device=device)

    @property
    def nbytes(self) -> int:
        return 0

    def describe(self) -> str:
        return "none: no KV cache; each step recomputes the prefix"
