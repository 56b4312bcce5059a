"""Checks of the norm + one-row projection kernel, run by `test_norm_matvec.py` through
`tests/kernel_checks.py` (on a GPU, or on a CPU under Triton's interpreter)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lab.engine.norm_matvec import normed_linear, residual_linear
from lab.quant.matvec import GLU_TILES, Tiles, launch, launch_glu, tiles_for
from tests.kernel_checks import OpCalls


def _plain(x, w, g=None, eps=0.0, scale=None) -> torch.Tensor:
    """The norm (if g), the product and the scale (if given) in float64, nothing rounded."""
    x, w = x.double(), w.double()
    if g is not None:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g.double()
    y = x @ w.T
    return y if scale is None else y * scale.double().reshape(-1)


def kernel_matches_the_expression(device: str) -> None:
    """Outputs and columns below, at and past a tile, several tile shapes, products piled or
    summed per load, in bf16 and fp32 with a float weight, with a norm or without, with a
    residual added or not, through the op; a row far from unit scale, as residual streams
    are."""
    gen = torch.Generator().manual_seed(0)
    big = tiles_for(16384)
    for n, k in ((5, 40), (big.rows * 3, big.cols), (37, big.cols + 72)):
        x = 30 * torch.randn(k, generator=gen)
        g = 1 + torch.rand(k, generator=gen)
        w = torch.randn(n, k, generator=gen) / k ** 0.5
        for norm in (g, None):
            want = _plain(x, w, norm, 1e-5)
            for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
                xs, ws = x.to(device, dtype), w.to(device, dtype)
                gs = None if norm is None else norm.to(device, dtype)
                got = torch.ops.lab.matvec(xs[None], ws, gs, None, 1e-5)
                assert got.shape == (1, n) and got.dtype == dtype
                close = {"rtol": tol, "atol": tol * want.abs().max().item()}
                torch.testing.assert_close(got[0].double().cpu(), want, **close)
                for tiles in (Tiles(rows=1, cols=32), Tiles(rows=16, cols=64, warps=2), big,
                              Tiles(rows=4, cols=64, pile=False)):
                    torch.testing.assert_close(
                        launch(xs, ws, gs, 1e-5, tiles=tiles).double().cpu(), want, **close)
                r = torch.randn(n, generator=gen)
                got = launch(xs, ws, gs, 1e-5, residual=r.to(device, dtype))
                torch.testing.assert_close(got.double().cpu(), want + r.to(dtype).double(),
                                           **close)
        torch.library.opcheck(torch.ops.lab.matvec.default,
                              (x[None].to(device), w.to(device), g.to(device), None, 1e-5))


def int8_weights_are_widened_and_scaled(device: str) -> None:
    """int8 weights with one scale per output, at the tiles chosen for one-byte weights and at
    others, with a norm and without, bf16 and fp16 rows, the weights a row slice of a larger
    matrix as a narrowed head hands them."""
    gen = torch.Generator().manual_seed(1)
    for n, k in ((7, 40), (70, 1100)):
        x = 30 * torch.randn(k, generator=gen)
        g = 1 + torch.rand(k, generator=gen)
        whole = torch.randint(-127, 128, (n + 6, k), generator=gen, dtype=torch.int8)
        scale = torch.rand(n + 6, 1, generator=gen) / 100 + 1e-3
        w, s = whole[3:-3].to(device), scale[3:-3].to(device)
        for norm in (g, None):
            want = _plain(x, whole[3:-3], norm, 1e-5, scale[3:-3])
            for dtype in (torch.bfloat16, torch.float16):
                xs = x.to(device, dtype)
                gs = None if norm is None else norm.to(device, dtype)
                assert tiles_for(n, w.element_size()).cols == 1024
                for tiles in (None, Tiles(rows=2, cols=64)):
                    got = launch(xs, w, gs, 1e-5, s, tiles)
                    assert got.dtype == dtype
                    torch.testing.assert_close(got.double().cpu(), want, rtol=2e-2,
                                               atol=2e-2 * want.abs().max().item())


def glu_matches_the_expression(device: str) -> None:
    """The gate/up kernel equals SiLU(gate) * up of the normed product, gate rows first then
    up rows, float weights in bf16 and fp32 and int8 weights with one scale per output, at
    outputs and columns below and past a tile."""
    gen = torch.Generator().manual_seed(2)
    for n, k in ((5, 40), (9, 600)):
        x = 30 * torch.randn(k, generator=gen)
        g = 1 + torch.rand(k, generator=gen)
        float_w = torch.randn(2 * n, k, generator=gen) / k ** 0.5
        int8_w = torch.randint(-127, 128, (2 * n, k), generator=gen, dtype=torch.int8)
        scale = torch.rand(2 * n, 1, generator=gen) / 100 + 1e-3
        for w, s, dtype, tol in ((float_w, None, torch.float32, 1e-5),
                                 (float_w, None, torch.bfloat16, 2e-2),
                                 (int8_w, scale, torch.bfloat16, 2e-2)):
            gate, up = _plain(x, w, g, 1e-5, s).chunk(2)
            want = F.silu(gate) * up
            ws = w.to(device) if w.dtype == torch.int8 else w.to(device, dtype)
            ss = None if s is None else s.to(device)
            for tiles in (GLU_TILES, Tiles(rows=2, cols=64)):
                got = launch_glu(x.to(device, dtype), ws, g.to(device, dtype), 1e-5, ss, tiles)
                assert got.shape == (n,) and got.dtype == dtype
                torch.testing.assert_close(got.double().cpu(), want, rtol=tol,
                                           atol=tol * want.abs().max().item())


def one_token_folds_its_norm_compiled_or_not(device: str) -> None:
    """A block's MLP on one token computes its norm and gate/up product, then its down
    projection with the residual sum, through the op, as the plain modules would, and compiled
    gives what eager gives; two tokens, or a norm told not to fold, take the norm and the
    linear apart."""
    from lab.engine.llm import Block, LMConfig

    cfg = LMConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                   intermediate_size=48, max_seq_len=16)
    torch.manual_seed(0)
    block = Block(cfg).to(device)
    block.mlp_norm.weight.data.uniform_(0.5, 1.5)
    mlp, norm = block.mlp, block.mlp_norm
    x = 10 * torch.randn(1, 1, cfg.dim, device=device)
    with (torch.no_grad(), OpCalls(torch.ops.lab.matvec.default) as calls,
          OpCalls(torch.ops.lab.glu_matvec.default) as glu_calls):
        folded = mlp(x, norm)
        gate, up = mlp.gate_up(norm(x)).chunk(2, dim=-1)
        want = x + mlp.down(F.silu(gate) * up)
    assert calls.rows == [1] and glu_calls.rows == [1]
    torch.testing.assert_close(folded, want, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        got = torch.compile(mlp, fullgraph=True)(x, norm)
    torch.testing.assert_close(got, folded, rtol=1e-5, atol=1e-5)
    with torch.no_grad(), OpCalls(torch.ops.lab.matvec.default) as calls:
        two = normed_linear(x.expand(2, 1, -1), block.attn_norm, block.attn.qkv)
    assert calls.rows == []
    torch.testing.assert_close(two[:1], normed_linear(x, block.attn_norm, block.attn.qkv),
                               rtol=1e-4, atol=1e-4)
    block.attn_norm.folds = False  # as `LM.fold_norms(False)` sets it
    with torch.no_grad(), OpCalls(torch.ops.lab.matvec.default) as calls:
        apart = normed_linear(x, block.attn_norm, block.attn.qkv)
    assert calls.rows == []
    torch.testing.assert_close(apart, block.attn.qkv(block.attn_norm(x)))


def a_narrowed_head_takes_the_final_norm(device: str) -> None:
    """One token's logits through a narrowed head are one call of the op, the final norm in
    it, equal to the full head's columns after the norm; with the norms apart the head's own
    product runs; a layer with a bias never takes the op for its residual sum."""
    from lab.engine.llm import LM, LMConfig, call_head

    cfg = LMConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                   intermediate_size=48, max_seq_len=16)
    torch.manual_seed(0)
    lm = LM(cfg).to(device).eval()
    lm.norm.weight.data.uniform_(0.5, 1.5)
    x = 10 * torch.randn(1, 1, cfg.dim, device=device)
    with torch.no_grad():
        want = lm.lm_head(lm.norm(x))[..., 8:40]
        lm.narrow_head(8, 40)
        with OpCalls(torch.ops.lab.matvec.default) as calls:
            got = call_head(lm.norm, lm.lm_head, x)
        assert calls.rows == [1] and got.shape == (1, 1, 32)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        lm.fold_norms(False)
        with OpCalls(torch.ops.lab.matvec.default) as calls:
            apart = call_head(lm.norm, lm.lm_head, x)
        assert calls.rows == []
        torch.testing.assert_close(apart, want, rtol=1e-4, atol=1e-4)
        biased, r = torch.nn.Linear(cfg.dim, 8).to(device), torch.randn(1, 1, 8, device=device)
        with OpCalls(torch.ops.lab.matvec.default) as calls:
            y = residual_linear(r, x, biased)
        assert calls.rows == []
        torch.testing.assert_close(y, r + biased(x))


def all_checks(device: str) -> None:
    kernel_matches_the_expression(device)
    glu_matches_the_expression(device)
    int8_weights_are_widened_and_scaled(device)
    one_token_folds_its_norm_compiled_or_not(device)
    a_narrowed_head_takes_the_final_norm(device)
