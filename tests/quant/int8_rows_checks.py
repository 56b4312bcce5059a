"""Checks of the int8 rows kernel, run by `test_int8_rows.py` through `tests/kernel_checks.py` (on
a GPU, or on a CPU under Triton's interpreter, where the op runs the kernel on CPU tensors)."""

from __future__ import annotations

import torch

from lab.quant import int8_rows
from tests.kernel_checks import OpCalls


def _operands(rows: int, n: int, k: int, device: str, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(rows * 7 + n)
    x = torch.randn(rows, k, generator=gen).to(device, dtype)
    qdata = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8).to(device)
    scale = (torch.rand(n, 1, generator=gen) / 100 + 1e-3).to(device)
    return x, qdata, scale


def kernel_matches_reference(device: str) -> None:
    """Row counts below, at and past a row tile, widths past a column tile (32, from `WIDE`
    outputs 64 and from `WIDEST` 128 wide), and depths that do not divide the kernel's depth
    tile; bf16 and fp16 activations."""
    wide, widest = int8_rows.WIDE + 40, int8_rows.WIDEST + 40
    for rows, n, k, dtype in ((2, 40, 64, torch.bfloat16), (17, 100, 200, torch.bfloat16),
                              (64, 96, 256, torch.float16), (70, 33, 130, torch.bfloat16),
                              (3, wide, 96, torch.bfloat16), (3, widest, 96, torch.bfloat16)):
        x, qdata, scale = _operands(rows, n, k, device, dtype)
        got = int8_rows.int8_rows_mm(x, qdata, scale)
        want = int8_rows.int8_rows_reference(x, qdata, scale)
        assert got.dtype == dtype and got.shape == (rows, n)
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def a_row_slice_of_the_weight_reads_its_own_rows(device: str) -> None:
    """A narrowed head hands the kernel a view of rows [start, stop) of a larger weight."""
    x, qdata, scale = _operands(8, 120, 96, device)
    got = int8_rows.int8_rows_mm(x, qdata[30:90], scale[30:90])
    want = int8_rows.int8_rows_reference(x, qdata, scale)[:, 30:90]
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def split_inputs_add_up_to_the_product(device: str) -> None:
    """Programs sharing a tile's blocks of inputs two or four ways (`launch`'s split), a last
    block past the inputs included, give the unsplit product."""
    for rows, n, k in ((5, 40, 256), (33, 70, 200)):
        x, qdata, scale = _operands(rows, n, k, device)
        want = int8_rows.int8_rows_reference(x, qdata, scale)
        for split in (2, 4):
            got = int8_rows.launch(x, qdata, scale, (32, 32, 64, 4, 3), split)
            assert got.dtype == torch.bfloat16 and got.shape == (rows, n)
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def kernel_matches_reference_everywhere(device: str) -> None:
    kernel_matches_reference(device)
    split_inputs_add_up_to_the_product(device)
    a_row_slice_of_the_weight_reads_its_own_rows(device)


def _lm_against_torchao(device: str, batch: int, length: int, op, per_layer: int) -> None:
    """Quantized with int8-weight, a bf16 LM sends `per_layer` linears a block (and the
    narrowed head, if all four) of a step of `batch` x `length` tokens through `op`, and its
    logits stay those of torchao's own path with the norms apart, compiled or not."""
    from lab.engine import load_lm
    from lab.quant import apply_precision

    lm, cfg = load_lm("dummy", shape="tiny-llama", seed=3)
    apply_precision(lm, "bf16", "int8-weight", device)
    lm.narrow_head(10, 200)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vocab_size, (batch, length), generator=gen).to(device)
    positions = torch.arange(length, device=device).expand(batch, length)
    with torch.no_grad(), OpCalls(op) as calls:
        got = lm(tokens, positions)
    with torch.no_grad():
        compiled = torch.compile(lm, fullgraph=True)(tokens, positions)
    assert len(calls.rows) == per_layer * cfg.n_layers + (per_layer == 4), calls.rows
    assert set(calls.rows) == {batch * length}, calls.rows
    torch.testing.assert_close(compiled, got, rtol=2e-2, atol=2e-2)
    for layer in lm.modules():
        if isinstance(layer, int8_rows.Int8RowsLinear):
            layer.__class__ = torch.nn.Linear
    lm.fold_norms(False)
    lm.lm_head.forward = lambda x, head=lm.lm_head: torch.nn.functional.linear(x, head.rows)
    with torch.no_grad():
        want = lm(tokens, positions)
    rel = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert rel < 2e-2, rel


def an_int8_lm_runs_its_rows_through_the_kernels(device: str) -> None:
    """Every linear of a batched step through the rows kernel; a single token's q/k/v and
    gate/up, with the norm before them, through the one-row kernels (gate/up's with its
    activation)."""
    _lm_against_torchao(device, 3, 5, torch.ops.lab.int8_rows_mm.default, 4)
    _lm_against_torchao(device, 1, 1, torch.ops.lab.matvec.default, 1)
    _lm_against_torchao(device, 1, 1, torch.ops.lab.glu_matvec.default, 1)
