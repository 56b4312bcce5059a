"""Checks of the SwiGLU kernel, run by `test_swiglu.py` through `tests/kernel_checks.py` (on a GPU,
or on a CPU under Triton's interpreter, where the op runs the kernel on CPU tensors)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lab.engine.swiglu import BLOCK, swiglu
from tests.kernel_checks import OpCalls


def _plain(h: torch.Tensor) -> torch.Tensor:
    gate, up = h.float().chunk(2, dim=-1)
    return F.silu(gate) * up


def kernel_matches_the_expression(device: str) -> None:
    """Widths below and past a block, one row and many, a batch axis, bf16 and fp32; each
    call goes through the op."""
    for shape, dtype in (((1, 2 * 40), torch.bfloat16), ((5, 2 * (BLOCK + 3)), torch.bfloat16),
                         ((2, 3, 2 * 96), torch.float32)):
        h = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[-1]))
        h = (4 * h).to(device, dtype)
        with OpCalls(torch.ops.lab.swiglu.default) as calls:
            got = swiglu(h)
        assert len(calls.rows) == 1 and got.dtype == dtype
        assert got.shape == (*shape[:-1], shape[-1] // 2)
        tolerance = 1e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got.float(), _plain(h), rtol=tolerance, atol=tolerance)
        torch.library.opcheck(torch.ops.lab.swiglu.default, (h.reshape(-1, shape[-1]),))


def a_compiled_mlp_calls_the_op(device: str) -> None:
    """Compiled, a decode step's MLP over two tokens still computes the activation through
    the op, and gives what its eager forward gives (one token's runs in its gate/up kernel,
    `norm_matvec_checks.py`)."""
    from lab.engine.llm import MLP, LMConfig, RMSNorm

    cfg = LMConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                   intermediate_size=48, max_seq_len=16)
    torch.manual_seed(0)
    mlp, norm = MLP(cfg).to(device), RMSNorm(cfg.dim, cfg.norm_eps).to(device)
    x = torch.randn(2, 1, cfg.dim, device=device)
    compiled = torch.compile(mlp, fullgraph=True)
    with torch.no_grad(), OpCalls(torch.ops.lab.swiglu.default) as calls:
        want = mlp(x, norm)
    with torch.no_grad():
        got = compiled(x, norm)
    assert calls.rows == [2]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def all_checks(device: str) -> None:
    kernel_matches_the_expression(device)
    a_compiled_mlp_calls_the_op(device)
