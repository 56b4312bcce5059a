import argparse
import csv
import dataclasses
import json
from pathlib import Path

import pytest

from lab.bench.report import (
    command_line,
    markdown_table,
    recorded_args,
    run_meta,
    to_json,
    write_report,
)
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


def test_the_recorded_command_leaves_out_the_machine_s_output_folder():
    argv = ["bench.py", "--out", "/root/out", "--stem", "a b", "--out=/tmp/x", "--outline"]
    assert command_line(argv) == "bench.py --stem 'a b' --outline"


def test_the_recorded_command_names_the_program_as_a_reader_runs_it():
    """`python -m lab.cli` puts the module's absolute path in argv[0], which names the machine
    the run was on, not a command anyone can rerun."""
    import lab.bench.loadtest
    import lab.cli

    assert command_line([lab.cli.__file__, "loadtest", "URL"]) == "lab loadtest URL"
    assert command_line([lab.bench.loadtest.__file__, "URL"]) == "python -m lab.bench.loadtest URL"
    assert command_line(["/opt/env/bin/lab", "serve"]) == "lab serve"
    assert command_line(["benchmarks/x.py", "--rates", "1"]) == "benchmarks/x.py --rates 1"


def test_meta_override_and_bad_input(tmp_path):
    assert run_meta(device="H100")["device"] == "H100"
    with pytest.raises(ValueError, match="plain file name"):
        write_report([ROW], tmp_path, "../escape", {})
    with pytest.raises(ValueError, match="dataclasses or dicts"):
        write_report([("tuple",)], tmp_path, "bad", {})
    assert list(tmp_path.iterdir()) == []


SPREAD_ROW = dataclasses.replace(
    ROW,
    batch_size=1,
    n_texts=2,
    repeats=3,
    wall_s=1.25,
    audio_s=10.0,
    rtf=0.125,
    audio_s_per_s=8.0,
    latency_p50_ms=600.0,
    latency_p95_ms=700.0,
    load_ms=900.0,
    warmup_ms=4000.0,
    threads=2,
    wall_s_min=1.2,
    wall_s_max=1.5,
    rtf_min=0.12,
    rtf_max=0.15,
    latency_p50_ms_min=600.0,
    latency_p50_ms_max=600.0,
    pass_wall_s=(1.5, 1.2, 1.25),
    pass_audio_s=(10.0, 10.0, 10.0),
    pass_latency_p50_ms=(600.0, 600.0, 600.0),
)


def test_markdown_folds_each_spread_into_one_cell_and_keeps_load_and_warmup_apart(tmp_path):
    paths = write_report([SPREAD_ROW], tmp_path, "spread")
    md = paths.markdown.read_text()
    header = next(line for line in md.splitlines() if line.startswith("| config"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert {"wall_s", "rtf", "load_ms", "warmup_ms", "threads"} <= set(cols)
    assert not any(c.endswith(("_min", "_max")) or c.startswith("pass_") for c in cols)
    row = next(line for line in md.splitlines() if line.startswith("| piper"))
    cells = dict(zip(cols, (c.strip() for c in row.strip("|").split("|")), strict=True))
    assert cells["wall_s"] == "1.25 (1.20-1.50)"
    assert cells["rtf"] == "0.125 (0.12-0.15)"
    assert cells["latency_p50_ms"] == "600.0"  # no spread to show
    assert cells["load_ms"] == "900.0" and cells["warmup_ms"] == "4000.0"
    assert cells["threads"] == "2"
    assert "median (min-max) over the passes" in md


def test_json_and_csv_keep_every_pass(tmp_path):
    paths = write_report([SPREAD_ROW], tmp_path, "spread")
    data = json.loads(paths.json.read_text())["rows"][0]
    assert data["pass_wall_s"] == [1.5, 1.2, 1.25] and data["wall_s_min"] == 1.2
    with paths.csv.open() as f:
        (row,) = list(csv.DictReader(f))
    assert json.loads(row["pass_wall_s"]) == [1.5, 1.2, 1.25]
    assert row["threads"] == "2" and row["rtf_max"] == "0.15"
    assert "median (min-max)" not in write_report([ROW], tmp_path, "single").markdown.read_text()


def test_json_keeps_each_record_and_number_list_on_one_line():
    result = {"meta": {"command": "python x.py", "plan": {"rates": [4, 8.5]}},
              "notes": ["a note", "another"],
              "requests": [{"shape": "open", "ttfa_s": 0.1, "error": None},
                           {"shape": "closed", "ttfa_s": float("inf"), "error": "http_429"}],
              "empty": [], "nested": [[1, 2], {"a": [3]}]}
    text = to_json(result)
    assert json.loads(text) == result
    lines = text.splitlines()
    assert '    {"shape": "open", "ttfa_s": 0.1, "error": null},' in lines
    assert '      "rates": [4, 8.5]' in lines
    assert '    "a note",' in lines and '  "empty": [],' in lines


def test_a_report_keeps_its_options_as_text_without_the_output_folder():
    args = argparse.Namespace(out=Path("/somewhere/out"), rows=[1, 4], render=False)
    assert recorded_args(args) == {"rows": "[1, 4]", "render": "False"}
    assert recorded_args(args, "render") == {"rows": "[1, 4]"}
