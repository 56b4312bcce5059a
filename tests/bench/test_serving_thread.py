"""benchmarks/serving_thread.py: where the serving thread's rounds go, by function, for the
Orpheus path on a tiny random LM on a CPU."""

from __future__ import annotations

import json

from conftest import benchmark_module


def test_a_cpu_point_times_the_serving_path_per_round_and_writes_its_report(tmp_path):
    with benchmark_module("serving_thread") as bench:
        args = ["--rates", "5", "--duration", "3", "--set", "sampling.max_tokens=70",
                "--out", str(tmp_path), "--stem", "smoke"]
        bench.main(args)
        report = json.loads((tmp_path / "smoke.json").read_text())
        (point,) = report["points"]
        assert point["requests"] > 3 and point["errors"] == 0 and point["rounds"] > 50
        assert point["round_ms"] >= point["host_ms_per_round"] > 0
        rows = {r["function"]: r for r in report["functions"]}
        # every round runs the engine's step once; requests start and end a few times
        assert rows["Worker._run_shared"]["calls_per_round"] == 1.0
        assert 0.5 < rows["LLMEngine.step"]["calls_per_round"] <= 1.0
        assert rows["TokenTTS.step"]["ms_per_round"] >= rows["LLMEngine.step"]["ms_per_round"]
        assert 0 < rows["Pipeline._finish"]["calls_per_round"] < 0.5
        assert "LatentCodec.decode" not in rows  # a function the family never reaches
        markdown = (tmp_path / "smoke.md").read_text()
        assert "## 5 arrivals a second" in markdown and "| 5.00 | SnacCodec.decode |" in markdown
        report["notes"] = ["a hand-written remark"]
        (tmp_path / "smoke.json").write_text(json.dumps(report))
        bench.main([*args, "--render"])
    assert "- a hand-written remark" in (tmp_path / "smoke.md").read_text()
