"""The Live tab counts user requests apart from benchmark runs and breaks its lines at gaps."""

from __future__ import annotations

import time

import pytest

from lab.bench.sweep import Sweep, runner_measure
from lab.metrics.events import BENCHMARK, USER, events
from lab.ui import charts, live_tab
from lab.ui.context import LabContext
from lab.ui.pipelines import PipelineCache


def _request(t: float, total_ms: float, source: str | None = USER, ttfb_ms: float = 10.0):
    event = {"time": t, "kind": "synthesis", "total_ms": total_ms, "ttfb_ms": ttfb_ms}
    return event if source is None else {**event, "source": source}


def test_the_summary_counts_user_requests_and_names_benchmark_runs_apart():
    now = time.time()
    recent = [_request(now - 9, 100.0), _request(now - 8, 120.0, source=None),
              *[_request(now - 5 + i * 0.1, 5000.0, BENCHMARK) for i in range(5)]]
    text = live_tab.request_summary(recent)
    assert "**2 user requests**" in text and "p50 110 ms" in text and "p95 119 ms" in text
    assert "Benchmark traffic: **5 requests**" in text and "not counted above" in text
    only_bench = live_tab.request_summary(recent[2:])
    assert only_bench.startswith("No user requests") and "5 requests" in only_bench
    assert "Benchmark" not in live_tab.request_summary(recent[:2])


def test_the_chart_draws_benchmark_runs_as_their_own_series():
    now = time.time()
    recent = [_request(now - 9, 100.0), *[_request(now - 5 + i, 900.0, BENCHMARK)
                                          for i in range(3)]]
    fig = charts.request_latency(recent)
    traces = {t.name: [y for y in t.y if y is not None] for t in fig.data}
    assert traces == {"total ms": [100.0], "TTFB ms": [10.0],
                      "benchmark requests, total ms": [900.0, 900.0, 900.0]}


def test_lines_break_across_idle_gaps_but_not_within_a_burst():
    # Two bursts of back-to-back 1 s requests, 60 s apart: one break, in between.
    burst = [100.0, 101.0, 102.0]
    rows = [_request(t, 1000.0) for t in (*burst, *(b + 60 for b in burst))]
    times, values = charts.gapped(rows, ("total_ms",), gap_s=5.0, start="total_ms")
    assert values["total_ms"] == [1000.0] * 3 + [None] + [1000.0] * 3
    assert times[2] < times[3] < times[4]
    fig = charts.request_latency(rows, gap_s=5.0)
    assert list(fig.data[0].y).count(None) == 1 and not fig.data[0].connectgaps
    # A 4 s request that starts 2 s after the last one ended is not across a gap,
    # even though the two ends are 6 s apart.
    long = [_request(100.0, 500.0), _request(106.0, 4000.0)]
    assert None not in charts.gapped(long, ("total_ms",), 5.0, start="total_ms")[1]["total_ms"]


def test_telemetry_lines_break_where_samples_stop():
    samples = [{"time": t, "cpu_percent": 10.0, "ram_used_mb": 1.0}
               for t in (0.0, 1.0, 2.0, 30.0, 31.0)]
    fig = charts.telemetry(samples, has_gpu=False, gap_s=3.0)
    assert [list(t.y).count(None) for t in fig.data] == [1, 1]


@pytest.fixture
def ctx(tmp_path, voice_pipeline):
    return LabContext(tmp_path, cache=PipelineCache(factory=lambda *_: voice_pipeline))


def test_a_sweep_is_not_counted_as_user_requests(ctx, voice_pipeline):
    events.clear()
    measure = runner_measure(lambda cfg: voice_pipeline, warmup=1)
    Sweep("batch_size", [1, 2], voice_pipeline.config, ["One.", "Two."], measure).run(bar=False)
    _, _, summary, fig = live_tab.refresh(ctx)
    assert summary.startswith("No user requests") and "Benchmark traffic: **7 requests**" in summary
    voice_pipeline.synthesize("A person asks for this one.")
    _, _, summary, fig = live_tab.refresh(ctx)
    assert "**1 user request**" in summary and "7 requests" in summary
    names = [t.name for t in fig.data]
    assert names == ["total ms", "TTFB ms", "benchmark requests, total ms"]
