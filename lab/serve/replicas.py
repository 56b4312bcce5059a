"""`lab serve --replicas N`: N replicas of one preset behind Ray Serve's HTTP proxy.

One process serves one pipeline on one device; to serve more, run more processes. Ray Serve
runs N replicas (`lab.serve.replica`), each loading its own pipeline, and its proxy sends each
request to the less busy of two replicas, streaming the answer back as it is produced. The
HTTP API is the single server's (`create_app`): the same paths, request schema, streaming and
error bodies. Each replica keeps its own admission (slots, queue, 429 with Retry-After,
deadline); Serve's own cap on requests per replica is set far above it, so that a request
beyond capacity is refused by a replica with the lab's answer rather than queued in Ray's
router without a deadline.

Placement: a preset that runs on CUDA gets one GPU per replica, and is refused before Ray
starts when the machine has fewer GPUs than replicas. Otherwise the replicas share the CPU
cores: each process starts with its PyTorch threads set to cores // N (at least 1), so N
replicas do not oversubscribe the cores.

The cluster is always a fresh local one, started by `start` and shut down by `stop` (an
existing cluster named by RAY_ADDRESS is never joined). Everything it runs listens on loopback:
Ray advertises the loopback address, as it does on a laptop, when the variable below is 0, and
the dashboard is off. Only the proxy listens on `host`.

A replica that dies (kill -9, the host out of memory) is restarted by Serve's controller,
which loads its pipeline again; meanwhile the proxy sends new requests to the others. The
streams the dead replica held end with an error (docs/serving.md says which); the others go on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from dataclasses import dataclass

from lab.config import PipelineConfig
from lab.device import resolve_device
from lab.serve.options import ServeOptions
from lab.serve.server import GRACE_S, listen

LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray runs as on a laptop, on loopback
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
ROUTER_CAP = 1000  # requests Serve may hand one replica at once; the replica's admission rules
OBJECT_STORE_BYTES = 128 * 2**20  # requests and audio travel over HTTP, not the object store
APP_NAME = "lab"
QUIET = {"log_level": "WARNING", "enable_access_log": False}  # Serve's own logs: problems only


@dataclass(frozen=True)
class Placement:
    """Where N replicas run: `device` for every one, `gpus` each (0 or 1), the `cores` they
    share, and the PyTorch `threads` each process starts with."""

    replicas: int
    device: str
    gpus: int
    cores: int
    threads: int

    @classmethod
    def of(cls, config: PipelineConfig, replicas: int, cores: int | None = None) -> Placement:
        """One GPU per replica where the preset runs on CUDA, else a share of the cores."""
        if replicas < 1:
            raise ValueError(f"replicas={replicas} must be >= 1")
        import torch

        cores = cores or os.cpu_count() or 1
        device = resolve_device(config.device).type
        if device == "cuda" and torch.cuda.device_count() < replicas:
            raise ValueError(f"{replicas} replicas need {replicas} GPUs (one each); this "
                             f"machine has {torch.cuda.device_count()}")
        return cls(replicas, device, int(device == "cuda"), cores, max(1, cores // replicas))

    @property
    def cpus(self) -> float:
        """Each replica's share of the cores, as Ray counts them (a fraction when N > cores)."""
        return self.cores / self.replicas

    def actor_options(self) -> dict:
        """Ray's options for each replica: its resources, and its thread count set in the
        environment, so that every thread of the process (Serve's event loop and the threads
        that pull audio included) starts with it."""
        return {"num_cpus": self.cpus, "num_gpus": self.gpus,
                "runtime_env": {"env_vars": {name: str(self.threads) for name in THREAD_VARS}}}


class LabReplicas:
    """N replicas of `config` behind Ray Serve's proxy on `host:port` (port 0: a free one).

    The port is checked before Ray starts, then released for Ray's proxy to bind: another
    process could take it in between, and `start` then fails with Ray's error."""

    def __init__(self, config: PipelineConfig, options: ServeOptions, replicas: int,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.placement = Placement.of(config, replicas)
        self.config = config.replace(device=self.placement.device)
        self.options = options
        with listen(host, port) as probe:
            self.host, self.port = probe.getsockname()[:2]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LabReplicas:
        """Start the local cluster and deploy; return once every replica has loaded and warmed
        up its pipeline. A failure shuts the cluster down before it is raised."""
        os.environ.setdefault(LOOPBACK_ONLY, "0")
        import ray
        from ray import serve

        from lab.serve.replica import LabReplica

        placement = self.placement
        ray.init(address="local", num_cpus=placement.cores,
                 num_gpus=placement.gpus * placement.replicas, include_dashboard=False,
                 object_store_memory=OBJECT_STORE_BYTES)
        try:
            serve.start(http_options={"host": self.host, "port": self.port},
                        logging_config=QUIET)
            deployment = LabReplica.options(
                num_replicas=placement.replicas, ray_actor_options=placement.actor_options(),
                max_ongoing_requests=ROUTER_CAP,
                graceful_shutdown_timeout_s=self.options.deadline_s + GRACE_S)
            serve.run(deployment.bind(self.config, self.options), name=APP_NAME,
                      route_prefix="/", logging_config=QUIET)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Drain, then shut the local cluster down; safe to call more than once.

        Deleting the app first takes its routes off the proxy and lets each replica finish
        its streams (for at most the deadline) while the proxy still carries them; shutting
        Serve down at once would stop the proxy with the streams in it."""
        import ray
        from ray import serve
        from ray.serve.exceptions import RayServeException

        if not ray.is_initialized():
            return
        try:
            with contextlib.suppress(RayServeException):  # Serve never started
                serve.delete(APP_NAME)
            serve.shutdown()
        finally:
            ray.shutdown()

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then stop. The signal only wakes this thread, so
        that the shutdown runs here and not inside a handler; a second Ctrl-C forces it."""
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop.wait(timeout=1.0):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()
