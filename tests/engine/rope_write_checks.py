"""Checks of the rotate-and-write kernel, run by `test_rope_write.py` through
`tests/kernel_checks.py` (on a GPU, or on a CPU under Triton's interpreter)."""

from __future__ import annotations

import torch

from lab.engine.cache import StaticKVCache
from lab.engine.llm import apply_rope, call_block
from lab.engine.rope_write import reference, rope_write
from tests.kernel_checks import OpCalls


def _tables(positions: torch.Tensor, head_dim: int):
    """cos = [c, c] and sin = [-s, s] at `positions`, as the LM builds them."""
    inv = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = positions.float()[:, None] * inv[None]
    return (torch.cat((angles.cos(), angles.cos()), -1),
            torch.cat((-angles.sin(), angles.sin()), -1))


def kernel_matches_the_unfused_step(device: str) -> None:
    """q rotated as `apply_rope` rotates it, k rotated and v written at each row's own
    position (the scratch position too) of its own slot, nothing else of the cache touched;
    query heads per KV head 1 and 3, float32 and bf16, more slots than rows."""
    gen = torch.Generator().manual_seed(0)
    for nh, kvh, hd, dtype in ((4, 4, 16, torch.float32), (6, 2, 32, torch.bfloat16)):
        b, slots, length = 3, 5, 12
        positions = torch.tensor([0, 7, length - 1])
        qkv = torch.randn(b, (nh + 2 * kvh) * hd, generator=gen).to(dtype)
        cos, sin = (t.to(dtype) for t in _tables(positions, hd))
        k0 = torch.randn(slots, kvh, length, hd, generator=gen).to(dtype)
        v0 = torch.randn(slots, kvh, length, hd, generator=gen).to(dtype)
        k, v = k0.clone().to(device), v0.clone().to(device)
        q = rope_write(qkv.to(device), cos.to(device), sin.to(device), positions.to(device),
                       k, v, nh)
        want_k, want_v = k0.clone(), v0.clone()
        want_q = reference(qkv, cos, sin, positions, want_k, want_v, nh)
        assert q.shape == (b, nh, hd) and q.is_contiguous() and q.dtype == dtype
        tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-2,
                                                                           "atol": 1e-2}
        torch.testing.assert_close(q.cpu(), want_q, **tol)
        torch.testing.assert_close(k.cpu(), want_k, **tol)
        assert torch.equal(v.cpu(), want_v)
        heads = qkv.reshape(b, 1, -1, hd).float()
        rotated = apply_rope(heads, cos[:, None, None].float(), sin[:, None, None].float())
        torch.testing.assert_close(want_q.float(), rotated[:, 0, :nh], **tol)
        untouched = torch.ones(slots, length, dtype=torch.bool)
        untouched[torch.arange(b), positions] = False
        assert torch.equal(k.cpu().transpose(1, 2)[untouched], k0.transpose(1, 2)[untouched])
        torch.library.opcheck(rope_write, (qkv.to(device), cos.to(device), sin.to(device),
                                           positions.to(device), k0.clone().to(device),
                                           v0.clone().to(device), nh))


def greedy_decoding_is_unchanged(device: str) -> None:
    """A tiny LM (float32) decodes the same greedy tokens with the rotation fused into the
    cache write and apart, through one op call a layer a decode step when fused; a compiled
    block (fullgraph) leaves the same logits and cache as eager."""
    from lab.engine import generate, load_lm

    lm, cfg = load_lm("dummy", shape="tiny-llama", seed=3)
    lm = lm.to(device, torch.float32).eval()
    assert lm.read_real_lengths(torch.float32) is None
    prompt = torch.randint(0, cfg.vocab_size, (3, 5), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(device)
    runs = {}
    for on in (True, False):
        lm.fuse_rope(on)
        with torch.no_grad(), OpCalls(torch.ops.lab.rope_write.default) as calls:
            runs[on] = generate(lm, prompt, 9, "static", lambda logits: logits.argmax(-1))
        assert len(calls.rows) == (8 * cfg.n_layers if on else 0), calls.rows
    assert torch.equal(runs[True].tokens, runs[False].tokens)
    lm.fuse_rope(True)
    eager, compiled = (_decode_step(lm, cfg, prompt, block_fn)
                       for block_fn in (call_block, torch.compile(call_block, fullgraph=True)))
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _decode_step(lm, cfg, prompt, block_fn):
    """Logits of one decode step after the prompt, and the cache it leaves, with `block_fn`
    running each block (a compiled one traces the op's writes into the cache)."""
    b, t = prompt.shape
    cache = StaticKVCache(cfg.n_layers, b, 16, cfg.n_kv_heads, cfg.head_dim, torch.float32,
                          prompt.device)
    positions = torch.arange(t, device=prompt.device).expand(b, t)
    with torch.no_grad():
        first = lm(prompt, positions, cache)[:, -1].argmax(-1, keepdim=True)
        logits = lm(first, positions[:, -1:] + 1, cache, block_fn=block_fn)
    return logits, cache.k, cache.v


def all_checks(device: str) -> None:
    kernel_matches_the_unfused_step(device)
    greedy_decoding_is_unchanged(device)
