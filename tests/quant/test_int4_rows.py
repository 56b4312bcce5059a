"""Int4 weight-only products of many rows run through the lab's kernel on a plain copy of
torchao's int4 values, which stand for exactly the weights torchao quantized."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lab.quant import int4_rows, triton_site
from tests.kernel_checks import run_check

CHECKS = Path(__file__).with_name("int4_rows_checks.py")


def test_the_kernel_matches_the_float_product_of_its_int4_weights():
    """On a GPU here, on a CPU under Triton's interpreter (`tests/kernel_checks.py`)."""
    run_check(CHECKS, "kernel_matches_reference")


def test_the_widest_layers_tiles_and_splits_compute_the_same_product():
    run_check(CHECKS, "widest_layers_take_their_own_tiles_and_split")


def _torchao_int4(n: int, k: int, group: int = 128):
    """torchao's own int4 values, scale and zero (tinygemm's scheme, its CPU primitives) of a
    random bf16 weight, and the weight they dequantize to."""
    from torchao.quantization import quant_primitives as qp

    w = torch.randn(n, k, generator=torch.Generator().manual_seed(n)).to(torch.bfloat16)
    block = (1, group)
    scale, zero = qp._choose_qparams_affine_tinygemm(
        w, qp.MappingType.ASYMMETRIC, block, torch.int32, 0, 15, scale_dtype=torch.bfloat16,
        zero_point_dtype=torch.bfloat16)
    q = qp._quantize_affine_tinygemm(w, block, scale, zero, torch.int32, 0, 15)
    dense = qp._dequantize_affine_tinygemm(q, block, scale, zero, torch.int32, 0, 15,
                                           output_dtype=torch.bfloat16)
    return q, scale.reshape(n, -1).T, zero.reshape(n, -1).T, dense


def test_the_plain_copy_holds_the_values_torchao_chose():
    q, scale, zero, dense = _torchao_int4(48, 512)
    plain = int4_rows.from_dequantized(dense, scale, zero)
    assert plain.group == 128 and plain.packed.dtype == torch.uint8
    assert torch.equal(plain.packed, int4_rows.pack(q, scale, zero).packed)
    # torchao rounds to bf16 between its steps, the copy once: the same weights to a bf16 step
    torch.testing.assert_close(plain.dequantize().to(torch.bfloat16), dense, rtol=8e-3, atol=4e-3)


def test_a_weight_that_is_not_those_int4_values_is_refused():
    _, scale, zero, dense = _torchao_int4(16, 256)
    with pytest.raises(ValueError, match="do not reproduce the weight"):
        int4_rows.from_dequantized(dense + 0.3 * scale.float().T.repeat_interleave(128, 1).to(
            torch.bfloat16), scale, zero)
    with pytest.raises(ValueError, match="values 0..15"):
        int4_rows.pack(torch.full((2, 4), 16), scale[:, :2], zero[:, :2])


@pytest.mark.parametrize(("rows", "dtype", "interpreted", "taken"), [
    (1, torch.bfloat16, True, False),      # one row: tinygemm
    (7, torch.bfloat16, True, False),      # tinygemm, faster below 8 rows
    (8, torch.bfloat16, True, True),
    (64, torch.bfloat16, True, True),
    (64, torch.float16, True, False),      # tinygemm's int4 path is bf16 only
    (64, torch.bfloat16, False, False),    # a CPU without the interpreter
])
def test_the_kernel_takes_many_rows_of_bf16(rows, dtype, interpreted, taken, monkeypatch):
    monkeypatch.setattr(triton_site, "INTERPRETED", interpreted)
    assert int4_rows.takes(torch.zeros(rows, 128, dtype=dtype)) == taken


def test_tiles_come_through_descriptors_only_from_aligned_rows(monkeypatch):
    """The TMA unit copies tiles from 16-byte aligned bases and rows: a view one bf16 into
    its storage, or rows of 4 bf16 (8 bytes), load through pointers instead; and only on the
    interpreter or a device that has the unit (a CPU without the interpreter has none)."""
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    monkeypatch.setattr(triton_site, "INTERPRETED", True)
    assert triton_site.copies_tiles(x, x[:, :128])
    assert not triton_site.copies_tiles(x.flatten()[1:1 + 255 * 4].view(4, 255))
    assert not triton_site.copies_tiles(torch.zeros(4, 4, dtype=torch.bfloat16))
    monkeypatch.setattr(triton_site, "INTERPRETED", False)
    assert not triton_site.copies_tiles(x)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="torchao's int4 layout (tinygemm) exists on CUDA only")
def test_a_quantized_lm_sends_its_batched_rows_through_the_kernel():
    run_check(CHECKS, "an_int4_lm_runs_its_rows_through_the_kernel")


@pytest.mark.parametrize(("rows", "n", "groups", "want"), [
    (64, 5120, 24, 4),    # q, k and v: 80 column tiles
    (64, 3072, 24, 8),    # attention output: 48 tiles
    (64, 3072, 64, 8),    # down
    (128, 3072, 64, 4),   # two row tiles
    (16, 16384, 24, 3),   # gate and up at 16 rows: 128 tiles of 128 columns
    (32, 16384, 24, 2),   # gate and up: 256 tiles; two ways pass three waves, yet gain
    (64, 16384, 24, 2),
    (128, 16384, 24, 1),  # two row tiles of 128 columns
])
def test_few_output_tiles_split_their_groups(rows, n, groups, want):
    """Orpheus-3B's linears on an H100's 132 processors: within three waves, but the widest
    layers two ways from 17 to 64 rows."""
    block_m, block_n = int4_rows.tiles(rows, n)[:2]
    tiles = -(-rows // block_m) * -(-n // block_n)
    assert int4_rows.split_for(rows, n, tiles, groups, 132) == want


@pytest.mark.parametrize(("rows", "n", "want"), [
    (8, 5120, (16, 64, 4, 3)),
    (16, 3072, (16, 64, 4, 3)),
    (16, int4_rows.DEEP, (16, 128, 4, 3)),  # gate and up: 128 wide
    (17, 5120, (32, 64, 4, 3)),
    (32, int4_rows.DEEP, (32, 64, 4, 3)),
    (33, 3072, (64, 64, 4, 3)),
    (64, int4_rows.DEEP, (64, 64, 4, 2)),   # and split two ways
    (65, int4_rows.DEEP, (64, 128, 8, 3)),
    (128, 5120, (64, 64, 4, 3)),
])
def test_tiles_are_about_as_tall_as_the_rows(rows, n, want):
    """A 64-row tile over 16 rows spends three quarters of its dots on padding."""
    assert int4_rows.tiles(rows, n) == want
