"""A real server on a free loopback port, over the default voice (real weights, CPU).

The pipeline loads once per session; each module starts its own servers on it, so their
options differ without paying for another model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lab.config import load_preset
from lab.pipeline import Pipeline
from lab.serve import LabServer, ServeOptions

MODEL = "cpu-default"
SHORT = "Hi there."
# Three sentences: several chunks, in about a second on two cores.
LONG = ("The quick brown fox jumps over the lazy dog. A second sentence keeps the stream going "
        "for a while. And a third one makes sure the slot stays busy.")
# Long enough to hold a slot for many seconds; the tests that send it leave before its end.
HOLD = " ".join([LONG] * 10)


@pytest.fixture(scope="session")
def serve_pipeline() -> Pipeline:
    """The default voice as `lab serve --preset cpu-default` loads it (streaming)."""
    return Pipeline(load_preset(MODEL))


@contextlib.contextmanager
def running(pipeline: Pipeline, **options) -> Iterator[LabServer]:
    server = LabServer(pipeline, ServeOptions(model_name=MODEL, **options),
                       log_level="warning").start()
    try:
        yield server
    finally:
        server.stop(timeout=30)


def speech(**fields) -> dict:
    """A valid request body, with some fields changed."""
    return {"model": MODEL, "input": SHORT, "voice": "default", **fields}


def metric(url: str, name: str, labels: dict | None = None) -> float | None:
    """One sample's value from the server's /metrics, or None when absent."""
    text = httpx.get(f"{url}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and (labels is None or sample.labels == labels):
                return sample.value
    return None


def pcm_of(audio: np.ndarray) -> np.ndarray:
    """What the server sends for float audio: 16-bit samples."""
    return np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)
