"""Int8 weight-only products of two rows or more run through the lab's kernel, which equals
the float product of the same int8 weights; one row and other devices keep torchao's path."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch

from lab.engine import load_lm
from lab.quant import apply_precision, int8_rows, triton_site
from tests.kernel_checks import run_check

CHECKS = Path(__file__).with_name("int8_rows_checks.py")


def test_the_kernel_matches_the_float_product_of_its_int8_weights():
    """On a GPU here, on a CPU under Triton's interpreter (`tests/kernel_checks.py`)."""
    run_check(CHECKS, "kernel_matches_reference_everywhere")


def test_a_quantized_lm_sends_its_batched_rows_and_its_normed_single_tokens_to_the_kernels():
    run_check(CHECKS, "an_int8_lm_runs_its_rows_through_the_kernels")


@pytest.mark.parametrize(("rows", "block_m"), [(1, 16), (2, 16), (16, 16), (17, 32), (32, 32)])
def test_few_rows_take_deep_tiles_as_tall_as_the_rows(rows, block_m):
    assert int8_rows.tiles(rows, 3072) == (block_m, 32, 256, 4, 4)
    assert int8_rows.tiles(rows, int8_rows.WIDE)[1] == 64


@pytest.mark.parametrize(("n", "block_n"), [(3072, 32), (5120, 32), (16383, 32), (16384, 128)])
def test_many_rows_take_narrow_shallow_tiles_but_the_widest_layers(n, block_n):
    """From 33 rows: 64 rows tall, 128 deep, 3 stages (128 columns at 4 stages asked for 288
    KiB of shared memory on an H200)."""
    for rows in (33, 64, 200):
        assert int8_rows.tiles(rows, n) == (64, block_n, 128, 4, 3)


@pytest.mark.parametrize(("rows", "n", "k", "want"), [
    (64, 5120, 3072, 2),    # q, k and v: 160 tiles, 24 blocks
    (64, 3072, 3072, 4),    # attention output: 96 tiles
    (64, 16384, 3072, 2),   # gate and up: 128 wide tiles
    (64, 3072, 8192, 4),    # down: 64 blocks, three waves
    (128, 3072, 8192, 2),   # two row tiles
    (16, 16384, 3072, 1),   # 256 tiles of 64 columns, 12 deep blocks: 6 each would need 512
    (16, 3072, 8192, 4),
])
def test_inputs_split_in_powers_of_two_within_three_waves(rows, n, k, want):
    """Orpheus-3B's linears on an H100's 132 processors."""
    block_m, block_n, block_k = int8_rows.tiles(rows, n)[:3]
    tiles = -(-rows // block_m) * -(-n // block_n)
    with mock.patch.object(int8_rows, "processors", lambda device: 132):
        assert int8_rows.split_for(tiles, -(-k // block_k), torch.device("cpu")) == want


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
