"""benchmarks/codec_windows.py: each build of the SNAC codec decodes the same windows, timed
beside the eager one, with its difference from the eager codec in fp32."""

from __future__ import annotations

import json

from conftest import benchmark_module


def test_a_cpu_smoke_times_each_build_at_each_shape_and_writes_its_report(tmp_path):
    with benchmark_module("codec_windows") as bench:
        bench.main(["--device", "cpu", "--dtype", "fp32", "--batches", "1", "2",
                    "--frames", "3", "--repeats", "1", "--variants", "eager",
                    "compiled", "--out", str(tmp_path), "--stem", "smoke"])
    report = json.loads((tmp_path / "smoke.json").read_text())
    rows = {(r["variant"], r["batch"]): r for r in report["rows"]}
    assert set(rows) == {(v, b) for v in ("eager", "compiled") for b in (1, 2)}
    assert all(r["ms"] > 0 and r["frames"] == 3 and r["err"] < 1e-4 for r in rows.values())
    assert rows["eager", 2]["x_eager"] == 1.0 and rows["eager", 2]["err"] == 0.0
    assert "| compiled | 2 | 3 |" in (tmp_path / "smoke.md").read_text()
