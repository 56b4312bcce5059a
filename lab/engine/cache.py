"""Key/value caches: what makes one decode step cost one token instead of the whole prefix.

`DynamicKVCache` grows by concatenation every step, as Hugging Face's default cache does: each
step allocates and copies, and shapes change, so the step cannot be captured as a graph.
`StaticKVCache` preallocates `n_slots` rows of `max_len` positions; a step writes in place at
each row's own position, so shapes and addresses never change and the step can be replayed
as a CUDA graph. Its rows are the slots a scheduler hands to requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from lab.engine.llm import LMConfig

CACHE_MODES = ("none", "dynamic", "static")


class StaticKVCache(nn.Module):
    """K and V as [n_layers, n_slots, n_kv_heads, max_len, head_dim] buffers, written in place."""

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

    @property
    def bytes_per_slot(self) -> int:
        return 2 * self.k[:, 0].numel() * self.k.element_size()

    @property
    def nbytes(self) -> int:
        return self.bytes_per_slot * self.n_slots

    def reset(self, slot: int | None = None) -> None:
        """Zero one slot (or all). Not needed for correctness - the mask never reads past a
        request's position - but it keeps a freed slot from showing an old request's state."""
        if slot is None:
            self.k.zero_()
            self.v.zero_()
            return
        if not 0 <= slot < self.n_slots:
            raise ValueError(f"slot {slot} is out of range for a cache of {self.n_slots} slots")
        self.k[:, slot].zero_()
        self.v[:, slot].zero_()

    def check_batch(self, batch: int, rows: torch.Tensor | None) -> None:
        if rows is None and batch > self.n_slots:
            raise ValueError(f"batch of {batch} rows does not fit a cache of {self.n_slots} slots")

    def kv_len(self, new_tokens: int) -> int:
        return self.max_len

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's K and V buffers [n_slots, n_kv_heads, max_len, head_dim] (views)."""
        return self.k[layer], self.v[layer]


def write_static(kc, vc, k, v, positions, slot_index, contiguous: bool):
    """Write a step's K/V [B, kv, T, hd] into slot rows at each row's positions, in place, and
    return those rows' whole K/V: a view of rows [0, B) when `contiguous`, else a gather."""
    # Advanced indices on dims 0 and 2 put the [B, T] index dims first: [B, T, kv, hd].
    kc[slot_index.unsqueeze(1), :, positions] = k.transpose(1, 2)
    vc[slot_index.unsqueeze(1), :, positions] = v.transpose(1, 2)
    if contiguous:
        b = k.shape[0]
        return kc[:b], vc[:b]
    return kc[slot_index], vc[slot_index]


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

    def kv_len(self, new_tokens: int) -> int:
        return self.seq_len + new_tokens

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


def make_cache(
    mode: str,
    cfg: LMConfig,
    n_slots: int,
    max_len: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> StaticKVCache | DynamicKVCache | None:
    """The cache for one of the ladder's modes: 'none', 'dynamic' or 'static'."""
    if mode == "none":
        return None
    if mode == "dynamic":
        return DynamicKVCache(cfg.n_layers)
    if mode == "static":
        if max_len > cfg.max_seq_len:
            raise ValueError(
                f"max_len={max_len} is longer than the model's rotary table ({cfg.max_seq_len})"
            )
        return StaticKVCache(
            cfg.n_layers, n_slots, max_len, cfg.n_kv_heads, cfg.head_dim, dtype, device
        )
    raise ValueError(f"cache mode {mode!r} is not valid; choose one of {list(CACHE_MODES)}")
