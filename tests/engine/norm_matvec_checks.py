"""Checks of the norm + one-row projection kernel, run by `test_norm_matvec.py` through
`tests/kernels.py` (on a GPU, or on a CPU under Triton's interpreter)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from lab.engine.norm_matvec import TILES, launch, normed_linear
from tests.kernels import OpCalls


def _plain(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The norm and the product in float64, nothing rounded between them."""
    x, g, w = x.double(), g.double(), w.double()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g) @ w.T


def kernel_matches_the_expression(device: str) -> None:
    """Outputs and columns below, at and past a tile, every tile shape the probe may pick, in
    bf16 and fp32, through the op; a row far from unit scale, as residual streams are."""
    gen = torch.Generator().manual_seed(0)
    for n, k in ((5, 40), (TILES.rows * 3, TILES.cols), (37, TILES.cols + 72)):
        x = 30 * torch.randn(k, generator=gen)
        g = 1 + torch.rand(k, generator=gen)
        w = torch.randn(n, k, generator=gen) / k ** 0.5
        want = _plain(x, g, w, 1e-5)
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
            xs, gs, ws = (t.to(device, dtype) for t in (x, g, w))
            got = torch.ops.lab.norm_matvec(xs[None], gs, ws, 1e-5)
            assert got.shape == (1, n) and got.dtype == dtype
            torch.testing.assert_close(got[0].double().cpu(), want, rtol=tol, atol=tol)
            for tiles in (dataclasses.replace(TILES, rows=1, cols=32),
                          dataclasses.replace(TILES, rows=16, cols=64, warps=2, stages=1)):
                torch.testing.assert_close(launch(xs, gs, ws, 1e-5, tiles).double().cpu(),
                                           want, rtol=tol, atol=tol)
        torch.library.opcheck(torch.ops.lab.norm_matvec.default,
                              (x[None].to(device), g.to(device), w.to(device), 1e-5))


def one_token_folds_its_norm_compiled_or_not(device: str) -> None:
    """A block's MLP on one token computes its norm and gate/up product through the op, as
    the plain modules would, and compiled gives what eager gives; two tokens, or a norm told
    not to fold, take the norm and the linear apart."""
    from lab.engine.llm import Block, LMConfig

    cfg = LMConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                   intermediate_size=48, max_seq_len=16)
    torch.manual_seed(0)
    block = Block(cfg).to(device)
    block.mlp_norm.weight.data.uniform_(0.5, 1.5)
    mlp, norm = block.mlp, block.mlp_norm
    x = 10 * torch.randn(1, 1, cfg.dim, device=device)
    with torch.no_grad(), OpCalls(torch.ops.lab.norm_matvec.default) as calls:
        folded = mlp(x, norm)
        gate, up = mlp.gate_up(norm(x)).chunk(2, dim=-1)
        want = mlp.down(F.silu(gate) * up)
    assert calls.rows == [1]
    torch.testing.assert_close(folded, want, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        got = torch.compile(mlp, fullgraph=True)(x, norm)
    torch.testing.assert_close(got, folded, rtol=1e-5, atol=1e-5)
    with torch.no_grad(), OpCalls(torch.ops.lab.norm_matvec.default) as calls:
        two = normed_linear(x.expand(2, 1, -1), block.attn_norm, block.attn.qkv)
    assert calls.rows == []
    torch.testing.assert_close(two[:1], normed_linear(x, block.attn_norm, block.attn.qkv),
                               rtol=1e-4, atol=1e-4)
    block.attn_norm.folds = False  # as `LM.fold_norms(False)` sets it
    with torch.no_grad(), OpCalls(torch.ops.lab.norm_matvec.default) as calls:
        apart = normed_linear(x, block.attn_norm, block.attn.qkv)
    assert calls.rows == []
    torch.testing.assert_close(apart, block.attn.qkv(block.attn_norm(x)))


def all_checks(device: str) -> None:
    kernel_matches_the_expression(device)
    one_token_folds_its_norm_compiled_or_not(device)
