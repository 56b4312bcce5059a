"""benchmarks/serve_load.py's baseline rows: the preset's pipeline in the benchmark's process,
timed as the load generator times a request over HTTP, on the real default voice."""

from __future__ import annotations

import pytest
from conftest import benchmark_module

from lab.bench.load_report import summarize
from lab.bench.loadtest import LoadPlan
from lab.config import load_preset
from lab.pipeline import Pipeline


@pytest.fixture(scope="module")
def serve_load():
    with benchmark_module("serve_load") as module:
        yield module


def test_in_process_arrivals_keep_their_times_so_the_middle_half_is_measured(serve_load):
    plan = LoadPlan(concurrency=(), rates=(3.0,), requests=8, duration_s=3.0, texts=("short",),
                    seed=0, warmup=0)
    pipe = Pipeline(load_preset("cpu-default"))
    try:
        records, wall_s = serve_load._open_in_process(pipe, plan, 3.0)
    finally:
        pipe.close()
    dues = [r.due_s for r in records]
    assert len(records) == 8 and all(r.error is None for r in records)
    assert min(dues) >= 0 and max(dues) > 1.0 and len(set(dues)) == len(dues)
    row = summarize(records, "in-process open", 3.0, wall_s)
    assert row.mid_streams is not None and row.mid_streams > 0
    assert row.mid_ttfa_p95_ms is not None and row.mid_ttfa_p95_ms > 0
