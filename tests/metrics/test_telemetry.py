import threading
import time

import pytest

from lab.metrics.telemetry import Sample, TelemetrySampler, gpu_status, read_sample

GPU_FIELDS = (
    "gpu_name",
    "gpu_util_percent",
    "gpu_mem_used_mb",
    "gpu_mem_total_mb",
    "gpu_mem_bw_percent",
    "gpu_power_w",
    "gpu_sm_clock_mhz",
    "gpu_mem_clock_mhz",
)
HAS_GPU = not gpu_status().startswith("no NVIDIA GPU")


def test_sampler_collects_in_background_and_stop_joins():
    sampler = TelemetrySampler(interval_s=0.05)
    sampler.start()
    thread = sampler._thread
    assert sampler.start() is sampler and sampler._thread is thread  # idempotent
    time.sleep(0.5)
    sampler.stop()
    assert not thread.is_alive()
    assert not sampler.running
    samples = sampler.history()
    assert len(samples) >= 2
    last = sampler.latest()
    assert isinstance(last, Sample) and last == samples[-1]
    assert 0 < last.ram_used_mb <= last.ram_total_mb
    assert 0.0 <= last.cpu_percent <= 100.0 * 1024
    assert [s.time for s in samples] == sorted(s.time for s in samples)
    sampler.stop()  # idempotent


def test_gpu_fields_match_what_the_machine_has():
    sample = read_sample()
    if HAS_GPU:
        with TelemetrySampler(interval_s=0.05) as sampler:
            time.sleep(0.2)
        assert sampler.latest().gpu_name and sampler.latest().gpu_mem_total_mb > 0
    else:
        assert all(getattr(sample, f) is None for f in GPU_FIELDS)
        status = TelemetrySampler().gpu_status()
        assert status.startswith("no NVIDIA GPU (NVML unavailable:")
        assert status.endswith("showing CPU/RAM")


def test_context_manager_restart_and_bounded_history():
    sampler = TelemetrySampler(interval_s=0.02, history=3)
    with sampler:
        time.sleep(0.3)
    assert not sampler.running
    assert len(sampler.history()) == 3
    before = sampler.latest()
    with sampler:
        time.sleep(0.1)
    assert sampler.latest().time > before.time
    assert sampler.history(seconds=60) == sampler.history()
    time.sleep(0.05)
    assert sampler.history(seconds=0.01) == []


def test_readers_on_other_threads_while_sampling():
    sampler = TelemetrySampler(interval_s=0.01)
    seen = []

    def read() -> None:
        for _ in range(200):
            seen.extend(sampler.history())
            sampler.latest()

    with sampler:
        readers = [threading.Thread(target=read) for _ in range(3)]
        for r in readers:
            r.start()
        for r in readers:
            r.join()
    assert all(isinstance(s, Sample) for s in seen)


def test_sample_to_dict_and_bad_arguments():
    d = read_sample().to_dict()
    assert {"time", "cpu_percent", "ram_used_mb", "ram_total_mb", *GPU_FIELDS} <= set(d)
    with pytest.raises(ValueError, match="interval_s"):
        TelemetrySampler(interval_s=0)
    with pytest.raises(ValueError, match="history"):
        TelemetrySampler(history=0)
