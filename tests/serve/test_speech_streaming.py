"""OpenAI's own client streams speech from the server, and the audio is the pipeline's own."""

from __future__ import annotations

import base64
import io
import json
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
from openai import OpenAI

from lab.bench.loadtest import server_timing
from tests.serve.conftest import LONG, MODEL, SHORT, pcm_of, running, speech

WAV_HEADER = 44


@pytest.fixture(scope="module")
def server(serve_pipeline):
    with running(serve_pipeline, slots=2, queue=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(serve_pipeline) -> dict[str, np.ndarray]:
    """The pipeline's own rendering of each text (same config, same seeds)."""
    return {text: pcm_of(serve_pipeline.synthesize(text).audio) for text in (SHORT, LONG)}


def test_openai_client_streams_chunks_equal_to_the_pipeline(server, reference):
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    arrivals, parts = [], []
    start = time.perf_counter()
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="default", input=LONG, response_format="wav") as response:
        assert response.headers["content-type"] == "audio/wav"
        for part in response.iter_bytes():
            arrivals.append(time.perf_counter() - start)
            parts.append(part)
    assert len(parts) >= 3, "the audio came in one piece, not streamed"
    assert arrivals[-1] - arrivals[0] > 0.1, "every chunk arrived at once"
    data = b"".join(parts)
    audio, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == server.app.state.served.pipeline.sample_rate
    np.testing.assert_array_equal(np.frombuffer(data[WAV_HEADER:], "<i2"), reference[LONG])
    np.testing.assert_array_equal(audio, reference[LONG])


def test_pcm_is_the_same_samples_without_a_header(server, reference):
    with httpx.stream("POST", f"{server.url}/v1/audio/speech",
                      json=speech(response_format="pcm")) as response:
        assert response.status_code == 200
        assert response.headers["x-sample-rate"] == "22050"
        data = response.read()
    np.testing.assert_array_equal(np.frombuffer(data, "<i2"), reference[SHORT])


def test_server_timing_splits_the_time_to_first_audio(server):
    start = time.perf_counter()
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=speech()) as response:
        assert response.status_code == 200
        next(response.iter_raw())
        ttfa_ms = (time.perf_counter() - start) * 1e3
        parts = server_timing(response.headers["server-timing"])
    assert list(parts) == ["queue", "first-audio", "engine"]
    assert 0 <= parts["queue"] < 50, "a free slot was taken at once"
    # The pipeline's clock starts once the request reaches it, after its slot was taken, and
    # stops when the chunk leaves its worker, before the server's loop picks it up.
    assert 0 < parts["engine"] <= parts["first-audio"] + 1
    assert parts["queue"] + parts["first-audio"] <= ttfa_ms


def test_flac_is_whole_and_lossless_at_16_bits(server, reference):
    response = httpx.post(f"{server.url}/v1/audio/speech", json=speech(response_format="flac"),
                          timeout=60)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/flac"
    audio, _ = sf.read(io.BytesIO(response.content), dtype="int16")
    np.testing.assert_array_equal(audio, reference[SHORT])


def test_sse_sends_base64_chunks_as_events(server, reference):
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech",
                      json=speech(input=LONG, stream_format="sse")) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 3 and events[-1]["type"] == "speech.audio.done"
    data = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    np.testing.assert_array_equal(np.frombuffer(data[WAV_HEADER:], "<i2"), reference[LONG])


def test_models_health_and_ready(server):
    models = httpx.get(f"{server.url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL, "piper-vits"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{server.url}/ready").json()
    assert ready["ready"] and ready["voices"] == ["default"] and ready["startup_ms"]["load_ms"] > 0
