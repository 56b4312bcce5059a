"""Tables a person can read: named headers and numbers at a sensible precision.

Results keep their machine names (`latency_p50_ms`) in reports and CSV files; only what the
browser shows is renamed and formatted, through a pandas Styler, so a column still sorts by
its numbers while it displays "1,234". Gradio sizes each column to its content and scrolls
the table sideways in a narrow window, so headers in words stay on one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
from pandas.io.formats.style import Styler

MISSING = "–"


@dataclass(frozen=True)
class Column:
    """How one result column is shown: its header and the format of its numbers."""

    header: str
    format: str | None = None
    """A `str.format` pattern for numbers (None: shown as it is)."""


MS = "{:,.0f}"
RATIO = "{:.3f}"
ONE = "{:,.1f}"
PERCENT = "{:.0%}"
INT = "{:,.0f}"


def headers(keys: Sequence[str], columns: dict[str, Column]) -> list[str]:
    """Readable headers for these keys; a key without a Column is spelled out in words."""
    return [columns[k].header if k in columns else k.replace("_", " ") for k in keys]


def readable(rows: Sequence[dict], columns: dict[str, Column]) -> Styler:
    """The rows as a table of the `columns` they have, in that order, renamed and formatted."""
    frame = pd.DataFrame(list(rows))
    keys = [k for k in columns if k in frame.columns]
    frame = frame[keys] if keys else frame
    formats = {columns[k].header: _formatter(columns[k].format) for k in keys}
    frame.columns = headers(list(frame.columns), columns)
    return frame.style.format(formats, na_rep=MISSING)


def _formatter(pattern: str | None):
    """Format numbers with `pattern`, and show anything else (a name, an error) as it is."""

    def show(value: object) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return MISSING
        if pattern is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        return pattern.format(value)

    return show
