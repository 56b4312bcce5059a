"""Run the API under uvicorn, and stop it gracefully: requests in flight finish first.

The listening socket is bound before uvicorn starts, so port 0 gives a free port whose URL is
known at once (tests, the soak, the app's Serve tab). On SIGINT or SIGTERM (or `stop()`), the
server marks itself draining (`/ready` turns 503, new requests on open connections get 503),
stops accepting connections, and waits for the streams in flight to end, for at most the
request deadline, since none may run longer. A second Ctrl-C forces the exit.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

import uvicorn

from lab.config import PipelineConfig
from lab.pipeline import Pipeline, describe_startup
from lab.serve.allocator import cap_arenas
from lab.serve.app import create_app
from lab.serve.memory_plan import plan_memory
from lab.serve.options import ServeOptions

START_TIMEOUT_S = 30.0
GRACE_S = 5.0  # beyond the deadline, for the last chunks to leave
SWITCH_INTERVAL_MS = 0.5


def hand_over_lock(interval_ms: float = SWITCH_INTERVAL_MS) -> None:
    """How long a thread may keep Python's interpreter lock while another waits for it.

    A server runs two busy threads: the worker, which drives the engine and takes the lock back
    after every PyTorch call, and the event loop, which sends a burst of chunks to many streams
    after each step. With Python's 5 ms default, every call the worker makes during such a burst
    can wait up to 5 ms, and each step of every stream waits with it. A shorter interval costs
    the event loop a few more switches a burst."""
    if not interval_ms > 0:
        raise ValueError(f"switch interval {interval_ms} ms must be > 0")
    sys.setswitchinterval(interval_ms / 1000)


def server_pipeline(config: PipelineConfig,
                    on_stage: Callable[[str], None] | None = None,
                    switch_interval_ms: float = SWITCH_INTERVAL_MS) -> Pipeline:
    """The pipeline a server process serves, with the process's lock handed over every
    `switch_interval_ms` (`hand_over_lock`). Its worker thread stays between requests: the
    process runs no other PyTorch work for an idle thread's OpenMP team to slow, and a request
    after an idle spell would otherwise start a thread and build that team again."""
    hand_over_lock(switch_interval_ms)
    return Pipeline(config, on_stage=on_stage, linger_s=None)


def load_served(config: PipelineConfig, options: ServeOptions,
                switch_interval_ms: float | None = None) -> tuple[Pipeline, ServeOptions]:
    """Load the pipeline `lab serve` serves, saying each step: the allocator's arenas, the
    memory plan (its slots replace `options.slots`), the load and warm-up, every fallback."""
    print(cap_arenas())
    plan = plan_memory(config, slots=options.slots)
    print(plan.summary())
    interval = {} if switch_interval_ms is None else {"switch_interval_ms": switch_interval_ms}
    pipe = server_pipeline(plan.apply(config), on_stage=print, **interval)
    print(f"Python's lock changes hands every {sys.getswitchinterval() * 1000:g} ms at most")
    print(describe_startup(pipe.startup))
    for note in pipe.fallbacks:
        print(f"fallback: {note}")
    return pipe, dataclasses.replace(options, slots=plan.slots)


class _Server(uvicorn.Server):
    """uvicorn's server, telling admission to refuse new requests once shutdown begins."""

    def __init__(self, config: uvicorn.Config, on_exit) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig, frame) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def listen(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """The listening socket, bound now: a port in use is refused before any model loads."""
    try:
        return socket.create_server((host, port))
    except OSError as err:
        raise ValueError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err


class LabServer:
    """One pipeline behind uvicorn on `listener` (by default a free loopback port)."""

    def __init__(self, pipeline: Pipeline, options: ServeOptions | None = None,
                 listener: socket.socket | None = None, log_level: str = "info") -> None:
        options = options or ServeOptions()
        self.app = create_app(pipeline, options)
        self.socket = listener or listen()
        self.host, self.port = self.socket.getsockname()[:2]
        config = uvicorn.Config(self.app, log_level=log_level,
                                timeout_keep_alive=options.keep_alive_s,
                                timeout_graceful_shutdown=options.deadline_s + GRACE_S)
        self.server = _Server(config, self._drain)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _drain(self) -> None:
        self.app.state.served.admission.draining = True

    def run(self) -> None:
        """Serve on this (the main) thread until SIGINT or SIGTERM, then drain and return.

        uvicorn re-raises the signal that stopped it once it has drained, so that the handler
        before it acts; the drain is all the shutdown there is, so that handler does nothing.
        """
        quiet = {sig: signal.signal(sig, lambda *_: None)
                 for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.server.run(sockets=[self.socket])
        finally:
            for sig, handler in quiet.items():
                signal.signal(sig, handler)
            self.socket.close()

    def start(self) -> LabServer:
        """Serve on a background thread; return once it accepts connections."""
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                        name="lab-serve", daemon=True)
        self._thread.start()
        waited = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > waited:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Drain (requests in flight finish) and wait for the background thread to end."""
        self._drain()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self.socket.close()
