"""GPU and host telemetry sampled in the background while the lab runs.

A benchmark number means little without knowing whether the GPU was busy, memory-bound or
throttled while it was taken, so the sampler records utilization, memory-bandwidth use,
power and clocks next to CPU and RAM. Without an NVIDIA driver (a laptop, CI) the GPU
fields stay None and `gpu_status()` says why, so the same dashboard works everywhere.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from dataclasses import dataclass

import psutil

MB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    """One reading. GPU fields are None when there is no GPU or it does not report them."""

    time: float
    cpu_percent: float
    ram_used_mb: float
    ram_total_mb: float
    gpu_name: str | None = None
    gpu_util_percent: float | None = None
    gpu_mem_used_mb: float | None = None
    gpu_mem_total_mb: float | None = None
    gpu_mem_bw_percent: float | None = None
    gpu_power_w: float | None = None
    gpu_sm_clock_mhz: float | None = None
    gpu_mem_clock_mhz: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Nvml:
    """One NVML session on one GPU; `error` holds why there is none."""

    def __init__(self, device_index: int) -> None:
        self.handle = None
        self.error: str | None = None
        self.name: str | None = None
        self.driver: str | None = None
        try:
            import pynvml
        except ImportError as err:
            self.error = f"nvidia-ml-py not installed: {err}"
            return
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            self.error = str(err)
            return
        try:
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self.name = _text(pynvml.nvmlDeviceGetName(self.handle))
            self.driver = _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as err:
            self.error = f"GPU {device_index}: {err}"
            self.handle = None
            pynvml.nvmlShutdown()

    def read(self) -> dict:
        """Current GPU fields; a field the GPU does not support reads None."""
        if self.handle is None:
            return {}
        nvml, h = self._nvml, self.handle
        rates = self._get(nvml.nvmlDeviceGetUtilizationRates, h)
        mem = self._get(nvml.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._get(nvml.nvmlDeviceGetPowerUsage, h)
        return {
            "gpu_name": self.name,
            "gpu_util_percent": None if rates is None else float(rates.gpu),
            "gpu_mem_bw_percent": None if rates is None else float(rates.memory),
            "gpu_mem_used_mb": None if mem is None else mem.used / MB,
            "gpu_mem_total_mb": None if mem is None else mem.total / MB,
            "gpu_power_w": None if power_mw is None else power_mw / 1000.0,
            "gpu_sm_clock_mhz": self._get(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
            "gpu_mem_clock_mhz": self._get(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
        }

    def _get(self, query, *args):
        try:
            return query(*args)
        except self._nvml.NVMLError:
            return None

    def status(self) -> str:
        if self.handle is None:
            return f"no NVIDIA GPU (NVML unavailable: {self.error}); showing CPU/RAM"
        return f"{self.name} (driver {self.driver})"

    def close(self) -> None:
        if self.handle is not None:
            self.handle = None
            self._nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def gpu_status(device_index: int = 0) -> str:
    """A one-line description of the GPU telemetry source, or why there is none."""
    nvml = _Nvml(device_index)
    try:
        return nvml.status()
    finally:
        nvml.close()


def read_sample(nvml: _Nvml | None = None) -> Sample:
    """Take one reading now; CPU percent is measured since the previous call in this process."""
    vm = psutil.virtual_memory()
    return Sample(
        time=time.time(),
        cpu_percent=psutil.cpu_percent(interval=None),
        ram_used_mb=(vm.total - vm.available) / MB,
        ram_total_mb=vm.total / MB,
        **(nvml.read() if nvml is not None else {}),
    )


class TelemetrySampler:
    """Samples telemetry every `interval_s` on a daemon thread, keeping the last `history`.

    start() and stop() may be called any number of times; readers on other threads get
    copies under a lock. Use it as a context manager around a benchmark.
    """

    def __init__(self, interval_s: float = 1.0, history: int = 600, device_index: int = 0):
        if interval_s <= 0:
            raise ValueError(f"interval_s={interval_s} must be > 0")
        if history < 1:
            raise ValueError(f"history={history} must be >= 1")
        self.interval_s = interval_s
        self.device_index = device_index
        self._samples: deque[Sample] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._control = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: _Nvml | None = None
        self._status: str | None = None
        self.last_error: str | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> TelemetrySampler:
        with self._control:
            if self.running:
                return self
            self._nvml = _Nvml(self.device_index)
            self._status = self._nvml.status()
            psutil.cpu_percent(interval=None)  # primes the counter; its first reading is 0.0
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._loop, name="telemetry-sampler", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        with self._control:
            if self._thread is None:
                return
            self._stop.set()
            self._thread.join()
            self._thread = None
            if self._nvml is not None:
                self._nvml.close()
                self._nvml = None

    def _loop(self) -> None:
        while True:
            self._take()
            if self._stop.wait(self.interval_s):
                return

    def _take(self) -> None:
        # A monitor must outlive a bad reading: keep the reason and try again next tick.
        try:
            sample = read_sample(self._nvml)
        except Exception as err:
            self.last_error = f"{type(err).__name__}: {err}"
            return
        with self._lock:
            self._samples.append(sample)

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def history(self, seconds: float | None = None) -> list[Sample]:
        """Samples oldest first; only those of the last `seconds` when given."""
        with self._lock:
            samples = list(self._samples)
        if seconds is None:
            return samples
        cutoff = time.time() - seconds
        return [s for s in samples if s.time >= cutoff]

    def gpu_status(self) -> str:
        """The status seen when sampling started, or a fresh probe when it has not."""
        return self._status if self._status is not None else gpu_status(self.device_index)

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
