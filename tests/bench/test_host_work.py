"""A load point's share of host work on the serving thread, from a server's Prometheus text."""

from __future__ import annotations

import pytest

from lab.bench.host_work import ThreadClock, clock_of_metrics, with_host_work
from lab.bench.load_report import summarize

EXPOSITION = """# HELP lab_worker_rounds_total Rounds
# TYPE lab_worker_rounds_total counter
lab_worker_rounds_total 400.0
# HELP lab_worker_busy_seconds_total Busy
# TYPE lab_worker_busy_seconds_total counter
lab_worker_busy_seconds_total 3.5
# HELP lab_engine_device_wait_seconds_total Waits
# TYPE lab_engine_device_wait_seconds_total counter
lab_engine_device_wait_seconds_total 1.25
# HELP lab_codec_windows_total Windows
# TYPE lab_codec_windows_total counter
lab_codec_windows_total 900.0
# HELP lab_codec_lag_seconds_total Lag
# TYPE lab_codec_lag_seconds_total counter
lab_codec_lag_seconds_total 13.5
"""


def test_the_counters_are_read_from_prometheus_text():
    assert clock_of_metrics(EXPOSITION) == (400, 3.5, 1.25, 900, 13.5)


def test_a_family_without_an_engine_waits_for_no_device():
    text = EXPOSITION.split("# HELP lab_engine")[0]  # nor has it a codec stream
    assert clock_of_metrics(text) == (400, 3.5, 0.0, 0, 0.0)


@pytest.mark.parametrize("text", ["", "# TYPE x counter\nx_total 1\n", "not { prometheus"])
def test_a_server_without_the_counters_gives_no_clock(text):
    assert clock_of_metrics(text) is None


def test_host_work_is_the_busy_time_less_device_waits_over_the_wall():
    row = summarize([], "open", 2.0, wall_s=4.0)
    got = with_host_work(row, ThreadClock(100, 1.0, 0.5, 50, 1.0),
                         ThreadClock(300, 3.0, 1.5, 450, 7.0))
    assert got.host_busy == pytest.approx(0.25)  # (2.0 busy - 1.0 waiting) / 4 s
    assert got.round_ms == pytest.approx(10.0)   # 2.0 s over 200 rounds
    assert got.codec_lag_ms == pytest.approx(15.0)  # 6 s of lag over 400 windows
    busy_throughout = with_host_work(row, ThreadClock(0, 0.0, 0.0), ThreadClock(10, 4.2, 0.0))
    assert busy_throughout.host_busy == 1.0  # booked a moment after the point's clock stopped
    assert busy_throughout.codec_lag_ms is None  # no windows: a family without a codec stream


def test_without_both_readings_the_row_is_left_as_it_was():
    row = summarize([], "open", 2.0, wall_s=4.0)
    assert with_host_work(row, None, ThreadClock(1, 1.0, 0.0)) is row
    assert with_host_work(row, ThreadClock(1, 1.0, 0.0), None) is row
