"""The MLP's SwiGLU runs as one kernel that a compiled step calls (checks in
`swiglu_checks.py`; without a GPU they run under Triton's interpreter, see
`tests/kernel_checks.py`), and as the plain expression where a gradient is needed."""

from pathlib import Path

import torch
import torch.nn.functional as F

from lab.engine import swiglu as swiglu_module
from lab.quant import triton_site
from tests.kernel_checks import OpCalls, run_check

CHECKS = Path(__file__).with_name("swiglu_checks.py")


def test_the_kernel_matches_the_expression_and_a_compiled_mlp_calls_it():
    run_check(CHECKS, "all_checks")


def test_training_takes_the_plain_expression_and_its_gradient(monkeypatch):
    monkeypatch.setattr(triton_site, "INTERPRETED", True)
    h = torch.randn(3, 8, requires_grad=True)
    with OpCalls(torch.ops.lab.swiglu.default) as calls:
        y = swiglu_module.swiglu(h)
    y.sum().backward()
    gate, up = h.detach().chunk(2, dim=-1)
    assert calls.rows == []
    torch.testing.assert_close(y.detach(), F.silu(gate) * up)
    assert h.grad is not None and h.grad.abs().sum() > 0


def test_without_a_kernel_it_is_the_plain_expression(monkeypatch):
    monkeypatch.setattr(triton_site, "INTERPRETED", False)
    h = torch.randn(2, 5, 6)
    with torch.no_grad(), OpCalls(torch.ops.lab.swiglu.default) as calls:
        y = swiglu_module.swiglu(h)
    gate, up = h.chunk(2, dim=-1)
    assert calls.rows == []
    torch.testing.assert_close(y, F.silu(gate) * up)
