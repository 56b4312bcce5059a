"""A server's pipeline in a process of its own (`lab serve` on CUDA, or `--engine-process`).

In one process the pipeline's worker thread and the server's event loop share Python's lock.
On an H100 at 47 Orpheus-3B arrivals a second, the pipeline alone kept 99.8% of streams in real
time with its thread on host work for 80% of the wall; behind the HTTP server, whose loop
sends every chunk through Starlette and uvicorn, 42% stayed in real time
(benchmarks/results/serve_load_orpheus_h100_128_r47_turns.md). Here the child process loads the
pipeline and runs nothing else; the parent runs the HTTP server and holds no model.

They talk over one duplex pipe of pickled tuples:
- parent to child: ("start", key, text), ("cancel", key), ("stop",);
- child to parent: ("ready", facts) or ("failed", message) once; then ("items", pairs) once per
  worker round that produced anything, the (key, item) pairs of every request in that round,
  a request's last item being its `End`; and ("state", facts) four times a second, for
  `/metrics` and `/ready`.

A round's output crosses in one message, so a hundred streams cost the child one write a round
and the parent one wake of its event loop; a thread of the child's own writes it, so the worker
goes on stepping while the parent reads. If the child dies, every request in flight fails
with an error that says so, and every later one at once.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import pickle
import queue
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import torch

from lab.config import PipelineConfig
from lab.models.backend import EngineQueue, Family
from lab.serve.errors import EngineGone
from lab.serve.options import ServeOptions
from lab.serve.server import SWITCH_INTERVAL_MS, hand_over_lock, load_served
from lab.worker import CancelEvent, End, LoopSink, Outbox, WorkerLoad, ended, loop_sink

STATE_EVERY_S = 0.25
ROUNDS_UNSENT = 256
"""Rounds the child's worker may hand over before the parent has read them: about a second
of rounds of a loaded engine."""


@dataclass
class _State:
    """What the parent reads of the pipeline while serving."""

    engine_queue: EngineQueue | None = None
    worker_load: WorkerLoad = field(default_factory=WorkerLoad)
    fallbacks: list[str] = field(default_factory=list)


@dataclass
class _Facts:
    """What the parent needs of the loaded pipeline, sent once it is ready."""

    family: Family
    config: PipelineConfig
    device: torch.device
    sample_rate: int
    startup: dict[str, float]
    options: ServeOptions
    state: _State


class EngineProcess:
    """Loads `config` in a child process and stands for its pipeline in this one: the server
    reads the same attributes and streams with `astream` as from a `Pipeline`."""

    def __init__(self, config: PipelineConfig, options: ServeOptions,
                 switch_interval_ms: float | None = None) -> None:
        interval = SWITCH_INTERVAL_MS if switch_interval_ms is None else switch_interval_ms
        hand_over_lock(interval)  # here the event loop and the pipe's reader take turns
        context = multiprocessing.get_context("spawn")  # a CUDA child cannot be forked
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve_child, name="lab-engine",
                                        args=(config, options, interval, child))
        self._process.start()
        child.close()
        facts = self._first_message()
        self.family, self.config, self.sample_rate = facts.family, facts.config, facts.sample_rate
        self.device, self.startup, self.options = facts.device, facts.startup, facts.options
        self._state = facts.state
        self._keys = itertools.count()
        self._queues: dict[int, tuple[LoopSink, asyncio.Queue]] = {}
        self._send_lock = threading.Lock()
        self._gone: EngineGone | None = None
        self._reader = threading.Thread(target=self._read, name="lab-engine-reader", daemon=True)
        self._reader.start()

    def _first_message(self) -> _Facts:
        try:
            kind, payload = self._conn.recv()
        except EOFError:
            self._process.join()
            raise EngineGone(f"the engine process exited while loading (exit code "
                             f"{self._process.exitcode})") from None
        if kind == "failed":  # the child's own error, so a bad preset reads as it would here
            self._process.join()
            raise payload
        return payload

    @property
    def fallbacks(self) -> list[str]:
        return self._state.fallbacks

    def engine_queue(self) -> EngineQueue | None:
        return self._state.engine_queue

    def worker_load(self) -> WorkerLoad:
        return self._state.worker_load

    async def astream(self, text: str, cancel: CancelEvent | None = None
                      ) -> AsyncIterator[Any]:
        """`Pipeline.astream` across the pipe. Setting `cancel`, or closing the iterator before
        its end, cancels the request in the child."""
        if self._gone is not None:
            raise self._gone
        key = next(self._keys)
        out: asyncio.Queue = asyncio.Queue()
        self._queues[key] = (loop_sink(asyncio.get_running_loop()), out)
        self._send(("start", key, text))
        if cancel is not None:  # the child's job then ends with `Cancelled`, read here
            cancel.listen(lambda: self._cancel(key, self._queues.get(key)))
        try:
            async for item in ended(out.get):
                yield item
        finally:
            self._cancel(key, self._queues.pop(key, None))

    def _cancel(self, key: int, entry: tuple | None) -> None:
        """Tell the child to stop a request it has not ended yet (`entry` is still held). A
        child that is gone has nothing left to stop, and a reader closing its stream must not
        fail for it (the server frees the request's slot after the close)."""
        if entry is None or self._gone is not None:
            return
        try:
            self._send(("cancel", key))
        except EngineGone:
            pass

    def _send(self, message: tuple) -> None:
        with self._send_lock:
            try:
                self._conn.send(message)
            except OSError as err:  # the child is gone; the reader fails what was in flight
                raise EngineGone(f"the engine process is gone: {err}") from err

    def _read(self) -> None:
        """Hand each round's items to their requests' loops, one call per loop."""
        while True:
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            if kind == "state":
                self._state = payload
            elif kind == "items":
                self._deliver(payload)
            elif kind == "stopped":
                break
        self._fail_all()

    def _deliver(self, pairs: list[tuple[int, Any]]) -> None:
        """A round's items to their readers' queues, gathered per event loop as the worker
        gathers them (`Outbox`), so each loop wakes once."""
        outbox = Outbox()
        for key, item in pairs:
            entry = self._queues.get(key)
            if entry is None:  # its reader left; the child has been told to stop it
                continue
            if isinstance(item, End):
                self._queues.pop(key, None)
            outbox.add(*entry, item)
        outbox.flush()

    def _fail_all(self) -> None:
        self._process.join(timeout=5)
        self._gone = EngineGone(f"the engine process has exited (exit code "
                                f"{self._process.exitcode}); this server can serve nothing "
                                "more until it restarts")
        queues, self._queues = self._queues, {}
        for sink, out in queues.values():
            sink([(out, End(error=self._gone))])

    def close(self, timeout: float = 60.0) -> None:
        """Tell the child to finish what it holds and exit; stop it if it will not."""
        if self._process.is_alive():
            try:
                self._send(("stop",))
            except EngineGone:
                pass
            self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._reader.join(timeout=5)


def _serve_child(config: PipelineConfig, options: ServeOptions, switch_interval_ms: float,
                 conn) -> None:
    """The child's whole life: load, report, then start and cancel jobs as the parent asks.
    Ctrl-C reaches the whole process group; the parent drains its requests and then says
    stop, so the child ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout.reconfigure(line_buffering=True)  # its progress lines, as they happen
    try:
        pipe, options = load_served(config, options, switch_interval_ms)
    except Exception as err:  # noqa: BLE001  reported to the parent, which raises it
        conn.send(("failed", _portable(End(error=err)).error))
        return
    lock = threading.Lock()
    cancels: dict[int, threading.Event] = {}
    state = _state_of(pipe)
    conn.send(("ready", _Facts(pipe.family, pipe.config, pipe.device, pipe.sample_rate,
                               pipe.startup, options, state)))
    stop = threading.Event()
    threading.Thread(target=_report_state, args=(pipe, conn, lock, stop), daemon=True).start()
    sink = _PipeSink(conn, lock, cancels)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone: nobody is left to send audio to
            break
        if message[0] == "start":
            _, key, text = message
            cancels[key] = threading.Event()
            pipe.submit(text, cancels[key], sink, key)
        elif message[0] == "cancel" and message[1] in cancels:
            cancels[message[1]].set()
        elif message[0] == "stop":
            break
    stop.set()
    for cancel in list(cancels.values()):  # only a parent that is gone leaves any
        cancel.set()
    pipe.close()
    sink.close()  # the last requests' items before the word that nothing more comes
    _send_quietly(conn, lock, ("stopped", None))


def _state_of(pipe) -> _State:
    return _State(pipe.engine_queue(), pipe.worker_load(), list(pipe.fallbacks))


def _report_state(pipe, conn, lock: threading.Lock, stop: threading.Event) -> None:
    while not stop.wait(STATE_EVERY_S):
        _send_quietly(conn, lock, ("state", _state_of(pipe)))


class _PipeSink:
    """The worker's sink in the child: a round's pairs go to the parent in one message.

    A thread of its own writes them, so the worker never waits on the pipe. A round's audio,
    or a finished request's whole result, can fill the pipe's buffer; the write then waits for
    the parent's reader, which takes turns at its process's lock with the event loop serving
    every stream, and the engine would stop stepping for that long. Past `ROUNDS_UNSENT` rounds
    not yet written, the worker does wait: a parent that cannot keep up slows the engine rather
    than growing the child's memory without end. `close` returns once everything handed over
    has been written."""

    def __init__(self, conn, lock: threading.Lock, cancels: dict[int, threading.Event]) -> None:
        self.conn, self.lock, self.cancels = conn, lock, cancels
        self._out: queue.Queue = queue.Queue(ROUNDS_UNSENT)
        self._writer = threading.Thread(target=self._write, name="lab-engine-sender",
                                        daemon=True)
        self._writer.start()

    def __call__(self, pairs: list[tuple[int, Any]]) -> None:
        for i, (key, item) in enumerate(pairs):
            if isinstance(item, End):
                self.cancels.pop(key, None)
                pairs[i] = (key, _portable(item))
        self._out.put(("items", pairs))

    def _write(self) -> None:
        while (message := self._out.get()) is not None:
            _send_quietly(self.conn, self.lock, message)

    def close(self) -> None:
        self._out.put(None)
        self._writer.join()


def _send_quietly(conn, lock: threading.Lock, message: tuple) -> None:
    """Send from the worker's or the reporter's thread. A parent that is gone cannot be told
    anything; raising would end the thread, and the child's main loop, which sees the pipe
    close, cancels the jobs and exits instead."""
    try:
        with lock:
            conn.send(message)
    except OSError:
        pass


def _portable(end: End) -> End:
    """The end as the parent can unpickle it: an error that cannot cross keeps its type's
    name and message."""
    if end.error is None:
        return end
    try:
        pickle.loads(pickle.dumps(end.error))
    except Exception:  # noqa: BLE001  any failure to cross: send its words instead
        return End(error=RuntimeError(f"{type(end.error).__name__}: {end.error}"))
    return end
