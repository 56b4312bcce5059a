"""Checks of the int4 rows kernel, run by `test_int4_rows.py` through `tests/kernel_checks.py` (on
a GPU, or on a CPU under Triton's interpreter, where the op runs the kernel on CPU tensors)."""

from __future__ import annotations

import torch

from lab.quant import int4_rows
from tests.kernel_checks import OpCalls


def _plain(n: int, k: int, group: int, device: str) -> int4_rows.PlainInt4:
    gen = torch.Generator().manual_seed(n * 3 + k)
    q = torch.randint(0, 16, (n, k), generator=gen)
    scale = torch.rand(k // group, n, generator=gen) / 50 + 1e-3
    zero = torch.randn(k // group, n, generator=gen) / 20
    plain = int4_rows.pack(q, scale.to(torch.bfloat16), zero.to(torch.bfloat16))
    return int4_rows.PlainInt4(*(t.to(device) for t in (plain.packed, plain.scale, plain.zero)))


def kernel_matches_reference(device: str) -> None:
    """One row (tinygemm's case, which the kernel also computes), row counts below, at and
    past a row tile, widths that do not fill a column tile, groups of 128 and 64; the tiles
    loaded through pointers and through tensor descriptors alike."""
    for rows, n, k, group in ((1, 40, 256, 128), (2, 40, 256, 128), (17, 100, 384, 128),
                              (64, 96, 256, 64), (70, 33, 128, 128)):
        plain = _plain(n, k, group, device)
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
        x = x.to(device, torch.bfloat16)
        got = int4_rows.int4_rows_mm(x, plain.packed, plain.scale, plain.zero)
        want = int4_rows.int4_rows_reference(x, plain)
        assert got.dtype == torch.bfloat16 and got.shape == (rows, n)
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        torch.library.opcheck(int4_rows.int4_rows_mm,
                              (x, plain.packed, plain.scale, plain.zero))
        for copied in (False, True):  # tiles loaded through pointers, and through descriptors
            got = int4_rows.launch(x, plain, copied=copied)
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def widest_layers_take_their_own_tiles_and_split(device: str) -> None:
    """The branches for layers of `DEEP` outputs or more (two-way splits from 17 to 64 rows,
    2 stages at 33 to 64, 128-wide tiles past 64), on a layer made to count as one."""
    deep = int4_rows.DEEP
    int4_rows.DEEP = 256
    plain = _plain(256, 512, 128, device)
    try:
        for rows, tiles in ((17, (32, 64, 4, 3)), (40, (64, 64, 4, 2)), (70, (64, 128, 8, 3))):
            assert int4_rows.tiles(rows, 256) == tiles
            x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(rows))
            x = x.to(device, torch.bfloat16)
            got = int4_rows.launch(x, plain)
            want = int4_rows.int4_rows_reference(x, plain)
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    finally:
        int4_rows.DEEP = deep


def an_int4_lm_runs_its_rows_through_the_kernel(device: str) -> None:
    """Quantized with int4-weight (tinygemm's layout: CUDA only), a bf16 LM gives every
    quantized linear a plain copy, sends 20 rows through the kernel and 5 through tinygemm,
    and its logits stay those of tinygemm's path."""
    from lab.engine.llm import LM, LMConfig
    from lab.quant import apply_precision

    cfg = LMConfig(vocab_size=320, dim=128, n_layers=2, n_heads=4, n_kv_heads=2,
                   intermediate_size=256, max_seq_len=64)
    torch.manual_seed(3)
    lm = LM(cfg).eval()
    report = apply_precision(lm, "bf16", "int4-weight", device)
    assert report.applied == "int4-weight", report
    routed = [m for m in lm.modules() if isinstance(m, int4_rows.Int4RowsLinear)]
    assert len(routed) == 4 * cfg.n_layers + 1  # and the head
    tokens = torch.randint(0, cfg.vocab_size, (4, 5), generator=torch.Generator().manual_seed(1))
    tokens, positions = tokens.to(device), torch.arange(5, device=device).expand(4, 5)
    with torch.no_grad(), OpCalls(torch.ops.lab.int4_rows_mm.default) as calls:
        got = lm(tokens, positions)
        lm(tokens[:1], positions[:1])  # 5 rows: tinygemm
    assert calls.rows == [20] * len(routed), calls.rows
    for layer in routed:
        layer.__class__ = torch.nn.Linear
    with torch.no_grad():
        want = lm(tokens, positions)
    rel = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert rel < 2e-2, rel
