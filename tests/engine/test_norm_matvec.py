"""A single token's RMSNorm and the projection after it run as one kernel (checks in
`norm_matvec_checks.py`; without a GPU they run under Triton's interpreter, see
`tests/kernel_checks.py`); elsewhere, and where a gradient is needed, as the two modules."""

from pathlib import Path

import torch

from lab.engine.llm import Block, LMConfig
from lab.engine.norm_matvec import normed_linear
from lab.quant import triton_site
from tests.kernel_checks import OpCalls, run_check

CHECKS = Path(__file__).with_name("norm_matvec_checks.py")
CFG = LMConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
               intermediate_size=48, max_seq_len=16)


def test_the_kernel_matches_the_expression_and_one_token_folds_its_norm():
    run_check(CHECKS, "all_checks")


def test_training_and_a_cpu_without_kernels_take_the_two_modules(monkeypatch):
    block = Block(CFG)
    x = torch.randn(1, 1, CFG.dim)
    for interpreted, grad in ((True, True), (False, False)):
        monkeypatch.setattr(triton_site, "INTERPRETED", interpreted)
        with torch.set_grad_enabled(grad), OpCalls(torch.ops.lab.matvec.default) as calls:
            y = normed_linear(x, block.attn_norm, block.attn.qkv)
        assert calls.rows == []
        torch.testing.assert_close(y, block.attn.qkv(block.attn_norm(x)))
