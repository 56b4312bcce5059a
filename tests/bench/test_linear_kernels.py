"""benchmarks/linear_kernels.py: every kernel at every row count, beside the unquantized
layers, in one table; the tile sweep times the int8 kernel with each configuration and puts
the code's back."""

from __future__ import annotations

import pytest
from conftest import benchmark_module

from lab.quant import int8_rows


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


def test_the_tile_sweep_adds_the_grid_where_the_kernel_runs(bench, tmp_path):
    todo = bench.jobs(_args(bench, tmp_path, "--tiles"))
    grid = 1
    for values in bench.TILE_GRID.values():
        grid *= len(values)
    swept = [job for job in todo if job[1] is not None]
    assert len(swept) == grid and {rows for _, _, rows in swept} == {3}


def test_fixed_tiles_keep_the_row_tile_and_put_the_codes_choice_back(bench):
    chosen = int8_rows.tiles
    with bench.tiles_fixed((64, 128, 8, 3)):
        assert int8_rows.tiles(40, 3072) == (64, 64, 128, 8, 3)
    assert int8_rows.tiles is chosen
