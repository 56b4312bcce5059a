"""benchmarks/voice_peers.py: its figures from the children's passes, and rows that cannot run."""

import json
import sys

import pytest

from tests.bench.conftest import benchmark_module


@pytest.fixture(scope="module")
def peers():
    with benchmark_module("voice_peers") as module:
        yield module


def child_result(rtfs: list[list[float]], **extra) -> dict:
    """A child's output: passes of (wall s, audio s) with audio 2 s per sentence."""
    return {"load_s": 1.0, "passes": [[(2 * r, 2.0) for r in p] for p in rtfs], **extra}


def test_rtf_is_the_median_over_sentences_and_passes_with_its_range(peers):
    runs = [child_result([[0.1, 0.3]], wer=0.05, dnsmos_ovrl=3.2), child_result([[0.2, 0.4]])]
    row = peers.summary("lab fp32", runs)
    assert row["rtf"] == pytest.approx(0.25)
    assert (row["rtf_min"], row["rtf_max"]) == (pytest.approx(0.1), pytest.approx(0.4))
    assert row["rtf_of_totals"] == pytest.approx(0.25) and row["passes"] == 2
    assert row["wer"] == 0.05 and row["dnsmos_ovrl"] == 3.2


def test_ratios_divide_by_onnxruntime_and_failed_rows_keep_their_reason(peers):
    rows = peers.with_ratio([peers.summary("onnxruntime", [child_result([[0.1]])]),
                             peers.summary("lab fp32", [child_result([[0.05]])]),
                             peers.summary("hibari", [{"error": "not installed"}])])
    assert rows[0]["rtf_vs_onnxruntime"] == 1.0
    assert rows[1]["rtf_vs_onnxruntime"] == pytest.approx(0.5)
    assert rows[2] == {"row": "hibari", "error": "not installed"}


def test_a_peer_that_is_not_installed_is_a_recorded_reason(peers, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "hibari", None)  # import hibari raises ImportError
    out = tmp_path / "row.json"
    peers.child(peers.parse_args(["--child", "hibari", "--result", str(out), "--limit", "1"]))
    saved = json.loads(out.read_text())
    assert saved["row"] == "hibari" and "hibari-tts is not installed" in saved["error"]


def test_the_report_names_its_baseline_and_anomalies(peers, tmp_path):
    rows = peers.with_ratio([peers.summary("onnxruntime", [child_result([[0.1, 0.2]])]),
                             peers.summary("hibari", [{"error": "not installed"}])])
    result = {"meta": {"command": "python benchmarks/voice_peers.py", "threads": 2},
              "baseline": "onnxruntime", "anomalies": ["hibari: not installed"], "rows": rows}
    peers.write(result, tmp_path, "peers")
    md = (tmp_path / "peers.md").read_text()
    assert "Command: `python benchmarks/voice_peers.py`" in md
    assert "- Baseline: onnxruntime" in md and "  - hibari: not installed" in md
    assert "| onnxruntime | 0.15 (0.1-0.2) |" in md
    assert json.loads((tmp_path / "peers.json").read_text())["rows"][0]["pass_rtf"]


def test_first_and_later_passes_are_split_per_child_and_compared(peers):
    """Each child's first pass is cold (new shapes); the later ones are warmed."""
    lab = [child_result([[0.3, 0.3], [0.1, 0.1]]), child_result([[0.5, 0.5], [0.1, 0.1]])]
    rows = peers.with_ratio([peers.summary("onnxruntime", [child_result([[0.2], [0.2]])]),
                             peers.summary("lab fp32", lab)])
    assert rows[1]["first_pass_rtf"] == pytest.approx(0.4)
    assert rows[1]["later_pass_rtf"] == pytest.approx(0.1)
    assert rows[1]["later_vs_onnxruntime"] == pytest.approx(0.5)
    one_pass = peers.summary("lab fp32", [child_result([[0.3]])])
    assert one_pass["later_pass_rtf"] is None
    assert "later_vs_onnxruntime" not in peers.with_ratio([one_pass])[0]
