"""A decode step's rotary embedding of q and k and its K/V cache write, as one kernel.

Compiled, a step of one token a row spent four small kernels a layer between the q/k/v
product and attention: k rotated and written into the cache, v written, q rotated (twice,
split with the real lengths' arithmetic), and from two rows on an aten copy that made q
contiguous for the attention kernel. In kernel profiles of the Orpheus-3B shape on an H200
they took about 4 us a layer at batch 1 (0.12 ms of a 1.6 ms int4 step) and 5 at batch 64.
Here one program a (row, head) reads the head's slice of the product once, rotates it, and
writes q where attention reads it or k and v into the row's slot at its position.

Only a plain cache (the model's dtype) takes this path: an fp8 cache quantizes each vector
with a scale of its own (`lab.engine.kv_dtype.store`), which stays on the unfused path.
"""

from __future__ import annotations

import torch

from lab.engine.cache import StaticLayer, write_kv
from lab.quant.triton_site import runs_kernels, tl, triton

if triton is not None:

    @triton.jit
    def _rope_write(qkv_ptr, cos_ptr, sin_ptr, pos_ptr, q_ptr, k_ptr, v_ptr, qkv_row, table_row,
                    k_slot, k_head, k_pos, NH: tl.constexpr, KVH: tl.constexpr,
                    HD: tl.constexpr):
        """Program (i, h): head h of row i; h < NH a query head, rotated into q [B, NH, HD];
        else KV head h - NH, its k rotated and its v as it is, into slot i at row i's
        position. Rotation with cos = [c, c] and sin = [-s, s] (`llm.apply_rope`):
        x * cos + x rolled by half a head * sin, in float32, rounded once."""
        i = tl.program_id(0)
        h = tl.program_id(1)
        d = tl.arange(0, HD)
        head = qkv_ptr + i.to(tl.int64) * qkv_row + h * HD
        x = tl.load(head + d).to(tl.float32)
        rolled = tl.load(head + (d + HD // 2) % HD).to(tl.float32)
        cos = tl.load(cos_ptr + i * table_row + d).to(tl.float32)
        sin = tl.load(sin_ptr + i * table_row + d).to(tl.float32)
        turned = x * cos + rolled * sin
        if h < NH:
            tl.store(q_ptr + (i.to(tl.int64) * NH + h) * HD + d,
                     turned.to(q_ptr.dtype.element_ty))
        else:
            at = i.to(tl.int64) * k_slot + (h - NH) * k_head + tl.load(pos_ptr + i) * k_pos + d
            tl.store(k_ptr + at, turned.to(k_ptr.dtype.element_ty))
            v = tl.load(qkv_ptr + i.to(tl.int64) * qkv_row + (KVH + h) * HD + d)
            tl.store(v_ptr + at, v.to(v_ptr.dtype.element_ty))


@torch.library.custom_op("lab::rope_write", mutates_args=("k", "v"))
def rope_write(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
               k: torch.Tensor, v: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Rows i of qkv [B, (NH + 2 KVH) * HD] (one token each) with their rotary tables cos
    and sin [B, HD] at `positions` [B]: write rotated k and v into cache slots [0, B) of k, v
    [slots, KVH, positions, HD] at each row's position, and return the rotated q [B, NH, HD],
    contiguous."""
    if not runs_kernels(qkv):
        return reference(qkv, cos, sin, positions, k, v, n_heads)
    b = qkv.shape[0]
    kv_heads, head_dim = k.shape[1], k.shape[-1]
    q = torch.empty(b, n_heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    qkv, cos, sin = qkv.contiguous(), cos.contiguous(), sin.contiguous()
    _rope_write[(b, n_heads + kv_heads)](
        qkv, cos, sin, positions.contiguous(), q, k, v, qkv.stride(0), cos.stride(0),
        k.stride(0), k.stride(1), k.stride(2), NH=n_heads, KVH=kv_heads, HD=head_dim)
    return q


@rope_write.register_fake
def _(qkv, cos, sin, positions, k, v, n_heads):
    return qkv.new_empty(qkv.shape[0], n_heads, k.shape[-1])


def reference(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The op in eager PyTorch, rotating in float32 as the kernel does: where no kernel runs,
    and what the tests hold the kernel to."""
    b, kv_heads, head_dim = qkv.shape[0], k.shape[1], k.shape[-1]
    heads = qkv.reshape(b, -1, head_dim).float()
    turned = heads * cos[:, None].float() + heads.roll(head_dim // 2, -1) * sin[:, None].float()
    q, new_k = turned[:, :n_heads], turned[:, n_heads:n_heads + kv_heads]
    new_v = heads[:, n_heads + kv_heads:]
    write_kv(StaticLayer(k, v), new_k[:, :, None].to(k.dtype), new_v[:, :, None].to(v.dtype),
             positions[:, None], torch.arange(b, device=qkv.device))
    return q.to(qkv.dtype).contiguous()
