"""Runner arithmetic, checked against a small convolution 'voice'.

`ConvVoice` is a test double of the pipeline *interface* (synthesize_batch + config and the
contract's Synthesis/SynthesisMetrics fields), not of the real voice: it does real torch work
(a convolution over a sine whose length follows the text) plus a fixed sleep per call, so
the runner's wall time, latency and audio arithmetic have known lower bounds and exact sums.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from lab.bench.runner import BenchError, BenchRow, config_label, run_text_set
from lab.bench.sweep import Sweep, runner_measure
from lab.config import PipelineConfig
from lab.metrics.events import events

SR = 16_000
SECONDS_PER_CHAR = 0.01
CALL_SLEEP_S = 0.01


@dataclass
class ToyMetrics:
    stages: dict
    ttfb_ms: float | None
    total_ms: float
    audio_seconds: float
    rtf: float
    audio_seconds_per_second: float
    peak_memory_mb: float | None
    tokens_per_second: float | None = None
    step_ms: list = field(default_factory=list)


@dataclass
class ToySynthesis:
    audio: np.ndarray
    sample_rate: int
    text: str
    metrics: ToyMetrics
    fallbacks: list = field(default_factory=list)


class ConvVoice:
    def __init__(self, config: PipelineConfig, ttfb: bool = True, extra: int = 0):
        self.config = self.resolved = config
        self.startup = {"load_ms": 5.0, "warmup_ms": 7.0}
        self.sample_rate = SR
        self.calls: list[int] = []
        self.ttfb = ttfb
        self.extra = extra
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(1, 1, 15, padding=7)

    def synthesize(self, text: str) -> ToySynthesis:
        return self.synthesize_batch([text])[0]

    def synthesize_batch(self, texts: list[str]) -> list[ToySynthesis]:
        start = time.perf_counter()
        self.calls.append(len(texts))
        n = max(round(len(t) * SECONDS_PER_CHAR * SR) for t in texts)
        phase = torch.arange(n, dtype=torch.float32) * (2 * math.pi * 220 / SR)
        with torch.no_grad():
            audio = torch.tanh(self.conv(torch.sin(phase).expand(len(texts), 1, n)))[:, 0]
        time.sleep(CALL_SLEEP_S)
        total_ms = (time.perf_counter() - start) * 1e3
        out = []
        for i, text in enumerate(texts):
            samples = round(len(text) * SECONDS_PER_CHAR * SR)
            secs = samples / SR
            metrics = ToyMetrics(
                stages={"vocoder": total_ms},
                ttfb_ms=total_ms / 2 if self.ttfb else None,
                total_ms=total_ms,
                audio_seconds=secs,
                rtf=total_ms / 1e3 / secs,
                audio_seconds_per_second=secs / (total_ms / 1e3),
                peak_memory_mb=10.0 * len(texts),
            )
            notes = ["compile failed: toy; ran eager"] if i == 0 else []
            out.append(ToySynthesis(audio[i, :samples].numpy(), SR, text, metrics, notes))
        return out + out[: self.extra]


TEXTS = ["Hello there.", "A somewhat longer sentence.", "Short.", "Fourth one here.", "Five."]


def test_rows_per_batch_size_with_exact_sums():
    made = {}

    def make(batch_size):
        made[batch_size] = ConvVoice(PipelineConfig(batch_size=batch_size, weights="dummy",
                                                      stream=False))
        return made[batch_size]

    rows = run_text_set(make, TEXTS, [1, 2], repeats=2, warmup=1, progress=False)
    assert [r.batch_size for r in rows] == [1, 2]
    assert made[1].calls == [1] + [1] * 5 * 2
    assert made[2].calls == [2] + [2, 2, 1] * 2
    audio = sum(round(len(t) * SECONDS_PER_CHAR * SR) for t in TEXTS) / SR
    for row in rows:
        assert isinstance(row, BenchRow)
        assert row.n_texts == 5 and row.repeats == 2
        assert row.audio_s == pytest.approx(audio)
        assert row.rtf == pytest.approx(row.wall_s / row.audio_s)
        assert row.audio_s_per_s == pytest.approx(1 / row.rtf)
        assert row.latency_p50_ms >= CALL_SLEEP_S * 1e3
        assert row.latency_p95_ms >= row.latency_p50_ms
        assert 0 < row.ttfb_p50_ms <= row.latency_p50_ms
        assert row.fallbacks == "compile failed: toy; ran eager"
        assert "weights=dummy" in row.config and "fp32" in row.config
    assert rows[0].wall_s >= 5 * CALL_SLEEP_S
    assert rows[0].peak_memory_mb == 10.0 and rows[1].peak_memory_mb == 20.0
    assert all(r.load_ms == 5.0 and r.warmup_ms == 7.0 for r in rows)


def test_missing_ttfb_reads_none_and_event_is_recorded():
    before = len(events.recent(kind="bench"))
    rows = run_text_set(
        lambda b: ConvVoice(PipelineConfig(batch_size=b), ttfb=False),
        TEXTS[:2],
        [2],
        warmup=0,
        progress=False,
    )
    assert rows[0].ttfb_p50_ms is None and rows[0].ttfb_p95_ms is None
    recent = events.recent(kind="bench")
    assert len(recent) == before + 1 and recent[-1]["batch_size"] == 2


def test_bad_inputs_fail_before_any_pipeline_is_built():
    built = []

    def make(b):
        built.append(b)
        return ConvVoice(PipelineConfig(batch_size=b))

    for kwargs, match in [
        ({"texts": [], "batch_sizes": [1]}, "empty"),
        ({"texts": TEXTS, "batch_sizes": []}, "no batch sizes"),
        ({"texts": TEXTS, "batch_sizes": [0, 2]}, "integers >= 1"),
        ({"texts": TEXTS, "batch_sizes": [1], "repeats": 0}, "repeats"),
        ({"texts": TEXTS, "batch_sizes": [1], "warmup": -1}, "warmup"),
    ]:
        with pytest.raises(BenchError, match=match):
            run_text_set(make, progress=False, **kwargs)
    assert built == []


def test_wrong_result_count_is_reported():
    with pytest.raises(BenchError, match="returned 3 results for 2 texts"):
        run_text_set(
            lambda b: ConvVoice(PipelineConfig(batch_size=b), extra=1),
            TEXTS[:2],
            [2],
            warmup=0,
            progress=False,
        )


def test_config_label_shows_changed_speed_knobs():
    cfg = PipelineConfig(dtype="bf16", quant="int8-weight", compile="default", cuda_graphs=True)
    label = config_label(cfg)
    assert label.startswith("piper-vits:default bf16 auto stream/24")
    assert "quant=int8-weight" in label and "compile=default" in label
    assert "cuda_graphs=True" in label


def test_config_label_shows_every_override_and_the_streaming_mode():
    base = PipelineConfig(device="cpu")
    assert config_label(base.replace(overlap=4)) != config_label(base)
    assert "sampling.temperature=0.7" in config_label(base.replace(**{"sampling.temperature": 0.7}))
    assert config_label(base.replace(decode_interval=12)).split()[3] == "stream/12"
    one_shot = config_label(base.replace(stream=False, decode_interval=12))
    assert "one-shot" in one_shot and "12" not in one_shot


def test_runner_measure_plugs_the_runner_into_a_sweep():
    sweep = Sweep(
        "batch_size",
        [1, 3],
        PipelineConfig(),
        TEXTS,
        runner_measure(ConvVoice, warmup=0),
    )
    result = sweep.run()
    rows = result.rows()
    assert [(r["value"], r["batch_size"]) for r in rows] == [(1, 1), (3, 3)]
    assert all(r["rtf"] > 0 for r in rows)


def test_a_streaming_config_is_benchmarked_streaming_at_batch_one(voice_pipeline):
    """The real voice: streamed rows hear the first chunk early; batched rows say they ran
    one-shot, so a decode-interval sweep through the runner measures what it claims."""
    from lab.pipeline import Pipeline

    text = "Streaming should start speaking well before the whole sentence is done."
    streamed = voice_pipeline.config.replace(stream=True, decode_interval=12)
    rows = run_text_set(lambda b: Pipeline(streamed.replace(batch_size=b)), [text, text],
                        [1, 2], warmup=0, progress=False)
    assert rows[0].ttfb_p50_ms < 0.8 * rows[0].latency_p50_ms
    assert "stream/12" in rows[0].config and "ran one-shot" not in rows[0].fallbacks
    assert "one-shot" in rows[1].config and "batch 2 ran one-shot" in rows[1].fallbacks
    one_shot = run_text_set(lambda b: voice_pipeline, [text], [1], warmup=0, progress=False)
    assert one_shot[0].ttfb_p50_ms > 0.95 * one_shot[0].latency_p50_ms


def test_an_autoregressive_row_reports_ms_per_step_and_its_kv_cache():
    from lab.config import load_preset
    from lab.pipeline import Pipeline

    cfg = load_preset("orpheus-tiny-cpu", kv_cache="none", sampling={"max_tokens": 28})
    (row,) = run_text_set(lambda b: Pipeline(cfg), ["Hi there."], [1], warmup=0,
                          progress=False)
    assert row.ms_per_step_p50 is not None and row.ms_per_step_p50 > 0
    assert "kv_cache=none" in row.config


def test_a_row_is_labelled_with_the_config_that_ran_after_fallbacks():
    from lab.pipeline import Pipeline

    pipe = Pipeline(PipelineConfig(device="cpu", dtype="fp16", stream=False))
    assert pipe.resolved.dtype == "bf16"  # fp16 runs as bf16 on a CPU
    (row,) = run_text_set(lambda b: pipe, ["Hi."], [1], warmup=0, progress=False)
    assert "bf16" in row.config and "fp16" not in row.config


class ThreadWatchingVoice(ConvVoice):
    """ConvVoice that notes the intra-op thread count each call runs on."""

    def __init__(self, config, seen: list[int]):
        super().__init__(config)
        self.seen = seen

    def synthesize_batch(self, texts):
        self.seen.append(torch.get_num_threads())
        return super().synthesize_batch(texts)


def test_a_row_keeps_each_pass_and_reports_median_and_range():
    (row,) = run_text_set(lambda b: ConvVoice(PipelineConfig(batch_size=b, stream=False)),
                          TEXTS, [2], repeats=3, warmup=0, progress=False)
    assert row.repeats == 3 and len(row.pass_wall_s) == 3 and len(row.pass_audio_s) == 3
    assert row.wall_s == float(np.median(row.pass_wall_s))
    assert (row.wall_s_min, row.wall_s_max) == (min(row.pass_wall_s), max(row.pass_wall_s))
    audio = sum(round(len(t) * SECONDS_PER_CHAR * SR) for t in TEXTS) / SR
    assert all(a == pytest.approx(audio) for a in row.pass_audio_s)
    rtfs = [w / a for w, a in zip(row.pass_wall_s, row.pass_audio_s, strict=True)]
    assert (row.rtf_min, row.rtf, row.rtf_max) == pytest.approx(
        (min(rtfs), float(np.median(rtfs)), max(rtfs)))
    assert row.latency_p50_ms_min <= row.latency_p50_ms_max
    assert len(row.pass_latency_p50_ms) == 3 and len(row.pass_ttfb_p50_ms) == 3
    assert row.ttfb_p50_ms_min == min(row.pass_ttfb_p50_ms)
    # Each pass is the sum of its groups' walls: 3 groups, each at least the sleep.
    assert all(w >= 3 * CALL_SLEEP_S for w in row.pass_wall_s)


def test_rows_pin_and_record_the_thread_count():
    before = torch.get_num_threads()
    seen: list[int] = []
    rows = run_text_set(lambda b: ThreadWatchingVoice(PipelineConfig(batch_size=b), seen),
                        TEXTS[:2], [1, 2], warmup=1, progress=False, threads=1)
    assert [r.threads for r in rows] == [1, 1] and set(seen) == {1}
    assert torch.get_num_threads() == before
    (default,) = run_text_set(lambda b: ConvVoice(PipelineConfig(batch_size=b)), TEXTS[:1],
                              [1], warmup=0, progress=False)
    assert default.threads == before
    for bad in (0, 1.5, True):
        with pytest.raises(BenchError, match="threads"):
            run_text_set(lambda b: ConvVoice(PipelineConfig(batch_size=b)), TEXTS, [1],
                         progress=False, threads=bad)


def test_summarize_without_pass_walls_shares_the_wall_by_pass():
    from lab.bench.runner import summarize

    voice = ConvVoice(PipelineConfig(stream=True))
    results = [voice.synthesize(t) for _ in range(2) for t in TEXTS[:2]]
    latencies = [10.0, 30.0, 20.0, 40.0]
    row = summarize(voice, TEXTS[:2], 1, 2, 1.0, latencies, results)
    assert row.pass_wall_s == pytest.approx((0.4, 0.6))
    assert row.pass_latency_p50_ms == (20.0, 30.0) and row.threads == torch.get_num_threads()


def test_a_real_voice_row_keeps_load_and_warmup_apart_from_its_passes(voice_pipeline):
    (row,) = run_text_set(lambda b: voice_pipeline, ["Hi there.", "A second line."], [1],
                          repeats=2, warmup=0, progress=False, threads=1)
    assert row.threads == 1 and len(row.pass_wall_s) == 2
    assert row.load_ms == voice_pipeline.startup["load_ms"]
    assert row.warmup_ms == voice_pipeline.startup["warmup_ms"]
    assert row.wall_s_min <= row.wall_s <= row.wall_s_max


def test_a_row_says_when_its_requests_ran_on_another_thread_count():
    """A pipeline that reports the threads each request ran on (read on its worker) is
    checked against the pin: one whose worker kept an older count is called out."""
    voice = ConvVoice(PipelineConfig(stream=False))
    results = voice.synthesize_batch(TEXTS[:2])
    for r in results:
        r.metrics.threads = 7
    from lab.bench.runner import summarize

    row = summarize(voice, TEXTS[:2], 2, 1, 0.1, [100.0, 100.0], results, threads=1)
    assert row.threads == 1 and "pinned 1 threads but requests ran on [7]" in row.fallbacks
    for r in results:
        r.metrics.threads = 1
    row = summarize(voice, TEXTS[:2], 2, 1, 0.1, [100.0, 100.0], results, threads=1)
    assert "pinned" not in row.fallbacks
