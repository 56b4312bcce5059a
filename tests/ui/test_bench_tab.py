"""What the Benchmark tab shows: a table with named headers and formatted numbers, log-log
charts with readable ticks, and no exponent fitted to fewer than four input lengths."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go
import pytest

from lab.bench.complexity import MIN_POINTS
from lab.ui import bench_tab, charts, tables

ROWS = [
    {"axis": "batch_size", "value": 1, "config": "piper-vits:default fp32 cpu stream/24",
     "latency_p50_ms": 1646.4321, "latency_p95_ms": 1700.0, "ttfb_p50_ms": 667.25,
     "rtf": 0.70234, "audio_s_per_s": 1.42411, "peak_memory_mb": 1463.9, "fallbacks": "",
     "batch_size": 1, "wall_s": 1.6},
    {"axis": "batch_size", "value": 2, "error": "RuntimeError: out of memory"},
]


def _display(styler) -> list[list[str]]:
    """The cell text the browser shows, as Gradio computes it from a Styler."""
    data = gr.Dataframe(interactive=False).postprocess(styler)
    return data.metadata["display_value"]


def test_the_sweep_table_has_named_headers_and_readable_numbers():
    styled = bench_tab.table(ROWS, "batch_size")
    headers = list(styled.data.columns)
    assert headers[:3] == ["Batch size", "Config (as run)", "Latency p50 (ms)"]
    assert "Error" in headers and "wall_s" not in headers and "Wall s" not in headers
    assert not [h for h in headers if "_" in h]
    shown = dict(zip(headers, _display(styled)[0], strict=True))
    assert shown["Latency p50 (ms)"] == "1,646" and shown["TTFB p50 (ms)"] == "667"
    assert shown["RTF"] == "0.702" and shown["Audio s per s"] == "1.4"
    assert shown["Peak memory (MB)"] == "1,464" and shown["Error"] == tables.MISSING
    failed = dict(zip(headers, _display(styled)[1], strict=True))
    assert failed["Latency p50 (ms)"] == tables.MISSING
    assert failed["Error"] == "RuntimeError: out of memory"
    assert bench_tab.table(ROWS).data.columns[0] == "Batch size", "the axis comes from the rows"


def test_unknown_columns_are_spelled_in_words():
    assert tables.headers(["n_chars", "new_metric_ms"], bench_tab.COLUMNS) == [
        "Characters", "new metric ms"]


def _length_rows(lengths: list[int], k: float = 1.0) -> list[dict]:
    return [{"value": n, "n_chars": n - 0.5, "latency_p50_ms": 3.0 * (n - 0.5)**k}
            for n in lengths]


@pytest.mark.parametrize("lengths", [[40], [40, 80], [40, 80, 160]])
def test_no_exponent_on_fewer_than_four_lengths(lengths):
    fig = charts.latency_vs_length(_length_rows(lengths))
    assert [t.name for t in fig.data] == ["measured p50"]
    title = fig.layout.title.text
    assert "no exponent fitted" in title and f"at least {MIN_POINTS}" in title
    assert "R²" not in title and "k =" not in title


def test_four_lengths_get_a_fit_with_readable_log_ticks():
    fig = charts.latency_vs_length(_length_rows([40, 80, 160, 320], k=1.5))
    assert "exponent k = 1.50" in fig.layout.title.text
    assert "R² 1.00, 4 lengths" in fig.data[1].name
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.ticktext) == [
        "39.5", "79.5", "160", "320"]
    y_ticks = list(fig.layout.yaxis.ticktext)
    assert y_ticks == ["1,000", "2,000", "5,000", "10,000"]


@pytest.mark.parametrize(("values", "expected"), [
    ([52.0, 58.0], ["50", "60"]),
    ([0.4, 3.0], ["0.5", "1", "2"]),
    ([120.0, 2900.0], ["200", "500", "1,000", "2,000"]),
    ([1.0, 1e6], ["1", "10", "100", "1,000", "10,000", "100,000", "1,000,000"]),
])
def test_log_ticks_are_round_numbers_written_out(values, expected):
    ticks = charts._log_ticks(values)
    assert list(ticks["ticktext"]) == expected
    low, high = (10**edge for edge in ticks["range"])
    assert all(low <= t <= high for t in ticks["tickvals"]), "a tick off the axis"


def test_every_sweep_axis_draws_two_charts():
    rows = [{"value": v, "n_chars": 40 * v, "latency_p50_ms": 10.0 * v,
             "latency_p95_ms": 12.0 * v, "ttfb_p50_ms": 5.0, "ttfb_p95_ms": 6.0,
             "audio_s_per_s": 2.0} for v in (1, 2, 4, 8)]
    for axis in ("batch_size", "decode_interval", "input_length", "dtype"):
        figs = charts.sweep_figures(axis, rows)
        assert len(figs) == 2 and all(isinstance(f, go.Figure) for f in figs)
