import threading

import pytest
import torch

from lab.bench.runner import BenchError
from lab.bench.sweep import Sweep, runner_measure, streaming_measure, text_of_length
from lab.config import ConfigError, PipelineConfig
from lab.metrics.events import BENCHMARK, USER, events

BASE = "The quick brown fox jumps over the lazy dog."


def conv_measure(cfg: PipelineConfig, texts: list[str]) -> dict:
    """Real work whose size follows the knobs: a convolution over one sample per character."""
    x = torch.ones(cfg.batch_size, 1, sum(len(t) for t in texts))
    with torch.no_grad():
        y = torch.nn.functional.conv1d(x, torch.ones(1, 1, 3), padding=1)
    return {"batch_size": cfg.batch_size, "dtype": cfg.dtype, "samples": int(y.numel())}


def test_config_axis_passes_each_value_to_measure():
    progress = []
    sweep = Sweep("batch_size", [1, 2, 4], PipelineConfig(), ["Hello."], conv_measure)
    result = sweep.run(progress_cb=lambda done, total, point: progress.append((done, total)))
    assert progress == [(1, 3), (2, 3), (3, 3)]
    assert not result.cancelled
    rows = result.rows()
    assert [r["batch_size"] for r in rows] == [1, 2, 4]
    assert [r["samples"] for r in rows] == [6, 12, 24]
    assert all(r["axis"] == "batch_size" for r in rows)
    assert result.series("samples") == ([1, 2, 4], [6, 12, 24])


def test_dtype_and_sampling_axes():
    result = Sweep("dtype", ["fp32", "bf16"], PipelineConfig(), ["Hi."], conv_measure).run()
    assert [r["dtype"] for r in result.rows()] == ["fp32", "bf16"]
    seen = []
    Sweep(
        "sampling.temperature",
        [0.3, 0.9],
        PipelineConfig(family="orpheus"),
        ["Hi."],
        lambda cfg, texts: seen.append(cfg.sampling.temperature) or {},
    ).run()
    assert seen == [0.3, 0.9]


def test_bad_axis_or_value_fails_before_anything_runs():
    calls = []

    def measure(cfg, texts):
        calls.append(cfg)
        return {}

    with pytest.raises(BenchError, match="unknown sweep axis 'speed'"):
        Sweep("speed", [1], PipelineConfig(), ["x"], measure)
    with pytest.raises(ConfigError, match="dtype='fp64'"):
        Sweep("dtype", ["fp32", "fp64"], PipelineConfig(), ["x"], measure)
    with pytest.raises(BenchError, match="no values"):
        Sweep("batch_size", [], PipelineConfig(), ["x"], measure)
    with pytest.raises(BenchError, match="integer number of characters"):
        Sweep("input_length", [10, "long"], PipelineConfig(), ["x"], measure)
    assert calls == []


def test_input_length_axis_stretches_texts():
    lengths = [20, 100, 400]
    result = Sweep(
        "input_length", lengths, PipelineConfig(), [BASE], lambda c, t: {"chars": len(t[0])}
    ).run()
    for n, row in zip(lengths, result.rows(), strict=True):
        assert n - len("jumps ") < row["chars"] <= n
        assert row["n_chars"] == row["chars"]
    assert text_of_length(BASE, 100).startswith(BASE + " The quick")
    assert text_of_length("Hi.", 2) == "Hi"
    with pytest.raises(BenchError, match="empty"):
        text_of_length("  ", 10)


def test_cancel_stops_between_points_and_keeps_finished_ones():
    cancel = threading.Event()

    def stop_after_two(done, total, point):
        if done == 2:
            cancel.set()

    sweep = Sweep("decode_interval", [8, 16, 24, 32], PipelineConfig(), [BASE], conv_measure)
    result = sweep.run(progress_cb=stop_after_two, cancel=cancel)
    assert result.cancelled and result.total == 4
    assert [p.value for p in result.points] == [8, 16]
    assert len(result.rows()) == 2


def test_a_failing_point_is_recorded_and_the_sweep_goes_on():
    def measure(cfg, texts):
        if cfg.quant == "fp8":
            raise RuntimeError("fp8 needs a GPU with compute capability 8.9")
        return {"quant": cfg.quant}

    result = Sweep("quant", ["none", "fp8", "int8-weight"], PipelineConfig(), ["x"], measure).run()
    assert [p.error for p in result.points] == [
        None,
        "RuntimeError: fp8 needs a GPU with compute capability 8.9",
        None,
    ]
    assert [r.get("quant") for r in result.rows()] == ["none", None, "int8-weight"]
    assert not result.cancelled


def test_measure_must_return_rows():
    result = Sweep("batch_size", [1], PipelineConfig(), ["x"], lambda c, t: 3.0).run()
    (row,) = result.rows()
    assert row["axis"] == "batch_size" and row["value"] == 1
    assert "must return a BenchRow, a dict or a list of them, got float" in row["error"]


class CancelAfter:
    """The real voice, with a cancel set once `n` requests have gone through it."""

    def __init__(self, pipe, cancel: threading.Event, n: int) -> None:
        self.pipe, self.cancel, self.n, self.calls = pipe, cancel, n, 0

    def __getattr__(self, name):
        return getattr(self.pipe, name)

    def synthesize_batch(self, texts):
        self.calls += 1
        if self.calls == self.n:
            self.cancel.set()
        return self.pipe.synthesize_batch(texts)


def test_cancel_inside_a_point_stops_at_the_next_request_and_drops_that_point(voice_pipeline):
    cancel = threading.Event()
    voice = CancelAfter(voice_pipeline, cancel, n=6)
    measure = runner_measure(lambda cfg: voice, warmup=1, cancel=cancel)
    texts = ["One.", "Two.", "Three."]
    sweep = Sweep("batch_size", [1, 2], voice_pipeline.config, texts, measure)
    result = sweep.run(cancel=cancel, bar=False)
    # batch 1: a warm-up and three requests; batch 2: a warm-up and one pair of texts, which
    # sets the cancel, so its second pair is refused and the point is dropped, not an error.
    assert voice.calls == 6
    assert [p.value for p in result.points] == [1] and result.points[0].error is None
    assert result.cancelled


def test_sweep_requests_are_benchmark_traffic_and_only_while_measured(voice_pipeline):
    before = len(events.recent(kind="synthesis"))
    measure = runner_measure(lambda cfg: voice_pipeline, warmup=1)
    Sweep("batch_size", [1], voice_pipeline.config, ["Hi."], measure).run(bar=False)
    stream = streaming_measure(lambda cfg: voice_pipeline)
    Sweep("decode_interval", [8], voice_pipeline.config, ["Hi."], stream).run(bar=False)
    voice_pipeline.synthesize("A user asks.")
    sources = [e["source"] for e in events.recent(kind="synthesis")[before:]]
    assert sources == [BENCHMARK] * 4 + [USER]
