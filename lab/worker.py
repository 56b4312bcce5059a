"""One thread owns a loaded model; requests reach it through a queue and come back on their own.

A model on a device is shared state: two threads stepping one engine corrupt it, and a stream
that drives the engine serves every request in it. So a pipeline hands all its work to one
worker thread. Each request is a job with its own output queue. The worker interleaves the
streams it holds (one piece of each in turn, so an autoregressive family advances all of them
in the same batched step) and merges the one-shot jobs that are waiting into one batch. A
stream may yield None to pass its turn (it has no piece yet, and waits on nothing the worker
runs, such as its timings settling); the caller never sees it. A stream that waits on work
shared with other streams yields a `lab.turns.Shared` instead: the worker runs that work once
a round for every stream waiting on it, and leaves the stream alone until it is ready, so a
round costs one engine step and a flag per waiting stream (a stream whose work names who it
woke is parked and not even asked, see `lab.turns`). If the shared work fails, every
stream waiting on it gets the error.

A caller that stops listening (a closed browser tab, a dropped connection) cancels its job:
the worker closes the job's generator, and the family frees what the request held. A caller
that is blocked waiting for the next piece can cancel from another thread through the job's
`cancel` event (the app's Cancel button); it then gets `Cancelled` instead of a piece.
Each job runs on the PyTorch thread count of the thread that submitted it.

The model is loaded and warmed up on the worker too (`call`): on a CPU, every thread that runs
parallel PyTorch work keeps its own OpenMP thread team, and once a process holds more such
threads than cores, OpenMP stops spinning between parallel regions and sleeps instead. A
pipeline warmed up on the caller's thread and served on the worker's had two teams, and its
streams ran about three times slower per step on two cores. For the same reason the thread
exits once it has had no work for `LINGER_S`, and the next job starts a new one. A caller's
back-to-back requests keep the thread; a worker that takes up work dismisses every other idle,
lingering one at once, so two pipelines of one process (an A/B in the app, configs taking turns
in a benchmark or notebook) keep one team between them unless both are busy. A process whose
only PyTorch work is its pipeline's (a server) keeps the thread for good (`linger_s=None`).

An asyncio caller (the HTTP server) takes a stream with `astream`: the worker hands what a
round produced to the event loop at the round's end, so no thread blocks on each request's
queue and a hundred streams cost one wake of the loop per round. `submit` does the same for any
sink, such as the pipe to a server in another process (`lab.serve.engine_process`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lab.turns import Shared

StreamFactory = Callable[[], Generator[Any, None, Any]]
BatchRunner = Callable[[list[str], Any], list[Any]]


class Cancelled(RuntimeError):
    """The request was cancelled before it finished."""


class CancelEvent(threading.Event):
    """A job's cancel flag that also tells its listeners when it is set: a job running in
    another process (`lab.serve.engine_process`) hears of it this way."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[Callable[[], None]] = []

    def listen(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def set(self) -> None:
        super().set()
        for listener in self._listeners:
            listener()


@dataclass
class End:
    """The last item of a job's queue: what its stream returned, or its error."""

    value: Any = None
    error: BaseException | None = None


Sink = Callable[[list[tuple[Any, Any]]], None]
"""Takes a round's (key, item) pairs for the jobs submitted to it, on the worker thread."""


class _SinkQueue:
    """A job's output queue that notes each item in the worker's outbox under the job's key;
    the outbox hands a round's items to each sink at once (`Outbox`)."""

    def __init__(self, sink: Sink, key: Any, outbox: Outbox) -> None:
        self.sink, self.key, self._outbox = sink, key, outbox

    def put(self, item: Any) -> None:
        self._outbox.add(self.sink, self.key, item)


class Outbox:
    """What the worker produced for sinks during one round over its streams, handed to each
    sink in one call at the round's end.

    A round of a hundred streams then wakes an event loop (or writes to a pipe) once instead
    of once per chunk.
    """

    def __init__(self) -> None:
        self._held: dict[Sink, list[tuple[Any, Any]]] = {}

    def add(self, sink: Sink, key: Any, item: Any) -> None:
        self._held.setdefault(sink, []).append((key, item))

    def flush(self) -> None:
        held, self._held = self._held, {}
        for sink, items in held.items():
            sink(items)


class LoopSink:
    """Hands a round's items to the asyncio queues of one event loop. Once the loop has
    closed nobody is left to read, and the items are dropped: raising would kill the worker
    thread that serves everyone else."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # a sink must not keep a closed loop alive

    def __call__(self, items: list[tuple[asyncio.Queue, Any]]) -> None:
        loop = self._loop()
        try:
            if loop is not None:
                loop.call_soon_threadsafe(_deliver, items)
        except RuntimeError:  # the loop has closed
            pass


_loop_sinks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def loop_sink(loop: asyncio.AbstractEventLoop) -> LoopSink:
    """The one sink of a live event loop, so that a round's items for all its readers are
    grouped under it and wake the loop once."""
    sink = _loop_sinks.get(loop)
    if sink is None:
        sink = _loop_sinks[loop] = LoopSink(loop)
    return sink


def _deliver(items: list[tuple[asyncio.Queue, Any]]) -> None:
    for queue_, item in items:
        queue_.put_nowait(item)


async def ended(get: Callable[[], Any]) -> AsyncIterator[Any]:
    """A job's items read with `await get()`, then the value it returned, as the last item;
    the job's error is raised instead."""
    while True:
        item = await get()
        if isinstance(item, End):
            if item.error is not None:
                raise item.error
            yield item.value
            return
        yield item


@dataclass(frozen=True)
class WorkerLoad:
    """How hard the serving thread works: the rounds it made over its jobs (one engine step
    each, for streams sharing an engine) and the wall seconds they took, idle waits excluded.
    A round includes any wait for the device inside it (an engine's for its tokens: its
    `EngineQueue.device_wait_s`); the busy seconds less those waits are host work, and host
    work near 1 second a second means the host thread, not the device, sets every stream's
    pace: the engine steps only as fast as Python gets through a round."""

    rounds: int = 0
    busy_s: float = 0.0


@dataclass
class StreamJob:
    start: StreamFactory
    cancel: threading.Event = field(default_factory=threading.Event)
    threads: int = field(default_factory=torch.get_num_threads)
    out: queue.Queue | _SinkQueue = field(default_factory=queue.Queue)
    cancelled: bool = False
    generator: Generator | None = None
    waiting: Shared | None = None  # the shared work it waits on, until `waiting.ready()`
    failure: Exception | None = None  # that work's error, to be raised inside the stream

    @property
    def stopped(self) -> bool:
        return self.cancelled or self.cancel.is_set()


@dataclass
class CallJob:
    fn: Callable[[], Any]
    out: queue.Queue = field(default_factory=queue.Queue)
    threads: int = field(default_factory=torch.get_num_threads)


@dataclass
class BatchJob:
    texts: list[str]
    context: Any
    out: queue.Queue = field(default_factory=queue.Queue)
    threads: int = field(default_factory=torch.get_num_threads)


# How long an idle worker waits for the next job before it exits. Each new thread builds its
# OpenMP team again on its first parallel region; on a 2-core CPU that cost the Piper voice's
# next sentence 5 ms in fp32 and 10 ms with int8-static (its first attention layer), about a
# sixth of a short sentence, when every sentence of a caller's loop started a thread.
LINGER_S = 0.2
_LEAVE = object()  # put in a lingering worker's inbox: exit now
_lingering: weakref.WeakSet[Worker] = weakref.WeakSet()
_lingering_lock = threading.Lock()


def _dismiss_lingering(but: Worker) -> None:
    """Tell every idle, lingering worker other than `but` to exit. Its team beside the one
    about to work made OpenMP throttle its spinning: pipelines taking turns in one process
    ran the default voice's text stages in 91-94 ms instead of 52-59 (six pipelines in turn,
    2 cores)."""
    with _lingering_lock:
        idle = [worker for worker in _lingering if worker is not but]
    for worker in idle:
        worker._inbox.put(_LEAVE)


class Worker:
    """Runs every job of one pipeline on one thread, started when work arrives and gone when idle.

    `run_batch(texts, context)` renders one merged batch; `context` is the oldest merged job's
    (its meter), so the batch's timings count from the earliest arrival. The worker holds its
    owner's method weakly, and no finished job outlives its turn, so an idle worker never keeps
    a dropped pipeline (and its model) alive.
    """

    def __init__(self, name: str, run_batch: BatchRunner,
                 linger_s: float | None = LINGER_S) -> None:
        """`linger_s`: how long the thread waits idle for the next job before it exits (None:
        until the worker is closed or another worker takes up work)."""
        self.name, self.linger_s = name, linger_s
        self._run_batch = weakref.WeakMethod(run_batch)
        self._inbox: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._outbox = Outbox()
        self._early: list = []  # a job taken while lingering, served before the inbox's
        self._rounds, self._busy_s = 0, 0.0
        # Streams waiting on keyed shared work (`lab.turns`), by that work and then by key:
        # a round resumes only those the work names, so the others cost it nothing.
        self._parked: dict[Callable, dict[Any, StreamJob]] = {}

    def load(self) -> WorkerLoad:
        """Rounds and busy seconds so far (read from any thread)."""
        return WorkerLoad(self._rounds, self._busy_s)

    def _ensure_running(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        _dismiss_lingering(self)

    def stream(self, start: StreamFactory, cancel: threading.Event | None = None
               ) -> Generator[Any, None, Any]:
        """Run `start()` on the worker; yield what it yields and return what it returns.

        Setting `cancel` stops the job at its next piece and raises `Cancelled` here.
        """
        job = StreamJob(start, cancel or threading.Event())
        self._inbox.put(job)
        self._ensure_running()
        try:
            while True:
                item = job.out.get()
                if isinstance(item, End):
                    if item.error is not None:
                        raise item.error
                    return item.value
                yield item
        finally:
            job.cancelled = True

    async def astream(self, start: StreamFactory, cancel: threading.Event | None = None
                      ) -> AsyncIterator[Any]:
        """`stream` for a caller on an event loop: what `start()` yields, then what it
        returns, as the last item. Closing the iterator (or cancelling the task reading it)
        cancels the job like closing `stream`."""
        out: asyncio.Queue = asyncio.Queue()
        job = self.submit(start, cancel or threading.Event(),
                          loop_sink(asyncio.get_running_loop()), out)
        try:
            async for item in ended(out.get):
                yield item
        finally:
            job.cancelled = True

    def submit(self, start: StreamFactory, cancel: threading.Event, sink: Sink,
               key: Any) -> StreamJob:
        """Run `start()` on the worker and hand what it yields, then its `End`, to `sink` as
        (key, item) pairs, gathered with the other jobs' at each round's end: a caller in
        another thread or process takes a round's output at once."""
        job = StreamJob(start, cancel, out=_SinkQueue(sink, key, self._outbox))
        self._inbox.put(job)
        self._ensure_running()
        return job

    def batch(self, texts: Sequence[str], context: Any) -> list[Any]:
        """`run_batch` over these texts, possibly merged with other waiting batches."""
        return self._submit(BatchJob(list(texts), context))

    def call(self, fn: Callable[[], Any]) -> Any:
        """`fn()` on the worker thread, between its streams' turns; its result, or its error
        raised here."""
        return self._submit(CallJob(fn))

    def _submit(self, job: BatchJob | CallJob) -> Any:
        self._inbox.put(job)
        self._ensure_running()
        end = job.out.get()
        if end.error is not None:
            raise end.error
        return end.value

    def close(self) -> None:
        """Wait until the thread has finished the jobs it holds; it then exits, as it does
        whenever it runs out of work (at once if it is lingering), and a later job starts a
        new one."""
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            self._inbox.put(_LEAVE)
            thread.join()

    def _take(self) -> list:
        """The waiting jobs; a dismissal that came too late to act on is dropped."""
        jobs, self._early = self._early, []
        while not self._inbox.empty():
            jobs.append(self._inbox.get_nowait())
        return [job for job in jobs if job is not _LEAVE]

    def _loop(self) -> None:
        """Serve until nothing is left to do for `linger_s`, then exit: an idle thread would
        keep its OpenMP team, and a second pipeline's worker would then run beside two teams."""
        active: list[StreamJob] = []
        while True:
            start = time.perf_counter()
            self._admit(active)
            self._run_shared(active)
            self._unpark_stopped(active)
            active[:] = [job for job in active if self._advance(job)]
            self._park(active)
            self._outbox.flush()
            self._rounds += 1
            self._busy_s += time.perf_counter() - start
            if not active and not self._parked and not self._work_arrives():
                break
        self._exit()

    def _work_arrives(self) -> bool:
        """Whether a job arrives within `linger_s` of running out of work (it is then the first
        one `_take` hands over), before another worker dismisses this one."""
        with _lingering_lock:
            _lingering.add(self)
        try:
            job = self._inbox.get(timeout=self.linger_s)
        except queue.Empty:
            return False
        finally:
            with _lingering_lock:
                _lingering.discard(self)
        if job is _LEAVE:
            return False
        self._early.append(job)
        _dismiss_lingering(self)
        return True

    def _exit(self) -> None:
        """Leave, unless a job arrived after the last look at the inbox: its caller saw this
        thread alive and started none, so a successor takes it."""
        with self._lock, self._inbox.mutex:
            self._thread = None
            waiting = any(job is not _LEAVE for job in self._inbox.queue)
        if waiting:
            self._ensure_running()

    def _admit(self, active: list[StreamJob]) -> None:
        """Take the waiting jobs, run the calls and batches among them, and add the streams
        to `active`."""
        jobs = self._take()
        active += [job for job in jobs if isinstance(job, StreamJob)]
        for job in jobs:
            if isinstance(job, CallJob):
                _run_call(job)
        batches = [job for job in jobs if isinstance(job, BatchJob)]
        if batches:
            self._run_batches(batches)

    def _run_shared(self, active: list[StreamJob]) -> None:
        """Run each distinct shared work that some stream waits on, once; if it fails, each
        stream waiting on it is handed the error (`_advance` raises it inside the stream)."""
        works: dict[Callable, StreamJob] = {}
        for job in active:
            if job.waiting is not None:
                works.setdefault(job.waiting.advance, job)
        for advance, parked in self._parked.items():
            works.setdefault(advance, next(iter(parked.values())))
        for advance, first in works.items():
            _use_threads(first.threads)
            try:
                news = advance()
            except Exception as err:  # noqa: BLE001  raised inside each waiting stream
                active += self._parked.pop(advance, {}).values()
                for job in active:
                    if job.waiting is not None and job.waiting.advance == advance:
                        job.failure = err
                continue
            self._unpark(advance, news or (), active)

    def _unpark(self, advance: Callable, keys, active: list[StreamJob]) -> None:
        """Move the streams parked on `advance` under `keys` back to `active`."""
        parked = self._parked.get(advance)
        if not parked:
            return
        active += [parked.pop(key) for key in keys if key in parked]
        if not parked:
            del self._parked[advance]

    def _park(self, active: list[StreamJob]) -> None:
        """Set aside the streams that wait on keyed shared work and are not ready yet."""
        keep = []
        for job in active:
            waiting = job.waiting
            if waiting is None or waiting.key is None or waiting.ready():
                keep.append(job)
            else:
                self._parked.setdefault(waiting.advance, {})[waiting.key] = job
        active[:] = keep

    def _unpark_stopped(self, active: list[StreamJob]) -> None:
        """Hand the parked streams whose caller stopped listening back to `active`, where
        `_advance` closes them and frees what they hold."""
        for advance, parked in list(self._parked.items()):
            self._unpark(advance, [key for key, job in parked.items() if job.stopped], active)

    def _advance(self, job: StreamJob) -> bool:
        """One piece of one stream; False once the job has ended (finished, failed, cancelled).
        A stream waiting on shared work is left alone until that work makes it ready."""
        try:
            if job.generator is None:
                job.generator = job.start()
            if job.stopped:
                job.generator.close()
                job.out.put(End(error=Cancelled("the request was cancelled")))
                return False
            if job.failure is not None:
                failure, job.failure, job.waiting = job.failure, None, None
                piece = job.generator.throw(failure)
            elif job.waiting is not None and not job.waiting.ready():
                return True
            else:
                job.waiting = None
                _use_threads(job.threads)
                piece = next(job.generator)
            if isinstance(piece, Shared):
                job.waiting = piece
            elif piece is not None:  # None: the job passes its turn, nothing to hand out
                job.out.put(piece)
            return True
        except StopIteration as done:
            job.out.put(End(done.value))
        except Exception as err:  # noqa: BLE001  delivered to the job's caller, who re-raises
            job.out.put(End(error=err))
        return False

    def _run_batches(self, jobs: list[BatchJob]) -> None:
        """Merge waiting batches into one; if the merged run fails, run each alone so only
        the request at fault gets the error."""
        texts = [t for job in jobs for t in job.texts]
        _use_threads(jobs[0].threads)
        try:
            run_batch = self._run_batch()
            if run_batch is None:
                raise RuntimeError("the pipeline that owned this worker is gone")
            results = run_batch(texts, jobs[0].context)
        except Exception as err:  # noqa: BLE001
            if len(jobs) == 1:
                jobs[0].out.put(End(error=err))
            else:
                for job in jobs:
                    self._run_batches([job])
            return
        for job in jobs:
            job.out.put(End(results[: len(job.texts)]))
            results = results[len(job.texts):]


def _run_call(job: CallJob) -> None:
    _use_threads(job.threads)
    try:
        job.out.put(End(job.fn()))
    except Exception as err:  # noqa: BLE001  delivered to the caller, who re-raises
        job.out.put(End(error=err))


def _use_threads(count: int) -> None:
    """Run a job on the intra-op thread count its caller had: PyTorch fixes the count per
    thread, so without this a pinned benchmark would run at whatever the worker started with.
    """
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
