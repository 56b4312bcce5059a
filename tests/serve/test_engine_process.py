"""`lab serve --engine-process`: the pipeline in a child process, the server in this one.

The child loads the default voice from the same preset, so its audio must be the in-process
pipeline's, sample for sample; a request's end, error or cancel crosses the pipe; and a child
that dies fails its requests with a clear error instead of leaving them hanging.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import psutil
import pytest
from openai import OpenAI

from lab.config import load_preset
from lab.frontend.errors import TextError
from lab.serve import LabServer, ServeOptions
from lab.serve.engine_process import EngineProcess, _PipeSink
from lab.serve.errors import EngineGone
from lab.serve.memory_plan import MemoryPlanError
from lab.worker import CancelEvent
from tests.serve.conftest import HOLD, LONG, MODEL, metric, pcm_of, speech


def engine(**options) -> EngineProcess:
    return EngineProcess(load_preset(MODEL), ServeOptions(model_name=MODEL, **options))


@pytest.fixture(scope="module")
def child():
    process = engine(slots=2, queue=2)
    yield process
    process.close()


@pytest.fixture(scope="module")
def server(child):
    srv = LabServer(child, child.options, log_level="warning").start()
    yield srv
    srv.stop(timeout=30)


def until(condition, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def settles(read, timeout_s: float = 20.0, hold_s: float = 0.6) -> bool:
    """Whether `read()` gives the same value twice, `hold_s` apart, within the timeout (the
    child reports its state four times a second)."""
    end, last = time.monotonic() + timeout_s, read()
    while time.monotonic() < end:
        time.sleep(hold_s)
        now = read()
        if now == last:
            return True
        last = now
    return False


def test_the_child_reports_what_it_loaded(child, serve_pipeline):
    assert child.sample_rate == serve_pipeline.sample_rate
    assert child.family.name == serve_pipeline.family.name
    assert child.options.slots == 2 and child.startup["load_ms"] > 0


def test_openai_client_streams_the_childs_audio_equal_to_the_pipeline(server, serve_pipeline):
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    parts = []
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="default", input=LONG, response_format="pcm") as response:
        parts = list(response.iter_bytes())
    assert len(parts) >= 3, "the audio came in one piece, not streamed"
    np.testing.assert_array_equal(np.frombuffer(b"".join(parts), "<i2"),
                                  pcm_of(serve_pipeline.synthesize(LONG).audio))


def test_an_error_in_the_child_arrives_as_its_own_type(child):
    async def read():
        async for _ in child.astream("   "):
            pass
    with pytest.raises(TextError, match="whitespace"):
        asyncio.run(read())


def test_the_childs_sink_hands_rounds_over_without_waiting_for_the_pipe():
    """Rounds of audio far past what a pipe holds: the worker's calls return while nobody
    reads, and the parent, once it reads, gets every round in order."""
    parent, child = multiprocessing.Pipe()
    sink = _PipeSink(child, threading.Lock(), {})
    audio = np.zeros(1 << 20, np.float32)  # 4 MB a round
    worker = threading.Thread(target=lambda: [sink([(i, audio)]) for i in range(3)])
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the sink waited for the pipe to be read"
    rounds = [parent.recv() for _ in range(3)]
    assert [(kind, pairs[0][0]) for kind, pairs in rounds] == [("items", i) for i in range(3)]
    assert rounds[2][1][0][1].nbytes == audio.nbytes
    sink.close()


def test_a_cancel_stops_the_job_in_the_child(child):
    async def first_then_cancel():
        cancel = CancelEvent()
        stream = child.astream(HOLD, cancel)
        await anext(stream)
        cancel.set()
        with pytest.raises(Exception, match="cancelled"):
            async for _ in stream:
                pass
    asyncio.run(first_then_cancel())
    assert settles(lambda: child.worker_load().rounds), \
        "the child's worker kept running the cancelled job"


def test_a_disconnect_frees_the_slot_and_the_server_serves_on(server):
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=speech(input=HOLD),
                      timeout=60) as response:
        next(response.iter_bytes())
    assert until(lambda: metric(server.url, "lab_active_slots") == 0)
    response = httpx.post(f"{server.url}/v1/audio/speech", json=speech(), timeout=60)
    assert response.status_code == 200 and len(response.content) > 1000


def test_a_killed_child_fails_requests_with_503_and_none_hangs():
    process = engine(slots=2, queue=2)
    srv = LabServer(process, process.options, log_level="warning").start()
    try:
        with httpx.stream("POST", f"{srv.url}/v1/audio/speech", json=speech(input=HOLD),
                          timeout=30) as response:
            chunks = response.iter_bytes()
            next(chunks)
            os.kill(process._process.pid, signal.SIGKILL)
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in chunks:
                    pass
        after = httpx.post(f"{srv.url}/v1/audio/speech", json=speech(), timeout=30)
        assert after.status_code == 503
        assert "engine process has exited" in after.json()["error"]["message"]
        assert until(lambda: metric(srv.url, "lab_active_slots") == 0)
    finally:
        srv.stop(timeout=30)
        process.close()
    with pytest.raises(EngineGone):
        asyncio.run(anext(process.astream("Hello.")))



PARENT = """
import os, sys
from lab.config import load_preset
from lab.serve import ServeOptions
from lab.serve.engine_process import EngineProcess, _PipeSink

if __name__ == "__main__":
    process = EngineProcess(load_preset("cpu-default"), ServeOptions(slots=1, queue=1))
    print(process._process.pid, flush=True)
    os._exit(0)  # dies without a word: no stop, no close
"""


def test_a_child_whose_parent_dies_exits_by_itself(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=True)
    child = int(done.stdout.split()[-1])
    assert until(lambda: not psutil.pid_exists(child)
                 or psutil.Process(child).status() == psutil.STATUS_ZOMBIE, 30), \
        "the engine process outlived its parent"


def test_a_preset_the_child_cannot_load_fails_with_its_own_error():
    """A config the memory plan refuses raises here what `lab serve` raises in one process."""
    with pytest.raises(MemoryPlanError, match="cannot fit 100000 slots"):
        EngineProcess(load_preset(MODEL), ServeOptions(slots=100_000))
