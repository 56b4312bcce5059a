import csv
import json

import pytest

from lab.bench.report import markdown_table, run_meta, write_report
from lab.bench.runner import BenchRow

ROW = BenchRow(
    config="piper-vits:default fp32 cpu",
    batch_size=4,
    n_texts=8,
    repeats=1,
    wall_s=1.23456,
    audio_s=12.5,
    rtf=0.098765,
    audio_s_per_s=10.125,
    latency_p50_ms=250.0,
    latency_p95_ms=410.55,
    ttfb_p50_ms=None,
    ttfb_p95_ms=None,
    peak_memory_mb=512.0,
)


def test_writes_json_csv_markdown_with_meta(tmp_path):
    extra = {"value": 2, "axis": "batch_size", "note": "a|b"}
    paths = write_report([ROW, extra], tmp_path / "out", "bench", {"preset": "piper-cpu"})
    data = json.loads(paths.json.read_text())
    assert {"command", "date", "device", "torch", "python"} <= set(data["meta"])
    assert data["meta"]["preset"] == "piper-cpu"
    assert data["rows"][0] == ROW.to_dict() and data["rows"][1] == extra

    with paths.csv.open() as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["batch_size"] == "4" and rows[0]["ttfb_p50_ms"] == ""
    assert rows[1]["axis"] == "batch_size" and rows[1]["config"] == ""
    assert list(rows[0])[:3] == ["config", "batch_size", "n_texts"]

    md = paths.markdown.read_text()
    assert md.startswith("# bench\n")
    assert "- **preset**: `piper-cpu`" in md
    assert "| config | batch_size | n_texts |" in md
    assert "| piper-vits:default fp32 cpu | 4 | 8 | 1 | 1.23 | 12.50 | 0.0988 |" in md
    assert "a\\|b" in md


def test_markdown_alignment_and_empty():
    table = markdown_table([{"name": "x", "ms": 1.5}, {"name": "y", "ms": None}])
    assert table.splitlines()[1] == "| --- | ---: |"
    assert table.splitlines()[3] == "| y |  |"
    assert markdown_table([]) == "_no rows_\n"


def test_meta_override_and_bad_input(tmp_path):
    assert run_meta(device="H100")["device"] == "H100"
    with pytest.raises(ValueError, match="plain file name"):
        write_report([ROW], tmp_path, "../escape", {})
    with pytest.raises(ValueError, match="dataclasses or dicts"):
        write_report([("tuple",)], tmp_path, "bad", {})
    assert list(tmp_path.iterdir()) == []
