"""The Serve tab's plumbing without a browser or a model: what it reads off `/metrics`, the
sweep it accepts, how fast Cancel ends a point, what it refuses before any socket or load,
and its wiring into the app's shared knob state."""

from __future__ import annotations

import asyncio
import inspect
import socket
import threading
import time
from dataclasses import replace

import gradio as gr
import pytest

from lab.bench.host_work import clock_of_values
from lab.bench.load_report import RequestRecord, summarize
from lab.bench.loadtest import SpeechTarget
from lab.bench.loopback import NotLoopback
from lab.metrics.telemetry import TelemetrySampler
from lab.models.backend import EngineQueue
from lab.serve.admission import Admission
from lab.serve.metrics import ServerMetrics
from lab.ui import serve_tab
from lab.ui.serving import (
    Recent,
    Serving,
    SinceLastLook,
    Target,
    base_url,
    highlights,
    metric_samples,
    snippets,
)
from lab.worker import WorkerLoad


def test_metrics_highlights_read_the_servers_gauges():
    metrics = ServerMetrics(Admission(slots=4, queue=16, retry_after_s=1), TelemetrySampler())
    for status in (200, 200, 429):
        metrics.count(status)
    line = highlights(metrics.exposition().decode())
    assert "active slots **0 / 4**" in line and "queue depth **0**" in line
    assert "requests by status: 200: 2, 429: 1" in line and "no GPU on the server" in line
    assert "held back in the engine" not in line  # no engine queue to read
    assert "does not report the lab's gauges" in highlights("# a server that is not the lab's\n")
    queued = ServerMetrics(Admission(slots=4, queue=16, retry_after_s=1), TelemetrySampler(),
                           lambda: EngineQueue(waiting=3, held_steps=12, round_s=0.0071))
    line = highlights(queued.exposition().decode())
    assert "held back in the engine **3** (admission gate shut on 12 steps)" in line
    assert "engine round 7.1 ms" in line
    assert "serving thread" not in line  # nothing to compare with yet


def test_the_serving_threads_busy_share_and_codec_lag_run_between_two_looks():
    """Busy seconds per second of wall clock, and lag seconds per codec window, between two
    reads of the counters, per server; nothing at a server's first look, or when its counters
    went back (a new server)."""
    now = [100.0]
    since = SinceLastLook(clock=lambda: now[0])

    def look(url, host_s, windows=0.0, lag_s=0.0):
        return since.update(url, {"lab_worker_busy_seconds_total": host_s,
                                  "lab_codec_windows_total": windows,
                                  "lab_codec_lag_seconds_total": lag_s})

    assert look("http://a", 4.0, 100, 0.5) == Recent()
    now[0] = 102.0
    assert look("http://a", 5.5, 300, 2.5) == Recent(pytest.approx(0.75), pytest.approx(10.0))
    assert look("http://b", 1.0) == Recent()  # another server starts afresh
    now[0] = 103.0
    assert look("http://a", 0.2, 10, 0.1) == Recent()  # went back: a new server on that URL
    now[0] = 104.0
    assert since.update("http://a", {}) == Recent()  # a server without the counters
    load = ServerMetrics(Admission(slots=4, queue=16, retry_after_s=1), TelemetrySampler(),
                         lambda: EngineQueue(waiting=0, held_steps=0, device_wait_s=0.5),
                         lambda: WorkerLoad(rounds=10, busy_s=2.0))
    exposition = load.exposition().decode()
    host = clock_of_values(metric_samples(exposition)[0]).host_s
    assert host == pytest.approx(1.5)  # less the device wait
    assert clock_of_values({}) is None  # a server that is not the lab's
    line = highlights(exposition, Recent(0.75, 9.04))
    assert "serving thread on host work **75%** since the last look" in line
    assert "codec windows back **9.0 ms** after launch" in line


@pytest.mark.parametrize(("concurrency", "rates", "sets", "error"), [
    ("", "", ["short"], "give concurrency levels, arrival rates, or both"),
    ("1, x", "", ["short"], "concurrency must be comma-separated numbers above 0"),
    ("0", "", ["short"], "concurrency must be"),
    ("", "1, -2", ["short"], "arrival rates must be"),
    ("1", "", [], "pick at least one sentence set"),
    ("1", "", ["nonsense"], "sentence set 'nonsense' not found"),
])
def test_a_sweep_is_checked_before_any_request(concurrency, rates, sets, error):
    with pytest.raises(ValueError, match=error):
        serve_tab.make_plan(concurrency, rates, 10, 30, sets)


@pytest.mark.parametrize("processes", [0, 65])
def test_sending_processes_are_checked_before_any_request(processes):
    with pytest.raises(ValueError, match=r"sending processes must lie in \[1, 64\]"):
        serve_tab.make_plan("1", "", 10, 30, ["short"], processes)


def test_each_point_runs_alone_and_only_the_first_warms_up():
    plan = serve_tab.make_plan("1, 2", "0.5", 3, 30, ["short"])
    assert plan.points() == [("closed", 1), ("closed", 2), ("open", 0.5)]
    cut = [serve_tab.one_point(plan, shape, level, i == 0)
           for i, (shape, level) in enumerate(plan.points())]
    assert [p.points() for p in cut] == [[("closed", 1)], [("closed", 2)], [("open", 0.5)]]
    assert [p.warmup for p in cut] == [serve_tab.WARMUP, 0, 0]


def test_a_sweeps_report_names_the_load_as_one_lab_loadtest_command(tmp_path):
    """So a sweep made in the app reruns from a shell, the same load against the same URL."""
    plan = serve_tab.make_plan("1, 2", "0.5", 3, 30, ["short"])
    target = SpeechTarget("http://127.0.0.1:8123/v1/audio/speech", "cpu-default", "default",
                          "pcm", 22050, 60.0)
    log = serve_tab.SweepLog.under(tmp_path, target, plan)
    assert log.meta["command"] == (
        "lab loadtest http://127.0.0.1:8123/v1/audio/speech --concurrency 1,2 --rates 0.5 "
        f"--requests 3 --duration 30 --timeout 60 --warmup {serve_tab.WARMUP} --texts short "
        "--seed 0 --processes 1 --format pcm --sample-rate 22050 --model cpu-default "
        "--voice default "
        f"--stem {log.json_path.stem}")


def test_cancel_ends_a_point_at_once_and_closes_its_requests():
    cancel, closed = threading.Event(), []

    async def point():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            closed.append(True)
            raise

    threading.Timer(0.1, cancel.set).start()
    began = time.monotonic()
    assert serve_tab.run_until(point(), cancel) is None
    assert closed and time.monotonic() - began < 2


def test_only_this_machine_is_attached_to():
    assert base_url(" http://localhost:8000/v1/audio/speech?x=1 ") == "http://localhost:8000"
    serving = Serving()
    for url in ("http://10.0.0.1:8000", "http://127.1:8000", "localhost:8000"):
        with pytest.raises(NotLoopback):
            serving.attach(url)
    assert serving.current is None


def test_a_port_in_use_is_refused_before_anything_loads():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=f"cannot listen on 127.0.0.1:{port}"):
            Serving().start(port, None, pipeline=lambda: pytest.fail("nothing may load"))


def test_snippets_call_the_running_server():
    target = Target("http://127.0.0.1:8123", "cpu-default", "default", {})
    curl, python = snippets(target)
    assert curl.startswith("curl -N http://127.0.0.1:8123/v1/audio/speech ")
    assert '"model": "cpu-default", "voice": "default"' in curl
    assert 'base_url="http://127.0.0.1:8123/v1"' in python and 'voice="default"' in python
    compile(python, "snippet", "exec")


def test_the_serve_tab_shares_the_knobs_and_tracks_progress(built_app):
    (copy,) = built_app.handlers("synth-batch-size", "input")
    assert built_app.component("serve-batch-size") in copy.outputs
    for elem_id in ("serve-start", "serve-go"):
        (handler,) = built_app.handlers(elem_id, "click")
        defaults = [p.default for p in inspect.signature(handler.fn).parameters.values()]
        assert any(isinstance(d, gr.Progress) and d.track_tqdm for d in defaults), elem_id


def test_the_capacity_line_says_where_the_serving_thread_set_the_pace():
    records = [RequestRecord(shape="open", load=4.0, chars=40, due_s=0.0, lag_s=0.001,
                             ttfa_s=0.1, latency_s=2.0, audio_s=1.0, bytes=44100, reads=3,
                             margin_s=0.2, error=None)] * 2
    row = summarize(records, "open", 4.0, wall_s=1.0)
    assert "host work" not in serve_tab.capacity_text([replace(row, host_busy=0.4)])
    text = serve_tab.capacity_text([replace(row, host_busy=0.9, round_ms=7.5)])
    assert text.startswith("**Capacity so far:** open:")
    assert "host work nearly all the time at 4/s (90%, 7.5 ms rounds)" in text


def test_the_capacity_line_says_what_a_full_server_finished():
    records = [RequestRecord(shape="open", load=4.0, chars=40, due_s=0.0, lag_s=0.001,
                             ttfa_s=0.1, latency_s=2.0, audio_s=1.0, bytes=44100, reads=3,
                             margin_s=0.2, error=None)] * 2
    row = summarize(records, "open", 4.0, wall_s=1.0)
    assert "Full, the server" not in serve_tab.capacity_text([row])
    text = serve_tab.capacity_text([replace(row, full=(3.0, 12.0, 4.2, 3.1))])
    assert "at 4/s, for 12.0 s from 3.0 s it finished 3.1 a second while 4.2 arrived" in text


def test_the_capacity_line_says_where_the_server_slowed_its_streams_apart_from_full():
    records = [RequestRecord(shape="open", load=4.0, chars=40, due_s=0.0, lag_s=0.001,
                             ttfa_s=0.1, latency_s=2.0, audio_s=1.0, bytes=44100, reads=3,
                             margin_s=-0.2, error=None, tightest_s=3.0)] * 2
    row = summarize(records, "open", 4.0, wall_s=1.0)
    text = serve_tab.capacity_text([replace(row, full=(3.0, 12.0, 4.2, 3.1))])
    assert "Slowed, streams ran dry 1 s or more after their first audio: at 4/s 2 of 2" in text
    assert "room for bursts.\n\nSlowed" in text  # one remark a paragraph
