"""benchmarks/linear_kernels.py: every kernel at every row count, beside the unquantized
layers, in one table; the tile sweep times a lab kernel with each configuration and puts the
code's back."""

from __future__ import annotations

import pytest
from conftest import benchmark_module

from lab.quant import int4_rows, int8_rows


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("linear_kernels") as module:
        yield module


def _args(bench, tmp_path, *extra: str):
    return bench.parse_args(["--device", "cpu", "--shape", "tiny-llama", "--layers", "1",
                             "--rows", "1", "3", "--repeats", "2", "--dtype", "fp32",
                             "--out", str(tmp_path), *extra])


def test_a_cpu_smoke_times_every_kernel_at_every_row_count(bench, tmp_path):
    report = bench.run(_args(bench, tmp_path))
    rows = {(r["kernel"], r["rows"]): r for r in report["rows"]}
    assert set(rows) == {(k, n) for k in bench.KERNELS for n in (1, 3)}
    assert all("error" not in r and r["ms"] > 0 and r["rel_err"] < 0.02 for r in rows.values())
    assert rows["none", 3]["x_float"] == 1.0
    assert rows["int4-weight", 1]["applied"] == "int8-weight"  # tinygemm needs CUDA
    assert rows["int8-weight", 1]["mb_read"] < rows["none", 1]["mb_read"] / 3


def test_the_tile_sweep_adds_each_kernels_grid_where_it_runs(bench, tmp_path):
    todo = bench.jobs(_args(bench, tmp_path, "--tiles", "int8-weight", "int4-weight"))
    for kernel, taken in (("int8-weight", {3}), ("int4-weight", {1, 3})):
        grid = 1
        for values in bench.TILE_SWEEPS[kernel][1].values():
            grid *= len(values)
        swept = [job for job in todo if job[1] is not None and job[0] == kernel]
        assert len(swept) == grid * len(taken) and {rows for _, _, rows in swept} == taken
    assert not [job for job in bench.jobs(_args(bench, tmp_path)) if job[1] is not None]


@pytest.mark.parametrize(("kernel", "module", "config", "want"), [
    ("int8-weight", int8_rows, (64, 128, 8, 3), (64, 64, 128, 8, 3)),
    ("int4-weight", int4_rows, (16, 8, 2), (64, 16, 8, 2)),
])
def test_fixed_tiles_keep_the_row_tile_and_put_the_codes_choice_back(bench, kernel, module,
                                                                     config, want):
    chosen, least = module.tiles, module.MIN_ROWS
    with bench.tiles_fixed(kernel, config):
        assert module.tiles(40, 3072) == want and module.MIN_ROWS == 1
    assert module.tiles is chosen and module.MIN_ROWS == least
