"""Int8 weight-only products of two rows or more run through the lab's kernel, which equals
the float product of the same int8 weights; one row and other devices keep torchao's path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lab.engine import load_lm
from lab.quant import apply_precision, int8_rows, triton_site
from tests.kernels import run_check

CHECKS = Path(__file__).with_name("int8_rows_checks.py")


def test_the_kernel_matches_the_float_product_of_its_int8_weights():
    """On a GPU here, on a CPU under Triton's interpreter (`tests/kernels.py`)."""
    run_check(CHECKS, "kernel_matches_reference_everywhere")


def test_a_quantized_lm_sends_its_batched_rows_and_its_normed_single_tokens_to_the_kernels():
    run_check(CHECKS, "an_int8_lm_runs_its_rows_through_the_kernels")


@pytest.mark.parametrize(("rows", "block_m"), [(1, 16), (2, 16), (16, 16), (17, 32), (64, 64),
                                             (200, 64)])
def test_row_tiles_are_as_tall_as_the_rows_within_what_the_dot_takes(rows, block_m):
    assert int8_rows.tiles(rows, 3072) == (block_m, 32, 256, 4, 4)


@pytest.mark.parametrize(("n", "block_n", "stages"), [(3072, 32, 4), (4095, 32, 4), (4096, 64, 3),
                                                     (16383, 64, 3), (16384, 128, 3)])
def test_column_tiles_widen_where_a_layer_has_outputs_enough(n, block_n, stages):
    """Wider layers have programs enough for wider tiles, and fewer stages keep each tile's
    buffers within shared memory (128 columns at 4 stages asked for 288 KiB on an H200)."""
    assert int8_rows.tiles(64, n)[1::3] == (block_n, stages)


def _quantized(quant: str, dtype: str = "bf16"):
    lm, cfg = load_lm("dummy", shape="tiny-llama", seed=5)
    apply_precision(lm, dtype, quant, "cpu")
    return lm, cfg


def test_int8_weight_routes_every_quantized_linear_and_keeps_its_weight():
    lm, _ = _quantized("int8-weight")
    routed = [m for m in lm.modules() if isinstance(m, int8_rows.Int8RowsLinear)]
    assert len(routed) == 4 * lm.cfg.n_layers + 1  # qkv, o, gate_up, down per block; the head
    assert all(type(m.weight).__name__ == "Int8Tensor" for m in routed)


@pytest.mark.parametrize(("quant", "dtype", "rows", "interpreted"), [
    ("int8-weight", "bf16", 1, True),     # one row: lab.quant.matvec or torchao's path
    ("int8-weight", "fp32", 4, True),     # float32 rows: torchao's path
    ("int8-dynamic", "bf16", 4, True),    # int8 activations: not weight-only
    ("int8-weight", "bf16", 4, False),    # a CPU without the interpreter
])
def test_the_kernel_takes_only_weight_only_int8_with_two_rows_of_half_floats(
        quant, dtype, rows, interpreted, monkeypatch):
    lm, _ = _quantized(quant, dtype)
    weight = lm.layers[0].attn.qkv.weight
    x = torch.randn(rows, weight.shape[1], dtype=lm.embed.weight.dtype)
    monkeypatch.setattr(triton_site, "INTERPRETED", interpreted)
    assert not int8_rows.takes(x, weight)


def test_two_rows_of_bf16_on_an_int8_weight_are_taken_where_the_kernel_runs(monkeypatch):
    lm, _ = _quantized("int8-weight")
    weight = lm.layers[0].attn.qkv.weight
    monkeypatch.setattr(triton_site, "INTERPRETED", True)
    assert int8_rows.takes(torch.randn(2, weight.shape[1], dtype=torch.bfloat16), weight)
