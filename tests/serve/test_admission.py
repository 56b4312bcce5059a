"""Overload gets 429 with Retry-After, a client that leaves frees its slot, a deadline cuts a
stream off, and the server serves on after each."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from lab.bench.load_report import QUEUED_MS
from lab.bench.loadtest import server_timing
from lab.config import load_preset
from lab.pipeline import Pipeline
from tests.serve.conftest import HOLD, metric, running, speech

HELD = "One moment, please."
"""A sentence the tiny random Orpheus LM speaks for 150 steps (its end token comes late)."""


@pytest.fixture(scope="module")
def server(serve_pipeline):
    with running(serve_pipeline, slots=1, queue=1) as srv:
        yield srv


def wait_for(read, want, timeout: float = 20.0):
    """Poll `read()` until it returns `want`; the last value either way."""
    end = time.monotonic() + timeout
    while (value := read()) != want and time.monotonic() < end:
        time.sleep(0.05)
    return value


class Listener:
    """A streaming request whose first chunk has arrived, so it holds its slot until `leave`.

    It keeps its chunk iterator: dropping one closes the connection, which is a disconnect.
    """

    def __init__(self, url: str, body: dict) -> None:
        self.client = httpx.Client(timeout=60)
        request = self.client.build_request("POST", f"{url}/v1/audio/speech", json=body)
        self.response = self.client.send(request, stream=True)
        assert self.response.status_code == 200
        self.chunks = self.response.iter_raw()
        next(self.chunks)

    def leave(self) -> None:
        self.response.close()
        self.client.close()


class Queued:
    """A request waiting in the queue behind a `Listener` that holds the only slot; `answer`
    once the listener has left."""

    def __init__(self, url: str) -> None:
        self.holder = Listener(url, speech(input=HOLD))
        self._answers: list[httpx.Response] = []
        self._waiter = threading.Thread(target=lambda: self._answers.append(
            httpx.post(f"{url}/v1/audio/speech", json=speech(), timeout=60)))
        self._waiter.start()
        assert wait_for(lambda: metric(url, "lab_queue_depth"), 1) == 1

    def answer(self) -> httpx.Response:
        self.holder.leave()
        self._waiter.join(60)
        return self._answers[0]


def test_a_full_queue_gets_429_with_retry_after(server):
    url = server.url
    queued = Queued(url)
    refused = httpx.post(f"{url}/v1/audio/speech", json=speech(), timeout=60)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["type"] == "overloaded_error" and error["code"] == "queue_full"
    answer = queued.answer()
    assert answer.status_code == 200 and len(answer.content) > 1000
    assert wait_for(lambda: metric(url, "lab_active_slots"), 0) == 0
    assert metric(url, "lab_speech_requests_total", {"status": "429"}) >= 1


def test_a_queued_request_says_how_long_it_waited_for_a_slot(server):
    queued = Queued(server.url)
    time.sleep(0.3)
    waited = server_timing(queued.answer().headers["server-timing"])
    held = server_timing(queued.holder.response.headers["server-timing"])
    assert held["queue"] < 50 and waited["queue"] >= 300
    assert waited["first-audio"] > 0 and waited["engine"] > 0


def test_a_disconnect_frees_its_slot(server):
    url = server.url
    gone_before = metric(url, "lab_speech_requests_total", {"status": "499"}) or 0
    listener = Listener(url, speech(input=HOLD))
    assert metric(url, "lab_active_slots") == 1
    listener.leave()
    assert wait_for(lambda: metric(url, "lab_active_slots"), 0) == 0
    assert metric(url, "lab_speech_requests_total", {"status": "499"}) == gone_before + 1
    assert httpx.post(f"{url}/v1/audio/speech", json=speech(), timeout=60).status_code == 200


def test_a_deadline_ends_the_request_with_its_reason(serve_pipeline):
    with running(serve_pipeline, deadline_s=1.0) as srv:
        with httpx.stream("POST", f"{srv.url}/v1/audio/speech", timeout=60,
                          json=speech(input=HOLD, stream_format="sse")) as response:
            if response.status_code == 503:  # the deadline passed before the first audio
                error = json.loads(response.read())["error"]
            else:
                lines = [line for line in response.iter_lines() if line.startswith("data: ")]
                last = json.loads(lines[-1][len("data: "):])
                assert last["type"] == "error"
                error = last["error"]
        assert error["code"] == "deadline_exceeded" and "1 s" in error["message"]
        assert wait_for(lambda: metric(srv.url, "lab_active_slots"), 0) == 0
        assert metric(srv.url, "lab_speech_requests_total", {"status": "503"}) == 1
        ok = httpx.post(f"{srv.url}/v1/audio/speech", json=speech(), timeout=60)
        assert ok.status_code == 200


def test_a_request_the_engine_kept_out_says_how_long_it_waited_inside_it():
    """Two server slots over an engine whose round ceiling lets in one stream at a time (every
    round is longer than 0.001 ms, so it admits only when idle): the second request takes a
    server slot at once and waits inside the engine until the first one's utterance ends (150
    steps of the tiny random LM under the preset's seed, about 0.4 s), which its `admission`
    part shows and its `queue` part cannot. `lab loadtest` counts such a wait as a full server
    (`lab.bench.load_report.found_full`)."""
    pipeline = Pipeline(load_preset("orpheus-tiny-cpu", admit_round_ms=0.001))
    try:
        with running(pipeline, slots=2, queue=0) as srv:
            holder = Listener(srv.url, speech(input=HELD, voice="tara"))
            waiter = httpx.post(f"{srv.url}/v1/audio/speech", json=speech(voice="tara"),
                                timeout=60)
            held = server_timing(holder.response.headers["server-timing"])
            holder.leave()
            waits = [metric(srv.url, f"lab_engine_admission_wait_seconds_{part}")
                     for part in ("count", "sum")]
    finally:
        pipeline.close()
    waited = server_timing(waiter.headers["server-timing"])
    assert list(waited) == ["queue", "first-audio", "engine", "admission"]
    assert held["admission"] < 50 and waited["queue"] < 50
    assert QUEUED_MS <= waited["admission"] < waited["engine"]
    # /metrics keeps the same waits, one per request, in seconds
    assert waits == [2, pytest.approx((held["admission"] + waited["admission"]) / 1e3, abs=1e-3)]
