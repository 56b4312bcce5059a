"""Decode attention that reads each slot's filled positions only, as one Triton kernel.

A captured decode step has fixed shapes, so with scaled dot-product attention every row reads
as many keys as the batch's longest row (rounded up to a key bucket), and its mask throws the
rest away. Under staggered arrivals some row is always near the end of its request, so 128
Orpheus streams read about 128 x 512 positions x 115 KB = 7.5 GB of K/V per step where their
filled positions hold about half that: as much traffic again as the weights.

Here each (row, KV head) stops at its own length, read from the row's position in a device
tensor, so the step stays capturable in a CUDA graph. The kernel derives the length from the
position itself: as a torch expression in the compiled block it was a kernel of its own in
every layer, 26 us of the Orpheus-3B shape's 2.4 ms batch-1 step in a kernel profile on an
H100. Work is split along the keys (flash-decoding) when there are too few rows to fill the
GPU: each split keeps a running max, sum and weighted values, and the splits are merged
afterwards. The query heads that share a KV head are computed together, so each K/V row is read
once per step. Scores and sums are fp32.

K/V stored in fp8 (`kv_dtype`) are read as fp8, half the bytes: a key's scale multiplies its
scores and a value's scale the softmax weights that take it, so no dequantized copy is made.

`decode_attention` is a custom op, so a compiled decode step calls the kernel instead of
tracing into it. `check_decode_attention` runs it against `reference` on a probe before an
engine relies on it.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from lab.engine.kv_dtype import SCALE_DTYPE, is_scaled, load, store
from lab.quant.triton_site import tl, triton

# Keys a block, and the programs a step aims for. A one-off H100 probe of the Orpheus-3B shape's
# attention alone (28 layers in one CUDA graph, 64-500 filled of 512) tried 16-128 keys and
# 132-1056 programs: at batch 1, splits of 16 keys were 0.24-0.35 us a layer faster (about 9 us a
# step); at batch 8 these settings were within 0.4 us of the best. Kept: one table for all rows.
BLOCK_N = 64
TARGET_PROGRAMS = 264  # two per streaming multiprocessor of an H100: enough to fill it

if triton is not None:

    @triton.jit
    def _split_attend(q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr,
                      out_ptr, sq_b, sq_h, sq_g, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, ss_b, ss_h,
                      scale, n_splits, n_keys,
                      G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                      BLOCK: tl.constexpr, BLOCKS: tl.constexpr, IEEE: tl.constexpr,
                      FINAL: tl.constexpr, SCALED: tl.constexpr):
        """One program per (row, KV head, split of `BLOCKS` blocks of keys): the split's softmax
        statistics and weighted values over its keys below the row's length: its position + 1,
        or 1 from `n_keys` on (`decode_attention`). A block past the length is skipped, so a
        short row reads only its own keys. With `FINAL` (one split) the program writes the
        attention output itself: nothing is left to merge. With `SCALED`, K and V are fp8 with
        one scale per position ([slots, KV heads, positions], strides `ss_b`, `ss_h`, 1)."""
        b, h, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        position = tl.load(pos_ptr + b).to(tl.int32)
        length = tl.where(position < n_keys, position + 1, 1)
        g, d = tl.arange(0, GP), tl.arange(0, D)
        q = tl.load(q_ptr + b * sq_b + h * sq_h + g[:, None] * sq_g + d[None, :],
                    mask=g[:, None] < G, other=0.0)
        m_i = tl.full([GP], float("-inf"), tl.float32)
        l_i = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        k_row = k_ptr + b.to(tl.int64) * sk_b + h * sk_h
        v_row = v_ptr + b.to(tl.int64) * sv_b + h * sv_h
        scales = b.to(tl.int64) * ss_b + h * ss_h
        start = s * BLOCKS * BLOCK
        stop = tl.minimum(start + BLOCKS * BLOCK, length)
        for i in range(BLOCKS):
            n0 = start + i * BLOCK
            if n0 < stop:
                n = n0 + tl.arange(0, BLOCK)
                inside = n < stop
                keys = tl.load(k_row + n[:, None] * sk_n + d[None, :], mask=inside[:, None],
                               other=0.0).to(q.dtype)
                if IEEE:
                    scores = tl.dot(q, tl.trans(keys), input_precision="ieee")
                else:
                    scores = tl.dot(q, tl.trans(keys))
                if SCALED:
                    scores = scores * tl.load(ks_ptr + scales + n, mask=inside, other=0.0)[None, :]
                scores = tl.where(inside[None, :], scores * scale, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(scores, 1))
                p = tl.exp(scores - m_new[:, None])
                alpha = tl.exp(m_i - m_new)
                values = tl.load(v_row + n[:, None] * sv_n + d[None, :], mask=inside[:, None],
                                 other=0.0).to(q.dtype)
                weights = p
                if SCALED:
                    weights = p * tl.load(vs_ptr + scales + n, mask=inside, other=0.0)[None, :]
                if IEEE:
                    weighted = tl.dot(weights.to(q.dtype), values, input_precision="ieee")
                else:
                    weighted = tl.dot(weights.to(q.dtype), values)
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + weighted
                m_i = m_new
        at = (b * tl.num_programs(1) + h) * n_splits + s
        if FINAL:
            out = out_ptr + ((b * tl.num_programs(1) + h) * G + g[:, None]) * D + d[None, :]
            tl.store(out, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
                     mask=g[:, None] < G)
        else:
            tl.store(m_ptr + at * GP + g, m_i, mask=g < G)
            tl.store(l_ptr + at * GP + g, l_i, mask=g < G)
            tl.store(acc_ptr + (at * GP + g[:, None]) * D + d[None, :], acc,
                     mask=g[:, None] < G)

    @triton.jit
    def _merge_splits(m_ptr, l_ptr, acc_ptr, out_ptr, n_splits,
                      G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, SP: tl.constexpr):
        """One program per (row, query head): the splits' partial results weighed by their
        share of the softmax, in one launch (as torch ops it was seven kernels a layer, which
        cost more than the attention itself at batch 1; one program per KV head, 7 us). A
        split with no keys (max -inf) weighs 0."""
        bh, gi = tl.program_id(0) // G, tl.program_id(0) % G
        sp, d = tl.arange(0, SP), tl.arange(0, D)
        live = sp < n_splits
        stats = (bh * n_splits + sp) * GP + gi
        m = tl.load(m_ptr + stats, mask=live, other=float("-inf"))
        weight = tl.where(live, tl.exp(m - tl.max(m, 0)), 0.0)
        total = tl.sum(tl.load(l_ptr + stats, mask=live, other=0.0) * weight, 0)
        acc = tl.load(acc_ptr + stats[:, None] * D + d[None, :], mask=live[:, None], other=0.0)
        out = tl.sum(acc * weight[:, None], 0) / total
        tl.store(out_ptr + (bh * G + gi) * D + d, out.to(out_ptr.dtype.element_ty))


def splits(batch: int, kv_heads: int, n_keys: int) -> tuple[int, int]:
    """(number of splits, keys per split) for a step: one split per (row, KV head) when
    they fill the GPU, else as many as bring the programs to `TARGET_PROGRAMS`."""
    blocks = -(-n_keys // BLOCK_N)
    wanted = max(1, -(-TARGET_PROGRAMS // (batch * kv_heads)))
    per_split = -(-blocks // min(blocks, wanted)) * BLOCK_N
    return -(-n_keys // per_split), per_split


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_scale: torch.Tensor | None,
            v_scale: torch.Tensor | None, positions: torch.Tensor, n_keys: int) -> torch.Tensor:
    batch, kv_heads, group, dim = q.shape
    n_splits, per_split = splits(batch, kv_heads, n_keys)
    padded = max(16, triton.next_power_of_2(group))  # tl.dot wants 16 rows at least
    final = n_splits == 1  # one split writes `out` itself: its scratch is a placeholder
    parts = (1,) if final else (batch, kv_heads, n_splits, padded)
    stats = torch.empty(2, *parts, dtype=torch.float32, device=q.device)
    acc = stats if final else torch.empty(*parts, dim, dtype=torch.float32, device=q.device)
    out = torch.empty_like(q)
    scaled = k_scale is not None
    ks, vs = (k_scale, v_scale) if scaled else (stats, stats)  # placeholders, never read
    _split_attend[(batch, kv_heads, n_splits)](
        q, k, v, ks, vs, positions.contiguous(), stats[0], stats[1], acc, out,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), ks.stride(0), ks.stride(1), dim ** -0.5, n_splits,
        n_keys,
        G=group, GP=padded, D=dim, BLOCK=BLOCK_N, BLOCKS=per_split // BLOCK_N,
        IEEE=q.dtype == torch.float32, FINAL=final, SCALED=scaled)
    if not final:
        _merge_splits[(batch * kv_heads * group,)](
            stats[0], stats[1], acc, out, n_splits, G=group, GP=padded, D=dim,
            SP=triton.next_power_of_2(n_splits), num_warps=1)
    return out


@torch.library.custom_op("lab::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                     n_keys: int, k_scale: torch.Tensor | None = None,
                     v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of one query token per row over its own filled positions.

    q [B, KV heads, group, head dim] (the query heads of each KV head together); k, v the
    layer's cache buffers [slots, KV heads, positions, head dim], row b read as slot b;
    positions [B] each row's query position: row b reads keys [0, positions[b]], or one key
    where its position is n_keys or past it (a padding row at the scratch position); n_keys the
    most any row reads, which sizes the splits; k_scale, v_scale [slots, KV heads, positions]
    where K and V are fp8 (`kv_dtype`). Returns [B, KV heads, group, head dim] in q's dtype.
    """
    return _launch(q.contiguous(), k, v, k_scale, v_scale, positions, n_keys)


@decode_attention.register_fake
def _(q, k, v, positions, n_keys, k_scale=None, v_scale=None):
    return q.new_empty(q.shape)  # contiguous, as the kernel's result is


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              lengths: torch.Tensor) -> torch.Tensor:
    """The same result from scaled dot-product attention with a length mask."""
    n = int(lengths.max())
    keys = torch.arange(n, device=q.device)[None, :] < lengths[:, None]
    return F.scaled_dot_product_attention(q, k[: q.shape[0], :, :n], v[: q.shape[0], :, :n],
                                          attn_mask=keys[:, None, None, :])


def stored(x: torch.Tensor, kv_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    """K or V [slots, KV heads, positions, head dim] as a cache of `kv_dtype` keeps it: the
    buffer and its per-position scales (None unless fp8)."""
    if not is_scaled(kv_dtype):
        return x.to(kv_dtype), None
    buffer = torch.empty(x.shape, dtype=kv_dtype, device=x.device)
    scale = torch.empty(x.shape[:-1], dtype=SCALE_DTYPE, device=x.device)
    store(buffer, scale, (slice(None),), x)
    return buffer, scale


def check_decode_attention(dtype: torch.dtype, kv_heads: int, group: int, head_dim: int,
                           device: torch.device, kv_dtype: torch.dtype | None = None
                           ) -> str | None:
    """None when the kernel matches `reference` on a probe of these shapes (rows of very
    different lengths, one past a split boundary; queries in `dtype`, K/V stored in
    `kv_dtype`, by default the same), else why it cannot be used."""
    if triton is None:
        return "Triton is not installed"
    if head_dim < 16 or head_dim & (head_dim - 1):
        return f"head dim {head_dim}: the kernel takes a power of two of at least 16"
    gen = torch.Generator().manual_seed(0)
    positions = torch.tensor([0, 69, 299], device=device)
    q, k, v = (torch.randn(*shape, generator=gen).to(device, dtype) for shape in
               ((3, kv_heads, group, head_dim), (4, kv_heads, 320, head_dim),
                (4, kv_heads, 320, head_dim)))
    (k, k_scale), (v, v_scale) = (stored(x, kv_dtype or dtype) for x in (k, v))
    try:
        got = decode_attention(q, k, v, positions, 320, k_scale, v_scale).float()
    except Exception as err:  # noqa: BLE001  any failure to build or run means: do not use it
        return f"the kernel failed: {type(err).__name__}: {err}"
    keys, values = (load(x, s, slice(None), 320, torch.float32).float()
                    for x, s in ((k, k_scale), (v, v_scale)))
    want = reference(q.float(), keys, values, positions + 1)
    tolerance = 1e-4 if dtype == torch.float32 else 3e-2
    if not torch.allclose(got, want, atol=tolerance, rtol=tolerance):
        return (f"the kernel's output differs from the reference by up to "
                f"{float((got - want).abs().max()):.3g}")
    return None
