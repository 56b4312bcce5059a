"""A graceful shutdown finishes the request in flight and takes no new ones."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np

from lab.serve import LabServer, ServeOptions
from tests.serve.conftest import LONG, MODEL, pcm_of, speech

WAV_HEADER = 44


def refuses_new_connections(url: str, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            httpx.get(f"{url}/health", timeout=1)
        except httpx.TransportError:
            return True
        time.sleep(0.05)
    return False


def test_shutdown_drains_the_request_in_flight(serve_pipeline):
    server = LabServer(serve_pipeline, ServeOptions(model_name=MODEL), log_level="warning")
    server.start()
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=speech(input=LONG),
                      timeout=60) as response:
        chunks = response.iter_raw()
        first = next(chunks)
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        assert refuses_new_connections(server.url)
        data = first + b"".join(chunks)
    stopper.join(30)
    assert not stopper.is_alive()
    expected = pcm_of(serve_pipeline.synthesize(LONG).audio)
    np.testing.assert_array_equal(np.frombuffer(data[WAV_HEADER:], "<i2"), expected)
