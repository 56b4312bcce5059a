"""Peak memory is the request's own: a small request after a large one reports a small peak."""

import torch

from lab.config import PipelineConfig
from lab.metrics import memory
from lab.pipeline import Pipeline

LONG = ("This is a long sentence, spoken slowly and with care, so that the vocoder has many "
        "frames to render and needs far more memory for its activations than a word does.")


def test_two_requests_of_different_sizes_report_different_peaks():
    pipe = Pipeline(PipelineConfig(device="cpu", stream=False, batch_size=8))
    small = pipe.synthesize("Hi.").metrics.peak_memory_mb
    big = pipe.synthesize_batch([LONG] * 8)[0].metrics.peak_memory_mb
    small_again = pipe.synthesize("Hi.").metrics.peak_memory_mb
    assert memory.RSS_RESETS, "Linux lets a process reset its peak resident memory"
    assert big > small + 50
    assert small_again < big - 50


def test_the_measure_is_named():
    assert "during the request" in memory.how(torch.device("cpu"))
