"""benchmarks/voice_knobs.py's scoring: each row's verdict against fp32, and which checks kept
an unresolved verdict from passing."""


import numpy as np
import pytest

from tests.bench.conftest import benchmark_module


@pytest.fixture(scope="module")
def knobs():
    with benchmark_module("voice_knobs") as module:
        yield module


def test_a_row_that_is_not_a_pass_names_the_checks_that_kept_it_from_passing(knobs):
    from lab.config import PipelineConfig
    from lab.pipeline import Pipeline

    texts = ["The ferry left the harbour at noon.", "Seven green kites rose above the dunes."]
    pipe = Pipeline(PipelineConfig(device="cpu", stream=False))
    clean = [pipe.synthesize(t).audio for t in texts]
    pipe.close()
    rng = np.random.default_rng(0)
    noisy = [a + rng.normal(0, 0.3, a.shape).astype(np.float32) for a in clean]
    rows = [{"config": "fp32"}, {"config": "noisy"}]
    knobs.score(rows, {"fp32": clean, "noisy": noisy}, texts)
    assert rows[0]["verdict"] == "pass" and rows[0]["unsettled"] == ""
    assert rows[1]["verdict"] != "pass"
    assert "within 5% of baseline" in rows[1]["unsettled"]
