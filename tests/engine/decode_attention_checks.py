"""Checks of the real-length decode attention kernel, run by `test_decode_attention.py`
through `tests/kernel_checks.py` (on a GPU, or on a CPU under Triton's interpreter)."""

from __future__ import annotations

import functools
import re

import torch
from torch._inductor.utils import run_and_get_code

from lab.engine.cache import StaticKVCache
from lab.engine.decode_attention import (
    check_decode_attention,
    decode_attention,
    reference,
    splits,
    stored,
)
from lab.engine.graphs import GraphedDecoder
from lab.engine.kv_dtype import FP8, load
from lab.engine.llm import LM, LMConfig, call_block


def kernel_matches_reference(device: str) -> None:
    """Rows of 1 key, a block and one past it, and the whole bucket, each at the position of
    its last key; one row (split along the keys) and several; grouped query heads padded up
    to the kernel's 16; cache buffers with more slots than rows; a row at n_keys or past it
    (padding at the scratch position) reads one key."""
    gen = torch.Generator().manual_seed(0)
    for batch, kv_heads, group, dim, n_keys in ((1, 2, 3, 16, 200), (5, 2, 3, 32, 200),
                                                (4, 1, 1, 16, 64), (3, 2, 4, 16, 130)):
        lengths = torch.tensor([1, 64, 65, n_keys, 2][:batch]).clamp(max=n_keys).to(device)
        q = torch.randn(batch, kv_heads, group, dim, generator=gen).to(device)
        k, v = (torch.randn(batch + 2, kv_heads, n_keys + 7, dim, generator=gen).to(device)
                for _ in range(2))
        got = decode_attention(q, k, v, lengths - 1, n_keys)
        want = reference(q, k, v, lengths)
        torch.library.opcheck(decode_attention, (q, k, v, lengths - 1, n_keys))
        assert got.shape == q.shape and got.dtype == q.dtype
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        padding = torch.full_like(lengths, n_keys) + torch.arange(batch, device=device)
        torch.testing.assert_close(decode_attention(q, k, v, padding, n_keys),
                                   reference(q, k, v, torch.ones_like(lengths)))
    assert splits(1, 8, 512) == (8, 64)  # one row: split along the keys to fill the GPU
    assert splits(128, 8, 512) == (1, 512)  # enough rows: one program per (row, KV head)
    assert check_decode_attention(torch.float32, 2, 3, 16, torch.device(device)) is None
    for dim in (8, 48):  # tl.dot needs 16 along the reduced dim; tl.arange, a power of two
        assert "power of two" in check_decode_attention(torch.float32, 2, 3, dim,
                                                        torch.device(device))
    odd = LM(LMConfig(vocab_size=8, dim=96, n_layers=1, n_heads=2, n_kv_heads=1,
                      intermediate_size=8)).to(device)
    assert "power of two" in odd.read_real_lengths(torch.float32)  # head dim 48: refused
    assert not odd.layers[0].attn.real_lengths


def fp8_kernel_matches_the_dequantized_reference(device: str) -> None:
    """K/V kept in fp8 with a scale per position, read by the kernel as they are stored: the
    reference's attention over their dequantized copies, one row split along the keys and
    several rows; the probe an engine runs accepts fp8 too."""
    gen = torch.Generator().manual_seed(2)
    for batch, n_keys in ((1, 200), (4, 130)):
        lengths = torch.tensor([130, 1, 64, 65][:batch]).clamp(max=n_keys).to(device)
        q = torch.randn(batch, 2, 3, 16, generator=gen).to(device)
        (k, k_scale), (v, v_scale) = (
            stored(torch.randn(batch + 1, 2, n_keys, 16, generator=gen).to(device) * 4, FP8)
            for _ in range(2))
        assert k.dtype == FP8 and k_scale.shape == k.shape[:-1]
        got = decode_attention(q, k, v, lengths - 1, n_keys, k_scale, v_scale)
        want = reference(q, load(k, k_scale, slice(None), n_keys, q.dtype),
                         load(v, v_scale, slice(None), n_keys, q.dtype), lengths)
        # The schema check compares inputs before and after, which a CPU cannot do for fp8;
        # `kernel_matches_reference` runs it on the same op.
        torch.library.opcheck(decode_attention, (q, k, v, lengths - 1, n_keys, k_scale, v_scale),
                              test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        unscaled = decode_attention(q, k, v, lengths - 1, n_keys, None, None)
        assert not torch.allclose(unscaled, want, atol=1e-2)  # the scales are applied
    assert check_decode_attention(torch.float32, 2, 3, 16, torch.device(device), FP8) is None


def decode_step_matches_the_key_bucket(device: str) -> None:
    """A decode step of a small LM over a static cache, rows at different positions and one at
    the scratch position (padding), with and without carried prompt tokens: the real-length
    attention gives the key bucket's logits, over K/V in the model's dtype and in fp8."""
    for kv_dtype in (torch.float32, FP8):
        _decode_step_matches_the_key_bucket(device, kv_dtype)


def _decode_step_matches_the_key_bucket(device: str, kv_dtype: torch.dtype) -> None:
    cfg = LMConfig(vocab_size=64, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                   intermediate_size=64, max_seq_len=160)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lm = LM(cfg).eval().requires_grad_(False).to(device)
    prompt = torch.randint(0, 64, (4, 100), generator=torch.Generator().manual_seed(1))
    tokens = torch.tensor([[3], [5], [7], [9]], device=device)
    positions = torch.tensor([[10], [99], [40], [159]], device=device)  # 159: scratch
    pre = (torch.tensor([[1, 2, 3, 4]], device=device), torch.tensor([[0, 1, 2, 3]],
           device=device), torch.tensor([5], device=device))
    results = []
    for real in (False, True):
        cache = StaticKVCache(cfg.n_layers, 6, 160, cfg.n_kv_heads, cfg.head_dim,
                              dtype=kv_dtype, device=device)
        with torch.inference_mode():
            lm(prompt.to(device), torch.arange(100, device=device).expand(4, -1), cache)
            if real:
                assert lm.read_real_lengths(kv_dtype) is None
            assert all(layer.attn.real_lengths == real for layer in lm.layers)
            step = lm(tokens, positions, cache.prefix(128))
            mixed = lm.forward_mixed(tokens, positions, cache.prefix(128), *pre)
        results.append((step[:3], mixed[:3], mixed[4:]))
    for off, on in zip(*results, strict=True):
        torch.testing.assert_close(on, off, atol=1e-5, rtol=1e-5)



def compiled_step_matches_eager(device: str) -> None:
    """A compiled block with dynamic shapes calls the kernel as a custom op (its fake result
    has the kernel's shape and strides), at two key buckets without recompiling for each."""
    cfg = LMConfig(vocab_size=64, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                   intermediate_size=64, max_seq_len=160)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lm = LM(cfg).eval().requires_grad_(False).to(device)
    cache = StaticKVCache(cfg.n_layers, 4, 160, cfg.n_kv_heads, cfg.head_dim, device=device)
    block = torch.compile(call_block, dynamic=True)
    tokens = torch.tensor([[3], [5], [7]], device=device)
    positions = torch.tensor([[10], [49], [30]], device=device)
    with torch.inference_mode():
        lm(torch.randint(0, 64, (3, 50), device=device),
           torch.arange(50, device=device).expand(3, -1), cache)
        for layer in lm.layers:
            layer.attn.real_lengths = True
        for n_keys in (64, 128):
            eager = lm(tokens, positions, cache.prefix(n_keys))
            compiled = lm(tokens, positions, cache.prefix(n_keys), block_fn=block)
            torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


def compiled_mixed_step_writes_the_cache_in_place(device: str) -> None:
    """A compiled decode step that carries a prompt chunk writes the chunk's K/V into the cache
    in place: no buffer the size of a layer's cache appears in its code (a write after the
    kernel's read made Inductor copy each layer's cache first, 7 GB a step at 128 slots), and
    its logits and cache are the eager step's."""
    cfg = LMConfig(vocab_size=64, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                   intermediate_size=64, max_seq_len=160)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lm = LM(cfg).eval().requires_grad_(False).to(device)
    for layer in lm.layers:
        layer.attn.real_lengths = True
    tokens = torch.tensor([[3], [5], [7], [9]], device=device)
    positions = torch.tensor([[10], [49], [30], [159]], device=device)  # 159: scratch
    pre = (torch.tensor([[1, 2, 3, 4]], device=device),
           torch.tensor([[0, 1, 2, 3]], device=device), torch.tensor([4], device=device))
    prompt = torch.randint(0, 64, (3, 50), generator=torch.Generator().manual_seed(1))
    results, code = [], []
    for mode in ("eager", "default"):
        cache = StaticKVCache(cfg.n_layers, 5, 160, cfg.n_kv_heads, cfg.head_dim,
                              device=device)
        decoder = GraphedDecoder(lm, cache, mode, buckets=(4,), key_buckets=(64,),
                                 prefill_tokens=4)
        with torch.inference_mode():
            lm(prompt.to(device), torch.arange(50, device=device).expand(3, -1), cache)
            step = functools.partial(decoder.with_prefill, tokens, positions, 64, *pre)
            logits, code = (step(), code) if mode == "eager" else run_and_get_code(step)
        results.append((*logits, cache.k[..., :-1, :].clone(), cache.v[..., :-1, :].clone()))
    layer = f"(({', '.join(str(n) for n in cache.k.shape[1:])}),"
    allocations = re.findall(r"empty_strided\w*(\(\([^)]*\),)", "\n".join(code))
    assert allocations and layer not in allocations, f"a copy of a layer's cache {layer}"
    for compiled, eager in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
