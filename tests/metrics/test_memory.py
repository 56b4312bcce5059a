"""Peak memory is the request's own config: a pipeline built after a large request does not
report the large request's peak."""

import torch

from lab.config import PipelineConfig
from lab.metrics import memory
from lab.pipeline import Pipeline

LONG = ("This is a long sentence, spoken slowly and with care, so that the vocoder has many "
        "frames to render and needs far more memory for its activations than a word does.")


def _small_peak() -> float:
    pipe = Pipeline(PipelineConfig(device="cpu", stream=False))
    return pipe.synthesize("Hi.").metrics.peak_memory_mb


def test_a_pipeline_built_after_a_large_request_reports_its_own_peak():
    small = _small_peak()
    big = Pipeline(PipelineConfig(device="cpu", stream=False, batch_size=8))
    peak = big.synthesize_batch([LONG] * 8)[0].metrics.peak_memory_mb
    assert memory.RSS_RESETS, "Linux lets a process reset its peak resident memory"
    assert peak > small + 50
    assert _small_peak() < peak - 50


def test_the_measure_is_named():
    assert "during the request" in memory.how(torch.device("cpu"))
