"""A decoder-only transformer (Llama / Qwen2 family) written for fast autoregressive decode.

The same module runs every rung of the speed ladder: no cache (recompute the prefix), a growing
cache like Hugging Face's, and a static slot cache whose decode step can be captured as a CUDA
graph. Shapes follow the published configs so real checkpoints load (see `weights.py`); the
projections are fused (q|k|v and gate|up) so a decode step launches fewer, larger matmuls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lab.engine.cache import StaticLayer, read_static, write_kv, write_static
from lab.engine.decode_attention import check_decode_attention, decode_attention
from lab.engine.norm_matvec import normed_linear, normed_swiglu, residual_linear
from lab.engine.rope_write import rope_write
from lab.quant import int8_rows


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.x long-context RoPE: low frequencies are slowed by `factor`, high ones kept."""

    factor: float = 32.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    intermediate_size: int
    rope_base: float = 500000.0
    norm_eps: float = 1e-5
    qkv_bias: bool = False
    tie_embeddings: bool = False
    max_seq_len: int = 4096
    rope_scaling: Llama3RopeScaling | None = None

    def __post_init__(self) -> None:
        if self.dim % self.n_heads:
            raise ValueError(f"dim={self.dim} is not a multiple of n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def n_params(self) -> int:
        """Parameter count, without building the model (tied heads counted once)."""
        hd = self.head_dim
        qkv = self.dim * (self.n_heads + 2 * self.n_kv_heads) * hd
        if self.qkv_bias:
            qkv += (self.n_heads + 2 * self.n_kv_heads) * hd
        layer = qkv + self.dim * self.dim + 3 * self.dim * self.intermediate_size + 2 * self.dim
        head = 0 if self.tie_embeddings else self.vocab_size * self.dim
        return self.vocab_size * self.dim + self.n_layers * layer + self.dim + head


LM_SHAPES: dict[str, LMConfig] = {
    # Orpheus 3B: Llama-3.2-3B with the vocabulary grown for 7 x 4096 SNAC audio codes.
    "orpheus-3b": LMConfig(
        vocab_size=156940, dim=3072, n_layers=28, n_heads=24, n_kv_heads=8,
        intermediate_size=8192, rope_base=500000.0, norm_eps=1e-5,
        rope_scaling=Llama3RopeScaling(),
    ),
    # Spark-TTS 0.5B: Qwen2.5-0.5B with BiCodec tokens added to the vocabulary.
    "spark-0.5b": LMConfig(
        vocab_size=166000, dim=896, n_layers=24, n_heads=14, n_kv_heads=2,
        intermediate_size=4864, rope_base=1000000.0, norm_eps=1e-6, qkv_bias=True,
        tie_embeddings=True,
    ),
    "tiny-llama": LMConfig(
        vocab_size=320, dim=64, n_layers=3, n_heads=4, n_kv_heads=2, intermediate_size=160,
        max_seq_len=512, rope_scaling=Llama3RopeScaling(original_max_position=64),
    ),
    "tiny-qwen2": LMConfig(
        vocab_size=300, dim=64, n_layers=2, n_heads=4, n_kv_heads=1, intermediate_size=128,
        rope_base=1000000.0, norm_eps=1e-6, qkv_bias=True, tie_embeddings=True, max_seq_len=512,
    ),
}


def rope_inv_freq(cfg: LMConfig) -> torch.Tensor:
    """Inverse frequencies of the rotary embedding, with Llama-3 scaling when configured."""
    hd = cfg.head_dim
    inv_freq = 1.0 / cfg.rope_base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    s = cfg.rope_scaling
    if s is None:
        return inv_freq
    wavelen = 2 * math.pi / inv_freq
    long_wavelen = s.original_max_position / s.low_freq_factor
    short_wavelen = s.original_max_position / s.high_freq_factor
    slowed = torch.where(wavelen > long_wavelen, inv_freq / s.factor, inv_freq)
    ramp = (s.original_max_position / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    blended = (1 - ramp) * slowed / s.factor + ramp * slowed
    in_between = (wavelen >= short_wavelen) & (wavelen <= long_wavelen)
    return torch.where(in_between, blended, slowed)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the two halves of each head (the layout HF checkpoints are trained with).

    With `cos` = [c, c] and `sin` = [-s, s] over the head dim this is x*cos + swap(x)*sin:
    three kernels, where the textbook form launches seven - it matters at batch 1.
    """
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), sin)


class RMSNorm(nn.Module):
    """`folds`: whether a single token's norm may run inside the projection that reads it
    (`normed_linear`); `LM.fold_norms` sets it for every block."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.folds = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        out = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
        self.qkv = nn.Linear(cfg.dim, out, bias=cfg.qkv_bias)
        self.o = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.real_lengths = False  # decode steps read each slot's own keys (`decode_attention`)
        self.fuses_rope = True  # and rotate q and k as they write the cache (`rope_write`)

    def forward(self, x, norm, cos, sin, bias, positions, slot_index, contiguous, kv):
        """x plus attention over `norm(x)`: the block's norm comes in so that a single token's
        norm and q/k/v projection can run as one kernel (`normed_linear`), and the residual x
        so that its sum with the output projection can (`residual_linear`)."""
        if self._rotates_as_it_writes(x.shape[1], contiguous, kv):
            y = self._attend_rotated(x, norm, cos, sin, positions, kv, bias.shape[-1])
        else:
            q, k, v = self._project(x, norm, cos, sin)
            y = self._attend(q, k, v, bias, positions, slot_index, contiguous, kv)
        return residual_linear(x, y, self.o)

    def forward_mixed(self, x, norm, cos, sin, bias, positions, pre_bias, pre_positions,
                      pre_rows, kv):
        """`forward` for decode rows and prefill rows packed along one token axis: x is
        [B + R*T, dim], the first B tokens one per cache row 0..B-1 (`positions` [B, 1]), then
        R prompt chunks of T tokens for cache rows `pre_rows` (`pre_positions` [R, T]). The
        projections run once over all tokens (the weights are read once); only attention is
        split, since each part reads its own rows of the cache.

        The chunks' K/V go into the cache before the decode rows attend: under torch.compile a
        cache write that follows the decode kernel's read of that cache makes Inductor copy the
        whole layer's cache first (the mixed step took 2.7 times as long, 128 slots, H100)."""
        b, (r, t) = positions.shape[0], pre_positions.shape
        q, k, v = self._project(x[:, None], norm, cos, sin)
        pre_q, pre_k, pre_v = (part.reshape(r, t, *part.shape[2:])
                               for part in (q[b:], k[b:], v[b:]))
        write_kv(kv, pre_k.transpose(1, 2), pre_v.transpose(1, 2), pre_positions, pre_rows)
        decode = self._attend(q[:b], k[:b], v[:b], bias, positions, None, True, kv)
        keys = read_static(kv, pre_rows, False, pre_bias.shape[-1], q.dtype)
        prefill = self._grouped_attention(pre_q, *keys, pre_bias)
        return x + self.o(torch.cat((decode.reshape(b, -1), prefill.reshape(r * t, -1))))

    def _project(self, x, norm, cos, sin):
        """q, k and v [B, T, heads, hd] of tokens x [B, T, dim] after `norm`, q and k
        rotated."""
        b, t, _ = x.shape
        hd, kvh, nh = self.head_dim, self.n_kv_heads, self.n_heads
        qkv = normed_linear(x, norm, self.qkv).reshape(b, t, nh + 2 * kvh, hd)
        qk = apply_rope(qkv[:, :, : nh + kvh], cos, sin)  # q and k heads rotated together
        return qk[:, :, :nh], qk[:, :, nh:], qkv[:, :, nh + kvh :]

    def _attend(self, q, k, v, bias, positions, slot_index, contiguous, kv):
        """Attention output [B, T, heads*hd] for q, k, v [B, T, heads, hd], after writing k, v
        into the cache (`slot_index` None: rows 0..B-1)."""
        b, t = q.shape[:2]
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if self._reads_real_lengths(t, contiguous, kv):
            return self._attend_real_lengths(q, k, v, positions, kv, bias.shape[-1])
        if isinstance(kv, StaticLayer):
            if slot_index is None:
                slot_index = torch.arange(b, device=q.device)
            k, v = write_static(kv, k, v, positions, slot_index, contiguous, bias.shape[-1])
        elif kv is not None:
            k, v = kv.update(k, v)
        return self._grouped_attention(q, k, v, bias)

    def _grouped_attention(self, q, k, v, bias):
        """Grouped-query attention of q [B, T, heads, hd] over k, v [B, kv, keys, hd] without
        copying K/V per query head: the query heads that share a KV head are stacked along the
        query axis, which shares that row's mask."""
        b, t, nh, hd = q.shape
        kvh = self.n_kv_heads
        q = q.transpose(1, 2).reshape(b, kvh, nh // kvh * t, hd)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return y.reshape(b, nh, t, hd).transpose(1, 2).reshape(b, t, nh * hd)

    def _reads_real_lengths(self, t, contiguous, kv) -> bool:
        """One token per row of slots [0, B) over a static cache."""
        return self.real_lengths and t == 1 and contiguous and isinstance(kv, StaticLayer)

    def _rotates_as_it_writes(self, t, contiguous, kv) -> bool:
        """A real-lengths decode step (`_reads_real_lengths`) over a cache in the model's
        dtype, with `fuses_rope` on: an fp8 cache scales each vector as it stores it."""
        return (self.fuses_rope and self._reads_real_lengths(t, contiguous, kv)
                and kv.k_scale is None)

    def _attend_rotated(self, x, norm, cos, sin, positions, kv, n_keys):
        """`_project` and `_attend_real_lengths` with q and k rotated as K/V are written, in
        one kernel (`rope_write`)."""
        b, hd = x.shape[0], self.head_dim
        qkv = normed_linear(x, norm, self.qkv).reshape(b, -1)
        q = rope_write(qkv, cos.reshape(b, hd), sin.reshape(b, hd), positions[:, 0], kv.k, kv.v,
                       self.n_heads)
        return self._attend_written(q, positions, kv, n_keys)

    def _attend_real_lengths(self, q, k, v, positions, kv, n_keys):
        """`_attend` for a decode step whose rows are slots [0, B): write K/V, then attend
        (`_attend_written`)."""
        b, _, nh, hd = q.shape
        write_kv(kv, k, v, positions, torch.arange(b, device=q.device))
        return self._attend_written(q.reshape(b, nh, hd), positions, kv, n_keys)

    def _attend_written(self, q, positions, kv, n_keys):
        """Attention of q [B, heads, hd], one token a row of slots [0, B) whose K/V are in
        the cache, over each row's positions [0, position] only. Rows at the scratch position
        (padding, past every key bucket) read one key."""
        b, nh, hd = q.shape
        q = q.reshape(b, self.n_kv_heads, nh // self.n_kv_heads, hd)
        y = decode_attention(q, kv.k, kv.v, positions[:, 0], n_keys, kv.k_scale, kv.v_scale)
        return y.reshape(b, 1, nh * hd)


class MLP(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.dim, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, norm: RMSNorm) -> torch.Tensor:
        """x plus the MLP of `norm(x)`; the norm and x come in as for `Attention.forward`."""
        return residual_linear(x, normed_swiglu(x, norm, self.gate_up), self.down)


class Block(nn.Module):
    """One transformer layer. It takes its cache slice as tensors, not a layer index, so all
    layers look alike to torch.compile and share one compiled version."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, *attn_args, mixed=False):
        """`attn_args` are the attention's: `Attention.forward`'s, or with `mixed` (x packs
        decode and prefill tokens on one axis) `Attention.forward_mixed`'s."""
        attend = self.attn.forward_mixed if mixed else self.attn
        x = attend(x, self.attn_norm, cos, sin, *attn_args)
        return self.mlp(x, self.mlp_norm)


def attention_bias(positions, key_positions, group: int, dtype) -> torch.Tensor:
    """Additive mask [B, 1, group*T, L]: a query sees keys at positions <= its own.

    Keys are indexed by position (static and dynamic caches) or are the tokens themselves
    (no cache), so one comparison covers every cache mode, and slots holding stale K/V beyond
    a request's position are never read. Built once per forward, shared by all layers.
    """
    allowed = key_positions.unsqueeze(-2) <= positions.unsqueeze(-1)  # [B, T, L]
    b, t, n = allowed.shape
    allowed = allowed.unsqueeze(1).expand(b, group, t, n).reshape(b, 1, group * t, n)
    return torch.where(allowed, torch.zeros((), dtype=dtype, device=allowed.device), -torch.inf)


class NarrowedHead(nn.Module):
    """Rows [start, stop) of an output head, computed through a view of its weight. The view is
    not a parameter: the full head stays the one parameter that owns (and counts) the memory.
    """

    bias = None

    def __init__(self, full: nn.Linear, start: int, stop: int) -> None:
        super().__init__()
        self.full = full
        self.rows = full.weight[start:stop]

    @property
    def weight(self) -> torch.Tensor:
        """The rows it computes, for the one-token kernel (`normed_linear`)."""
        return self.rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_rows.linear(x, self.rows)


@torch.no_grad()
def _check_narrowed(full: nn.Linear, narrowed: NarrowedHead, start: int, stop: int) -> None:
    """Raise RuntimeError unless `narrowed` gives `full`'s logits [start, stop) on a probe
    (a tensor subclass reports the dtype its layer computes in)."""
    weight = full.weight
    probe = torch.randn(4, full.in_features, generator=torch.Generator().manual_seed(0))
    probe = probe.to(device=weight.device, dtype=weight.dtype)
    want, got = full(probe)[:, start:stop].float(), narrowed(probe).float()
    if not torch.allclose(got, want, rtol=1e-2, atol=1e-2 * float(want.abs().max())):
        raise RuntimeError("the sliced head's logits differ from the full head's")


def call_block(block: Block, *args) -> torch.Tensor:
    return block(*args)


def call_mixed_block(block: Block, *args) -> torch.Tensor:
    return block(*args, mixed=True)


def call_head(norm: RMSNorm, head: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The final norm and the head: for one token of a float head, one kernel
    (`normed_linear`); an int8 head keeps Inductor's product (on an H100 the int8 step took
    1.78 ms so, 1.81 with the head in the one-row kernel)."""
    return normed_linear(x, norm, head, int8=False)


class LM(nn.Module):
    """Token ids and positions in, next-token logits out; see the module docstring."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.is_dummy = False
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.head_range: tuple[int, int] | None = None
        shape = (cfg.max_seq_len, cfg.head_dim)
        self.register_buffer("rope_cos", torch.empty(shape), persistent=False)
        self.register_buffer("rope_sin", torch.empty(shape), persistent=False)
        if self.rope_cos.device.type != "meta":
            self.reset_rope()

    def reset_rope(self) -> None:
        """(Re)compute the rotary tables in fp32, then store them in the buffers' dtype.

        Needed after building on the meta device, and after casting the model down and up
        again (a bf16 round trip would otherwise leave coarse angles behind).
        """
        device, dtype = self.embed.weight.device, self.rope_cos.dtype
        inv_freq = rope_inv_freq(self.cfg).to(device)
        angles = torch.outer(torch.arange(self.cfg.max_seq_len, device=device).float(), inv_freq)
        cos, sin = angles.cos(), angles.sin()
        self.rope_cos = torch.cat((cos, cos), dim=-1).to(dtype)
        self.rope_sin = torch.cat((-sin, sin), dim=-1).to(dtype)

    def narrow_head(self, start: int, stop: int) -> None:
        """Compute logits for tokens [start, stop) only: column j is token start + j.

        A family that can only ever emit a known span of the vocabulary (Orpheus: its audio
        codes and end-of-speech, 28,680 of 156,940 rows) need not read the rest of the output
        head every step: at batch 1 that is 0.8 GB of the 6.6 GB a step streams. The narrowed
        head is a view of the full one's rows (no copy, nothing freed); narrowing again to
        the same span does nothing, to another raises. A quantized weight is sliced by its own
        tensor type, so the narrowed head is checked against the full one on a probe input
        and refused (RuntimeError, the head left whole) if they disagree.
        """
        if self.head_range == (start, stop):
            return
        if self.head_range is not None:
            raise ValueError(f"the head is already narrowed to {self.head_range}")
        if not 0 <= start < stop <= self.cfg.vocab_size:
            raise ValueError(f"[{start}, {stop}) is not a span of the vocabulary "
                             f"(0..{self.cfg.vocab_size})")
        head = NarrowedHead(self.lm_head, start, stop)
        _check_narrowed(self.lm_head, head, start, stop)
        self.lm_head, self.head_range = head, (start, stop)

    def read_real_lengths(self, kv_dtype: torch.dtype) -> str | None:
        """Let each row of a decode step over a static cache of `kv_dtype` read its own filled
        positions (`decode_attention`) instead of the batch's key bucket, once the kernel
        matched the reference on a probe of this model's shapes on its device. Returns why
        not (the attention left as it was), or None when every layer now reads real lengths.
        """
        cfg, weight = self.cfg, self.embed.weight
        why = check_decode_attention(weight.dtype, cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads,
                                     cfg.head_dim, weight.device, kv_dtype)
        if why is None:
            for layer in self.layers:
                layer.attn.real_lengths = True
        return why

    def fuse_rope(self, on: bool) -> None:
        """Whether each block's decode step rotates q and k as it writes the cache, in one
        kernel (the default), or apart: what a benchmark sets to time one against the other."""
        for layer in self.layers:
            layer.attn.fuses_rope = on

    def fold_norms(self, on: bool) -> None:
        """Whether each block's two norms, and the final one, run inside the projections after
        them for a single token (the default), or apart: what a benchmark sets to time one
        against the other."""
        self.norm.folds = on
        for layer in self.layers:
            layer.attn_norm.folds = layer.mlp_norm.folds = on

    def tie_weights(self) -> None:
        if self.cfg.tie_embeddings and self.head_range is None:
            self.lm_head.weight = self.embed.weight

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache=None,
        rows: torch.Tensor | None = None,
        last_only: bool = False,
        *,
        block_fn=call_block,
        head_fn=call_head,
    ) -> torch.Tensor:
        """Logits [B, T, V] (or [B, 1, V] with `last_only`, which skips the head for the prompt).

        `cache=None` attends causally over the given tokens only. With a `StaticKVCache` (or
        its `prefix(n)`, which attends over the first n positions only), batch row b uses cache
        row b when `rows` is None (a view, safe to capture in a CUDA graph) or cache row
        `rows[b]` otherwise. With a `DynamicKVCache`, batch rows are its rows; with a
        `SlotDynamicCache`, pass the batch view from its `batch()`.
        `block_fn` / `head_fn` run each layer and the head: compiled versions go here.
        """
        _check_inputs(tokens, positions, cache, rows)
        b = tokens.shape[0]
        key_positions = positions if cache is None else cache.key_positions(positions)
        x = self.embed(tokens)
        group = self.cfg.n_heads // self.cfg.n_kv_heads
        bias = attention_bias(positions, key_positions, group, x.dtype)
        slot_index = rows if rows is not None else torch.arange(b, device=tokens.device)
        cos = self.rope_cos[positions].unsqueeze(2).to(x.dtype)
        sin = self.rope_sin[positions].unsqueeze(2).to(x.dtype)
        for i, block in enumerate(self.layers):
            kv = None if cache is None else cache.layer_kv(i)
            x = block_fn(block, x, cos, sin, bias, positions, slot_index, rows is None, kv)
        if last_only:
            x = x[:, -1:]
        return head_fn(self.norm, self.lm_head, x)

    def forward_mixed(self, tokens, positions, cache, pre_tokens, pre_positions, pre_rows, *,
                      block_fn=call_mixed_block, head_fn=call_head) -> torch.Tensor:
        """One decode step with prompt chunks riding along: logits [B + R, 1, V], the B decode
        rows' next tokens, then each prefill row's last token.

        Decode row b is cache row b (`tokens`, `positions` [B, 1]); prefill row r writes
        `pre_tokens` [R, T] at `pre_positions` into cache row `pre_rows[r]`, left-padded so its
        last real token is column T-1 (padding sits at the scratch position `max_len - 1`).
        `cache` is a `StaticKVCache` or its prefix, which must hold every chunk's positions.
        A separate prefill forward would read every weight a second time and launch every
        kernel again; here a prompt costs only its tokens' share of the matmuls.
        """
        _check_mixed(tokens, positions, pre_tokens, pre_positions, pre_rows)
        cache.check_batch(tokens.shape[0], None)
        b, r = tokens.shape[0], pre_tokens.shape[0]
        key_positions = cache.key_positions(positions)
        all_positions = torch.cat((positions.reshape(-1), pre_positions.reshape(-1)))
        x = self.embed(torch.cat((tokens.reshape(-1), pre_tokens.reshape(-1))))
        group = self.cfg.n_heads // self.cfg.n_kv_heads
        bias = attention_bias(positions, key_positions, group, x.dtype)
        pre_bias = attention_bias(pre_positions, key_positions, group, x.dtype)
        cos = self.rope_cos[all_positions][:, None, None].to(x.dtype)
        sin = self.rope_sin[all_positions][:, None, None].to(x.dtype)
        for i, block in enumerate(self.layers):
            x = block_fn(block, x, cos, sin, bias, positions, pre_bias, pre_positions, pre_rows,
                         cache.layer_kv(i))
        last = torch.cat((x[:b], x[b:].reshape(r, -1, x.shape[-1])[:, -1]))
        return head_fn(self.norm, self.lm_head, last[:, None])


def _check_mixed(tokens, positions, pre_tokens, pre_positions, pre_rows) -> None:
    if tokens.dim() != 2 or tokens.shape[1] != 1 or tokens.shape != positions.shape:
        raise ValueError(f"decode tokens and positions must both be [B, 1]; got "
                         f"{tuple(tokens.shape)} and {tuple(positions.shape)}")
    if pre_tokens.dim() != 2 or pre_tokens.shape != pre_positions.shape:
        raise ValueError(f"prefill tokens and positions must both be [R, T]; got "
                         f"{tuple(pre_tokens.shape)} and {tuple(pre_positions.shape)}")
    if pre_rows.shape != pre_tokens.shape[:1]:
        raise ValueError(f"pre_rows must be [R]={pre_tokens.shape[0]}; got "
                         f"{tuple(pre_rows.shape)}")


def _check_inputs(tokens, positions, cache, rows) -> None:
    """Shape checks only: value checks would force a host sync inside a captured graph."""
    if tokens.dim() != 2 or tokens.shape != positions.shape:
        raise ValueError(
            f"tokens and positions must both be [B, T]; got {tuple(tokens.shape)} and "
            f"{tuple(positions.shape)}"
        )
    if rows is not None and (rows.dim() != 1 or rows.shape[0] != tokens.shape[0]):
        raise ValueError(f"rows must be [B]={tokens.shape[0]}; got {tuple(rows.shape)}")
    if cache is not None:
        cache.check_batch(tokens.shape[0], rows)
