"""What the server exposes on `/metrics`, in Prometheus' text format.

The figures a TTS service is judged by under load: outcomes by status, time to first audio,
latency and real-time factor per request, how full the queue and the slots are, what the
pipeline's own engine holds back behind them, how busy its serving thread is, how fast the
model emits tokens, the device's utilisation and memory, and every fallback the pipeline fired
(a compile that failed, a quantization that did not apply), which is also logged once. Queue,
slots, the engine's queue, the serving thread and the device are read live when scraped, never
copied. Each server has its own registry, so several can run in one process (the tests, the
app's Serve tab).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from lab.metrics.telemetry import MB, TelemetrySampler
from lab.models.backend import EngineQueue
from lab.pipeline import Synthesis
from lab.serve.admission import Admission
from lab.worker import WorkerLoad

log = logging.getLogger("lab.serve")

TIME_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 120)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10)
RATE_WINDOW_S = 10.0


class TokenRate:
    """Tokens per second over the requests that finished in the last `window_s`."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._done: deque[tuple[float, float]] = deque()

    def add(self, tokens: float) -> None:
        """Old entries go as new ones come, so a server nobody scrapes holds a window's worth."""
        self._done.append((time.monotonic(), tokens))
        self._drop_old()

    def rate(self) -> float:
        self._drop_old()
        return sum(tokens for _, tokens in self._done) / self.window_s

    def _drop_old(self) -> None:
        cutoff = time.monotonic() - self.window_s
        while self._done and self._done[0][0] < cutoff:
            self._done.popleft()


class DeviceCollector(Collector):
    """GPU utilisation and memory from the lab's NVML sampler; only `lab_gpu_present` (0)
    without an NVIDIA GPU, so a dashboard can tell 'no GPU' from 'no data'."""

    def __init__(self, sampler: TelemetrySampler) -> None:
        self.sampler = sampler

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sample = self.sampler.latest()
        present = sample is not None and sample.gpu_name is not None
        yield GaugeMetricFamily("lab_gpu_present", "1 when NVML reports a GPU", value=present)
        if not present:
            return
        readings = {
            "lab_gpu_utilization_percent": ("GPU utilisation (NVML)", sample.gpu_util_percent, 1),
            "lab_gpu_memory_used_bytes": ("GPU memory in use (NVML)", sample.gpu_mem_used_mb, MB),
            "lab_gpu_memory_total_bytes": ("GPU memory in all", sample.gpu_mem_total_mb, MB),
        }
        for name, (doc, value, scale) in readings.items():
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value * scale)


class EngineQueueCollector(Collector):
    """Requests the pipeline's engine holds back after they took a server slot, and the
    steps its admission gate stayed shut (`admit_lead_ms`, `admit_round_ms`): a slot that is
    busy but makes no sound yet shows here, not in `lab_queue_depth`. Absent for a family
    without such an engine."""

    def __init__(self, read: Callable[[], EngineQueue | None]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        queue = self.read()
        if queue is None:
            return
        yield GaugeMetricFamily("lab_engine_waiting", "Requests the engine holds back: no "
                                "free engine slot yet, or the admission gate shut",
                                value=queue.waiting)
        yield CounterMetricFamily("lab_admission_held_steps", "Engine steps on which the "
                                  "admission gate (admit_lead_ms, admit_round_ms) let no new "
                                  "stream in",
                                  value=queue.held_steps)
        yield CounterMetricFamily("lab_engine_device_wait_seconds", "Seconds the serving "
                                  "thread waited for the device's sampled tokens",
                                  value=queue.device_wait_s)
        yield GaugeMetricFamily("lab_engine_round_seconds", "The engine's recent round: a "
                                "step with the codec work it made due, averaged over the last "
                                "16 steps (what admit_round_ms reads)", value=queue.round_s)
        yield CounterMetricFamily("lab_codec_windows", "Codec windows decoded and handed out "
                                  "as audio", value=queue.codec_windows)
        yield CounterMetricFamily("lab_codec_lag_seconds", "Seconds from each codec window's "
                                  "launch to its audio being handed out, summed over windows: "
                                  "over lab_codec_windows_total, the mean lag the engine's "
                                  "round does not show", value=queue.codec_lag_s)


class WorkerCollector(Collector):
    """The serving thread's rounds and busy seconds (`lab.worker.WorkerLoad`). Less the
    engine's `lab_engine_device_wait_seconds`, the busy seconds are host work: a rate of that
    near 1 means the host thread, not the device, sets every stream's pace."""

    def __init__(self, read: Callable[[], WorkerLoad]) -> None:
        self.read = read

    def collect(self) -> Iterator[CounterMetricFamily]:
        load = self.read()
        yield CounterMetricFamily("lab_worker_rounds", "Rounds the pipeline's serving thread "
                                  "made over its jobs (one engine step each for streams "
                                  "sharing an engine)", value=load.rounds)
        yield CounterMetricFamily("lab_worker_busy_seconds", "Seconds the serving thread spent "
                                  "in rounds, idle waits excluded", value=load.busy_s)


class ServerMetrics:
    def __init__(self, admission: Admission, sampler: TelemetrySampler,
                 engine_queue: Callable[[], EngineQueue | None] = lambda: None,
                 worker_load: Callable[[], WorkerLoad] = WorkerLoad) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "lab_speech_requests", "Speech requests by outcome: the status answered; a stream "
            "cut short after its headers counts 499 (the client left) or the status its "
            "failure would have had", ["status"], registry=registry)
        self.ttfa = Histogram("lab_time_to_first_audio_seconds", "Arrival to first audio "
                              "ready to send, queueing included", buckets=TIME_BUCKETS,
                              registry=registry)
        self.admission_wait = Histogram(
            "lab_engine_admission_wait_seconds", "Of the time to first audio, the wait for the "
            "engine to let the request in (a free engine slot and an open admission gate); "
            "families with an engine of their own", buckets=TIME_BUCKETS, registry=registry)
        self.latency = Histogram("lab_request_latency_seconds", "Arrival to last audio sent, "
                                 "for completed streams", buckets=TIME_BUCKETS, registry=registry)
        self.rtf = Histogram("lab_real_time_factor", "Latency over audio seconds, for completed "
                             "streams (below 1 is faster than real time)", buckets=RTF_BUCKETS,
                             registry=registry)
        self.tokens = Counter("lab_tokens", "Tokens generated (autoregressive families)",
                              registry=registry)
        self.fallbacks = Counter("lab_fallbacks", "Fallbacks the pipeline fired, by note",
                                 ["fallback"], registry=registry)
        self._rate = TokenRate()
        self._seen: set[str] = set()
        gauges = {
            "lab_queue_depth": ("Requests waiting for a slot", lambda: admission.waiting),
            "lab_active_slots": ("Requests holding a slot", lambda: admission.active),
            "lab_slots": ("Slots in all", lambda: admission.slots),
            "lab_tokens_per_second": (f"Tokens per second over the last {RATE_WINDOW_S:g} s "
                                      "of finished requests", self._rate.rate),
        }
        for name, (doc, read) in gauges.items():
            Gauge(name, doc, registry=registry).set_function(read)
        registry.register(DeviceCollector(sampler))
        registry.register(EngineQueueCollector(engine_queue))
        registry.register(WorkerCollector(worker_load))
        ProcessCollector(registry=registry)

    def count(self, status: int) -> None:
        self.requests.labels(str(status)).inc()

    def finished(self, synthesis: Synthesis, latency_s: float) -> None:
        """A stream that ran to its end: its latency, real-time factor and tokens."""
        self.latency.observe(latency_s)
        audio_s = synthesis.metrics.audio_seconds
        if audio_s:
            self.rtf.observe(latency_s / audio_s)
        tps = synthesis.metrics.tokens_per_second
        if tps is not None:
            tokens = tps * synthesis.metrics.total_ms / 1000
            self.tokens.inc(tokens)
            self._rate.add(tokens)

    def note_fallbacks(self, notes: list[str]) -> None:
        """Count and log each fallback the first time it is seen (the pipeline keeps them)."""
        for note in notes:
            if note not in self._seen:
                self._seen.add(note)
                self.fallbacks.labels(note).inc()
                log.warning("fallback: %s", note)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
