"""benchmarks/serve_replicas.py against a family with voices of its own and its own sample rate:
the Orpheus path on a tiny random LM, one CPU replica behind a real local Ray cluster.

The benchmark asks the cluster's `/ready` for the voice and the sample rate it serves, so its
requests are not refused for the voice and its audio seconds are counted at the served rate."""

from __future__ import annotations

import json

import pytest
from conftest import benchmark_module

PRESET = "orpheus-tiny-cpu"
SERVED_RATE = 24000  # SNAC's rate, not the default voice's 22,050
PCM_BYTES = 2  # 16-bit mono


@pytest.fixture(scope="module")
def serve_replicas():
    with benchmark_module("serve_replicas") as module:
        yield module


def test_a_family_with_voices_is_measured_at_its_own_rate_closed_and_open_loop(
        serve_replicas, tmp_path):
    serve_replicas.main(["--preset", PRESET, "--set", "sampling.max_tokens=70",
                         "--replicas", "1", "--concurrency", "1", "--rates", "2",
                         "--requests", "2", "--duration", "60", "--warmup", "1",
                         "--texts", "short", "--out", str(tmp_path), "--stem", "r"])
    result = json.loads((tmp_path / "r.json").read_text())
    assert [(row["shape"], row["load"]) for row in result["rows"]] == [("closed", 1),
                                                                      ("open", 2.0)]
    for row in result["rows"]:
        assert row["ok"] == row["requests"] == 2 and row["errors"] == "0"
        assert row["throughput_ratio"] == 1.0  # its own baseline: the first replica count
    for record in result["requests"]:
        assert record["error"] is None and record["bytes"] > 0
        assert record["audio_s"] == pytest.approx(record["bytes"] / PCM_BYTES / SERVED_RATE)
    report = (tmp_path / "r.md").read_text()
    assert "closed loop at 1 concurrent; Poisson arrivals at 2 a second" in report
    assert "| closed | 1 |" in report and "| open | 2" in report


def test_a_run_whose_warm_up_all_fails_says_so_instead_of_writing_an_empty_table(
        serve_replicas, tmp_path, monkeypatch):
    """A cluster that refuses every warm-up request (here: a model name it does not serve)
    must stop the run with the reason, not leave a report with no rows."""
    target = serve_replicas.SpeechTarget
    monkeypatch.setattr(serve_replicas, "SpeechTarget",
                        lambda url, model, *rest: target(url, "no-such-model", *rest))
    with pytest.raises(RuntimeError, match="nothing was measured"):
        serve_replicas.main(["--preset", PRESET, "--set", "sampling.max_tokens=70",
                             "--replicas", "1", "--concurrency", "1", "--requests", "1",
                             "--warmup", "1", "--texts", "short",
                             "--out", str(tmp_path), "--stem", "r"])
    assert not (tmp_path / "r.json").exists()
