"""Write benchmark rows as JSON (for tools), CSV (for spreadsheets) and Markdown (for people).

Every report carries how it was made, the command line, date, device and library versions,
because a speed number without its machine and software cannot be compared with anything.

JSON and CSV keep every figure (each pass's too). The Markdown table is for reading: a figure
measured over several passes shows as "median (min-max)" in one cell, the per-pass lists are
left to the JSON, and load and warm-up keep their own columns, apart from every timing.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class ReportPaths:
    json: Path
    csv: Path
    markdown: Path


def device_name() -> str:
    """The GPU's name when CUDA is usable, else the CPU with its core count."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    cpu = platform.processor() or platform.machine()
    return f"cpu ({cpu}, {os.cpu_count()} cores)"


def command_line(argv: Sequence[str]) -> str:
    """The command as a reader reruns it: without `--out`, whose folder is the machine's where
    it ran, not the repository's (reports are committed under `benchmarks/results`)."""
    if not argv:
        return ""
    kept, args = program(argv[0]), iter(argv[1:])
    for arg in args:
        if arg == "--out":
            next(args, None)
        elif not arg.startswith("--out="):
            kept.append(arg)
    return shlex.join(kept)


def recorded_args(args: object, *leave: str) -> dict[str, str]:
    """A benchmark's options as its report keeps them: as text, and without `--out` (the
    machine's folder, as in `command_line`) or the flags in `leave`."""
    return {k: str(v) for k, v in vars(args).items() if k not in ("out", *leave)}


def program(arg0: str) -> list[str]:
    """The program as a reader runs it, not as this machine found it: `python -m lab.cli`
    sees its own file's absolute path, and the console script its install's `bin/lab`."""
    path = Path(arg0)
    package = Path(__file__).resolve().parents[1]
    if path.name == "lab" and path.parent.name == "bin":
        return ["lab"]
    if path.is_absolute() and path.suffix == ".py" and path.resolve().is_relative_to(package):
        module = ".".join(path.resolve().relative_to(package.parent).with_suffix("").parts)
        return ["lab"] if module == "lab.cli" else ["python", "-m", module]
    return [arg0]


def run_meta(**extra: object) -> dict:
    """What a report needs to be reproduced; `extra` adds or overrides keys."""
    return {
        "command": command_line(sys.argv),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        **extra,
    }


def as_dicts(rows: Sequence[object]) -> list[dict]:
    """Rows as plain dicts, from dataclasses (BenchRow) or mappings."""
    out = []
    for row in rows:
        if dataclasses.is_dataclass(row) and not isinstance(row, type):
            out.append(dataclasses.asdict(row))
        elif isinstance(row, dict):
            out.append(dict(row))
        else:
            raise ValueError(f"report rows must be dataclasses or dicts, got {type(row).__name__}")
    return out


def columns_of(rows: list[dict]) -> list[str]:
    """Every key, in order of first appearance, so rows with extra keys lose nothing."""
    return list(dict.fromkeys(key for row in rows for key in row))


@dataclass(frozen=True)
class Ranged:
    """A median with the range over passes, as one table cell."""

    median: float
    low: float
    high: float

    def __str__(self) -> str:
        if self.low == self.high:
            return _cell(self.median)
        return f"{_cell(self.median)} ({_cell(self.low)}-{_cell(self.high)})"


PASS_PREFIX = "pass_"


def folded(row: dict) -> dict:
    """A row for reading: `x` with `x_min` and `x_max` becomes one `Ranged` cell under `x`,
    and the per-pass lists are dropped (JSON and CSV keep them)."""
    out = {}
    for key, value in row.items():
        if key.startswith(PASS_PREFIX) or _base(key, row) is not None:
            continue
        low, high = row.get(f"{key}_min"), row.get(f"{key}_max")
        if isinstance(value, (int, float)) and low is not None and high is not None:
            value = Ranged(value, low, high)
        out[key] = value
    return out


def _base(key: str, row: dict) -> str | None:
    """The figure a `*_min`/`*_max` key belongs to, when the row holds it."""
    for suffix in ("_min", "_max"):
        if key.endswith(suffix) and key[: -len(suffix)] in row:
            return key[: -len(suffix)]
    return None


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, Ranged):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0 or abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[object], columns: Sequence[str] | None = None) -> str:
    """A Markdown table; numbers right-aligned and rounded for reading, not for analysis."""
    data = as_dicts(rows)
    cols = list(columns) if columns is not None else columns_of(data)
    if not cols:
        return "_no rows_\n"
    numeric = [
        all(isinstance(r.get(c), (int, float, Ranged)) or r.get(c) is None for r in data)
        for c in cols
    ]
    lines = [
        "| " + " | ".join(cols) + " |",
        "| " + " | ".join("---:" if num else "---" for num in numeric) + " |",
    ]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in data]
    return "\n".join(lines) + "\n"


def anomaly_lines(result: dict) -> list[str]:
    """A results header's anomalies: a bullet with one sub-bullet each, or "none seen", so a
    reader never mistakes a run with no remarks for one nobody looked at."""
    anomalies = result.get("anomalies") or []
    return ["- Anomalies:" + (" none seen" if not anomalies else ""),
            *(f"  - {a}" for a in anomalies)]


def to_json(value: object, pad: str = "", in_list: bool = False) -> str:
    """Indented JSON in which a record (a dict of plain values inside a list) and a list of
    numbers each take one line: a load test's thousands of per-request records then stay one
    per line to read and diff, at a third of the bytes of one field per line."""
    inner = pad + "  "
    if isinstance(value, dict) and value and not (in_list and _flat(value.values())):
        items = (f"{inner}{json.dumps(str(k))}: {to_json(v, inner)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)) and value and not _numbers(value):
        items = (inner + to_json(v, inner, in_list=True) for v in value)
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value, default=str)


def _flat(values: Iterable[object]) -> bool:
    return not any(isinstance(v, (dict, list, tuple)) for v in values)


def _numbers(values: Iterable[object]) -> bool:
    return all(v is None or isinstance(v, (int, float)) for v in values)


def write_json(result: dict, out: Path, stem: str) -> None:
    """`<stem>.json` under `out`, the source a `--render` rewrites the markdown from."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(to_json(result) + "\n")


def save_report(report: dict, out: Path, stem: str, render: Callable[[dict], str]) -> str:
    """`<stem>.json` and the markdown `render` makes of it under `out`; returns the markdown
    (for a script that prints its reports through one function)."""
    write_json(report, out, stem)
    markdown = render(report)
    (out / f"{stem}.md").write_text(markdown)
    return markdown


def _check_stem(stem: str) -> None:
    if not stem or stem != Path(stem).name or stem in (".", ".."):
        raise ValueError(f"report stem {stem!r} must be a plain file name without folders")


def write_report(
    rows: Sequence[object],
    out_dir: str | Path,
    stem: str,
    meta: dict | None = None,
    title: str | None = None,
) -> ReportPaths:
    """Write `<stem>.json`, `<stem>.csv` and `<stem>.md` under `out_dir`.

    `meta` is merged over `run_meta()`, so callers add what they know (preset, text set)
    and the command line, date, device and versions are always there.
    """
    _check_stem(stem)
    data = as_dicts(rows)
    info = {**run_meta(), **(meta or {})}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(out / f"{stem}.json", out / f"{stem}.csv", out / f"{stem}.md")
    paths.json.write_text(json.dumps({"meta": info, "rows": data}, indent=2, default=str) + "\n")
    _write_csv(paths.csv, data)
    paths.markdown.write_text(_markdown(title or stem, info, data))
    return paths


def _write_csv(path: Path, data: list[dict]) -> None:
    cols = columns_of(data)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=cols, restval="")
        writer.writeheader()
        writer.writerows({k: _csv_value(v) for k, v in row.items()} for row in data)


def _csv_value(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return value


SPREAD_NOTE = ("Cells with a range read median (min-max) over the passes. load_ms and "
               "warmup_ms are one-time costs of building the pipeline (warm-up includes any "
               "compile), outside every timing; threads is the pinned intra-op thread count.")


def _markdown(title: str, info: dict, data: list[dict]) -> str:
    meta_lines = [f"- **{key}**: `{value}`" for key, value in info.items()]
    rows = [folded(row) for row in data]
    note = [SPREAD_NOTE, ""] if any(isinstance(v, Ranged) for r in rows for v in r.values()) \
        else []
    return "\n".join([f"# {title}", "", *meta_lines, "", markdown_table(rows), *note])
