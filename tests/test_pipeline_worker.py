"""One worker owns each pipeline: concurrent requests share it without losing or mixing audio,
fallbacks are read live, and a listener who leaves frees what their request held."""

import asyncio
import threading

import numpy as np
import pytest
import torch

import lab.engine.graphs as graphs
from lab.config import ConfigError, load_preset
from lab.metrics.repeats import pinned_threads
from lab.models.orpheus_format import AudioTokenConstraint
from lab.pipeline import AudioChunk, Pipeline, Synthesis, drain
from lab.turns import Shared
from lab.worker import LINGER_S, Cancelled, End, Worker

TEXTS = ["One small request.", "Another one, a little longer.", "A third. In two sentences."]


class _Echo:
    """An owner for a bare Worker (it holds its owner's method weakly): batches come back as
    they went in."""

    def run(self, texts, context):
        return texts


@pytest.fixture(scope="module")
def orpheus():
    return Pipeline(load_preset("orpheus-tiny-cpu", sampling={"max_tokens": 84}))


def test_concurrent_requests_each_get_their_own_complete_audio(orpheus):
    """4 threads x 3 requests each, streamed at once through one pipeline, equal each request
    run alone with the same seed: none loses a chunk or receives another's. They also join
    the same continuous batch: some decode steps carry more than one request."""
    alone = {t: orpheus.synthesize(t).audio for t in TEXTS}
    stats = orpheus.backend.tts.engine.stats
    steps, rows = stats.decode_steps, stats.active_rows
    results: dict[tuple[int, int], tuple[str, np.ndarray, np.ndarray]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def client(n: int) -> None:
        try:
            start.wait()
            streams = [(t, orpheus.stream(t)) for t in TEXTS]
            for i, (text, stream) in enumerate(streams):
                chunks, syn = drain(stream)
                results[n, i] = (text, np.concatenate([c.audio for c in chunks]), syn.audio)
        except BaseException as err:  # noqa: BLE001  reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(results) == 12
    assert stats.active_rows - rows > stats.decode_steps - steps
    for text, streamed, whole in results.values():
        np.testing.assert_array_equal(streamed, whole)
        assert whole.shape == alone[text].shape
        np.testing.assert_allclose(whole, alone[text], atol=1e-4)


def test_streams_started_together_decode_in_the_same_steps():
    """A stream waiting for its audio must not hold the worker: eight streams started at once
    all join the first steps and finish in about as many steps as one, instead of each
    starting only once the one before it has its first audio (eight times the steps)."""
    pipe = Pipeline(load_preset("orpheus-tiny-cpu", batch_size=8, sampling={"max_tokens": 42}))
    tts = pipe.backend.tts
    tts.engine.runner.logits_processor = AudioTokenConstraint(tts.format.layout,
                                                              allow_stop=False)
    stats = tts.engine.stats
    steps, rows = stats.decode_steps, stats.active_rows
    start = threading.Barrier(8)

    def client(n: int) -> None:
        start.wait()
        drain(pipe.stream(f"Stream number {n} starts now."))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert stats.decode_steps - steps <= 42 + 12
    assert (stats.active_rows - rows) / (stats.decode_steps - steps) >= 6


def test_a_stream_closed_early_frees_its_slot(orpheus):
    stream = orpheus.stream(TEXTS[1])
    next(stream)
    stream.close()
    assert orpheus.synthesize(TEXTS[0]).metrics.total_ms > 0  # the worker has moved on
    tts = orpheus.backend.tts
    assert not tts.engine.has_unfinished() and not tts.utterances


def test_a_cancel_event_set_from_another_thread_ends_the_stream_and_frees_its_slot(orpheus):
    """The Cancel button's path: the consumer is blocked in the stream while another thread
    cancels; it gets Cancelled, and the worker serves the next request at once."""
    cancel = threading.Event()
    stream = orpheus.stream(TEXTS[2], cancel)
    next(stream)
    threading.Timer(0.05, cancel.set).start()
    with pytest.raises(Cancelled, match="cancelled"):
        for _ in stream:
            pass
    assert orpheus.synthesize(TEXTS[0]).audio.size > 0
    tts = orpheus.backend.tts
    assert not tts.engine.has_unfinished() and not tts.utterances


def test_an_event_loop_reads_streams_with_the_audio_of_the_blocking_stream(orpheus):
    """The server's path: two streams read on one event loop get their chunks, then the whole
    Synthesis last, with the audio the blocking stream gives; one closed early frees its
    slot. Started in the same round, their codec windows decode in one batched call, which
    rounds a little differently from a window decoded alone."""
    alone = {t: drain(orpheus.stream(t))[1].audio for t in TEXTS[:2]}

    async def read(text: str) -> tuple[list, object]:
        items = [item async for item in orpheus.astream(text)]
        return items[:-1], items[-1]

    async def leave_early() -> None:
        stream = orpheus.astream(TEXTS[2])
        assert isinstance(await anext(stream), AudioChunk)
        await stream.aclose()

    async def serve():
        return await asyncio.gather(*(read(t) for t in TEXTS[:2]), leave_early())

    *results, _ = asyncio.run(serve())
    for text, (chunks, synthesis) in zip(TEXTS[:2], results, strict=True):
        assert chunks and all(isinstance(c, AudioChunk) for c in chunks)
        assert isinstance(synthesis, Synthesis)
        np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks]), synthesis.audio)
        np.testing.assert_allclose(synthesis.audio, alone[text], atol=1e-5)
    assert orpheus.synthesize(TEXTS[0]).audio.size > 0
    tts = orpheus.backend.tts
    assert not tts.engine.has_unfinished() and not tts.utterances


def test_a_stream_whose_event_loop_has_closed_does_not_stop_the_worker():
    """A reader's loop can close with its stream unfinished (asyncio.run returning, a server
    shutting down). The worker then has nowhere to hand the stream's end; it must drop it and
    go on serving, not die and leave every later caller waiting."""

    class Owner:
        def run(self, texts, context):
            return [t.upper() for t in texts]

    owner, loop_closed = Owner(), threading.Event()
    worker = Worker("test-worker", owner.run)

    def stream():
        yield 1
        loop_closed.wait(10)
        yield 2

    async def read_one():
        return await anext(worker.astream(stream))

    assert asyncio.run(read_one()) == 1
    loop_closed.set()
    answer: list = []
    caller = threading.Thread(target=lambda: answer.append(worker.batch(["later"], None)))
    caller.start()
    caller.join(timeout=10)
    assert answer == [["LATER"]]
    worker.close()


def _pieces_once_all_started(streams: int, n: int):
    """`pieces(name)`: a stream factory that passes its turn until `streams` of them have
    started, then yields name0..name{n-1} and returns 'name done', so the rounds do not depend
    on when the worker thread got each job."""
    started = []

    def pieces(name):
        def start():
            started.append(name)
            while len(started) < streams:
                yield None
            for i in range(n):
                yield f"{name}{i}"
            return f"{name} done"
        return start
    return pieces


def test_the_worker_wakes_an_event_loop_once_per_round_not_once_per_piece():
    """Three streams of five pieces each, read on one loop: each reader gets its own pieces in
    order, and once the three are running a round's three pieces come in one wake (18 pieces
    with the ends would be 18 wakes handed over one by one). Each stream passes its turn until
    all three have started, so the rounds do not depend on when the thread got each job."""

    owner = _Echo()
    worker = Worker("test-worker", owner.run)
    wakes = []
    pieces = _pieces_once_all_started(3, 5)

    async def read(name):
        return [item async for item in worker.astream(pieces(name))]

    async def serve():
        loop = asyncio.get_running_loop()
        wake = loop.call_soon_threadsafe

        def counted(*args):
            wakes.append(args)
            return wake(*args)

        loop.call_soon_threadsafe = counted
        return await asyncio.gather(*(read(name) for name in "abc"))

    results = asyncio.run(serve())
    worker.close()
    assert results == [[f"{n}{i}" for i in range(5)] + [f"{n} done"] for n in "abc"]
    assert len(wakes) < 18
    assert max(len(items) for _, items in wakes) == 3


def test_a_sink_takes_each_rounds_pieces_of_every_stream_in_one_call():
    """`submit` with a sink (what a server in another process reads through): every stream's
    pieces reach the sink under its key, in order, with its End last; once all three run, a
    round's three pieces come in one call."""
    owner = _Echo()
    worker = Worker("test-worker", owner.run)
    calls, done = [], threading.Event()
    pieces = _pieces_once_all_started(3, 4)

    def sink(pairs):
        calls.append(list(pairs))
        if sum(isinstance(item, End) for call in calls for _, item in call) == 3:
            done.set()

    for name in "abc":
        worker.submit(pieces(name), threading.Event(), sink, name)
    assert done.wait(10)
    worker.close()
    for name in "abc":
        got = [item for call in calls for key, item in call if key == name]
        assert got[:-1] == [f"{name}{i}" for i in range(4)]
        assert got[-1] == End(f"{name} done")
    assert max(len(call) for call in calls) == 3 and len(calls) < 15


def test_per_request_counts_travel_with_the_request(orpheus):
    one = orpheus.synthesize(TEXTS[0]).metrics
    again = orpheus.synthesize(TEXTS[0]).metrics
    assert one.tokens_per_second and again.tokens_per_second
    assert len(one.step_ms) == len(again.step_ms) > 0
    assert not hasattr(orpheus.backend, "tokens") and not hasattr(orpheus.backend.tts, "timer")


def test_a_failure_at_load_reaches_the_first_requests_fallbacks(monkeypatch):
    """Compile and capture happen at load (warm-up), so a failure there is recorded before any
    request, and the first request's own result says so."""

    def broken(self, bucket, length, pre):
        raise RuntimeError("forced capture failure")

    monkeypatch.setattr(graphs.GraphedDecoder, "_run_padded", broken)
    pipe = Pipeline(load_preset("orpheus-tiny-cpu", compile="default", batch_size=1,
                                sampling={"max_tokens": 14}))
    assert any("forced capture failure" in f for f in pipe.fallbacks)
    first = pipe.synthesize("Hello.")
    assert any("forced capture failure" in f and "decoding eagerly" in f
               for f in first.fallbacks)


def test_piper_batches_from_two_threads_are_merged_and_stay_separate(voice_pipeline):
    texts = ["Short one.", "A rather longer sentence for the second caller."]
    alone = [voice_pipeline.synthesize_batch([t])[0].audio for t in texts]
    got: dict[int, np.ndarray] = {}

    def client(i: int) -> None:
        got[i] = voice_pipeline.synthesize_batch([texts[i]])[0].audio

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for i, audio in enumerate(alone):
        np.testing.assert_allclose(got[i], audio, atol=1e-4)


def test_a_bad_request_fails_alone(orpheus):
    from lab.frontend import TextError

    with pytest.raises(TextError):
        orpheus.synthesize_batch(["  "])
    assert orpheus.synthesize(TEXTS[0]).audio.size > 0


@pytest.mark.parametrize(("family", "knob", "value"), [
    ("piper-vits", "cuda_graphs", True), ("piper-vits", "kv_cache", "none"),
    ("orpheus", "noise_scale", 0.3)])
def test_a_knob_the_family_cannot_honour_is_refused_with_its_reason(family, knob, value):
    from lab.models.registry import family as declared

    preset = "cpu-default" if family == "piper-vits" else "orpheus-tiny-cpu"
    with pytest.raises(ConfigError, match=f"{knob} does not apply to {family}") as err:
        Pipeline(load_preset(preset, **{knob: value}))
    assert declared(family).unsupported[knob] in str(err.value)


def test_a_dropped_pipeline_is_freed_and_its_worker_exits():
    """An idle worker holds no strong reference to its pipeline, so dropping the pipeline frees
    its model (benchmarks build one pipeline after another) and ends the thread."""
    import gc
    import weakref

    pipe = Pipeline(load_preset("orpheus-tiny-cpu", sampling={"max_tokens": 14}))
    pipe.synthesize("Hello.")
    drain(pipe.stream("Hello."))
    worker = pipe._worker
    gone = weakref.ref(pipe)
    del pipe
    gc.collect()
    assert gone() is None
    worker.close()
    assert worker._thread is None


def test_resolved_config_shows_what_ran_after_a_fallback(monkeypatch):
    def broken(self, bucket, length, pre):
        raise RuntimeError("forced capture failure")

    monkeypatch.setattr(graphs.GraphedDecoder, "_run_padded", broken)
    pipe = Pipeline(load_preset("orpheus-tiny-cpu", compile="default", quant="int4-weight",
                                batch_size=1, sampling={"max_tokens": 14}))
    ran = pipe.resolved
    assert (ran.compile, ran.cuda_graphs) == ("none", False)
    assert ran.quant == "int8-weight"  # int4 needs a CUDA GPU
    assert pipe.config.quant == "int4-weight"


def test_a_stream_without_audio_ends_with_a_note_not_an_error():
    from lab.pipeline import NO_AUDIO

    pipe = Pipeline(load_preset("orpheus-tiny-cpu", sampling={"temperature": 0.0,
                                                              "max_tokens": 42}))
    results = [drain(pipe.stream(t))[1] for t in [*TEXTS, "A second line that is longer."]]
    silent = [r for r in results if r.audio.size == 0]
    assert silent, "greedy random weights end some sentences at once"
    assert all(NO_AUDIO in r.warnings for r in silent)
    assert all(NO_AUDIO not in r.warnings for r in results if r.audio.size)


def test_each_request_runs_on_its_callers_thread_count(voice_pipeline):
    """A pinned caller gets its count on the worker, whatever the worker started with."""
    seen = []
    original = voice_pipeline.backend.synthesize

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    voice_pipeline.backend.synthesize = spy
    try:
        for count in (1, 2):
            with pinned_threads(count):
                voice_pipeline.synthesize_batch(["Threads."])
    finally:
        del voice_pipeline.backend.synthesize
    assert seen == [1, 2]


def test_the_model_loads_and_warms_up_on_the_thread_that_serves_it(monkeypatch):
    """On a CPU each thread that runs parallel PyTorch work keeps its own OpenMP team; a model
    warmed up on the caller's thread and served on the worker's ran its steps about three times
    slower on two cores. So loading, warming up and serving all happen on the worker."""
    import lab.pipeline as pipeline_module

    threads = {}
    real_load = pipeline_module.load_backend

    def load(config, device):
        threads["load"] = threading.current_thread()
        backend = real_load(config, device)
        real_warm_up = backend.warm_up

        def warm_up(texts):
            threads["warm_up"] = threading.current_thread()
            return real_warm_up(texts)

        backend.warm_up = warm_up
        return backend

    monkeypatch.setattr(pipeline_module, "load_backend", load)
    pipe = Pipeline(load_preset("orpheus-tiny-cpu", sampling={"max_tokens": 14}))
    real_step = pipe.backend.tts.step

    def step():
        threads["serve"] = threading.current_thread()
        return real_step()

    pipe.backend.tts.step = step
    drain(pipe.stream("Hello."))
    assert threading.current_thread() not in threads.values()
    assert all(thread.name == pipe._worker.name for thread in threads.values())


def test_an_idle_worker_thread_exits_and_the_next_job_starts_another(orpheus):
    """An idle thread would keep its OpenMP team beside the next pipeline's."""
    pipe = Pipeline(load_preset("orpheus-tiny-cpu", sampling={"max_tokens": 14}))
    pipe.close()
    assert pipe._worker._thread is None
    first = pipe._worker.call(threading.current_thread)
    pipe.close()
    second = pipe._worker.call(threading.current_thread)
    assert first is not second
    assert not first.is_alive()
    assert pipe.synthesize("Hello again.").audio.size


def test_a_job_within_the_linger_keeps_the_thread_and_an_idle_one_leaves_after_it():
    """Back-to-back jobs share one thread (and its OpenMP team); a worker idle for longer
    than `LINGER_S` has exited."""
    owner = _Echo()
    worker = Worker("linger", owner.run)
    try:
        first = worker.call(threading.current_thread)
        assert worker.call(threading.current_thread) is first
        first.join(timeout=LINGER_S + 5)
        assert not first.is_alive() and worker._thread is None
        assert worker.call(threading.current_thread) is not first
    finally:
        worker.close()


def test_a_worker_that_stays_keeps_its_thread_through_idle_spells_until_closed():
    """A server's worker (`linger_s=None`) keeps its thread, and so its OpenMP team, however
    long it waits for the next request; closing it ends the thread."""
    owner = _Echo()
    worker = Worker("server", owner.run, linger_s=None)
    first = worker.call(threading.current_thread)
    first.join(timeout=LINGER_S + 1)
    assert first.is_alive() and worker.call(threading.current_thread) is first
    worker.close()
    assert not first.is_alive() and worker._thread is None


@pytest.mark.parametrize("linger_s", [60.0, None])
def test_a_worker_taking_up_work_dismisses_another_that_lingers(linger_s):
    """Two pipelines taking turns keep one thread (one OpenMP team) between them: the idle one
    leaves as soon as the other starts work, however long it would have lingered."""
    owners = _Echo(), _Echo()
    first = Worker("first", owners[0].run, linger_s=linger_s)
    second = Worker("second", owners[1].run)
    try:
        lingering = first.call(threading.current_thread)
        assert lingering.is_alive(), "with nothing else at work, the thread lingers"
        busy = second.call(threading.current_thread)
        lingering.join(timeout=20)
        assert not lingering.is_alive() and first._thread is None
        assert second.call(threading.current_thread) is busy
        assert first.call(threading.current_thread) is not lingering  # a new thread serves it
    finally:
        first.close()  # a lingering thread leaves at once when its worker closes
        second.close()


def test_a_call_that_fails_on_the_worker_raises_for_its_caller_and_the_worker_goes_on():
    owner = _Echo()
    worker = Worker("calls", owner.run)
    try:
        with pytest.raises(ZeroDivisionError):
            worker.call(lambda: 1 / 0)
        assert worker.call(threading.current_thread) is not threading.current_thread()
    finally:
        worker.close()


def _read_all(worker: Worker, starts: dict) -> dict[str, list]:
    """Every item of each named stream, all read at once on one event loop; then the worker
    is closed."""
    async def read(name: str) -> list:
        return [item async for item in worker.astream(starts[name])]

    async def serve() -> list:
        return await asyncio.gather(*(read(n) for n in starts))

    try:
        return dict(zip(starts, asyncio.run(serve()), strict=True))
    finally:
        worker.close()


class _Ticker:
    """Shared work for bare streams: each call is one step. A stream names the steps, counted
    from its start, on which it has a piece, and notes the step it was resumed on."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.steps, self.fail_at = 0, fail_at
        self.starts: dict[str, int] = {}

    def step(self) -> None:
        if self.steps == self.fail_at:
            raise RuntimeError("the shared step failed")
        self.steps += 1

    def stream(self, name: str, at: tuple[int, ...], resumed: list):
        def start():
            base = self.starts[name] = self.steps
            for step in at:
                yield Shared(self.step, lambda step=step: self.steps - base >= step)
                resumed.append((name, self.steps - base))
                yield f"{name}@{step}"
        return start


def test_streams_waiting_on_shared_work_run_it_once_a_round_and_wake_only_when_ready():
    """Three streams wait on one shared step: it runs once a round for all of them (once per
    stream would take more steps than the latest stream needs), and each stream is resumed on
    the very step that made it ready, neither before nor after."""
    owner, ticker, resumed = _Echo(), _Ticker(), []
    worker = Worker("shared", owner.run)
    plans = {"a": (1, 4), "b": (2,), "c": (4, 6)}

    got = _read_all(worker, {n: ticker.stream(n, at, resumed) for n, at in plans.items()})
    assert got == {n: [f"{n}@{step}" for step in at] + [None] for n, at in plans.items()}
    assert sorted(resumed) == sorted((n, step) for n, at in plans.items() for step in at)
    assert ticker.steps == max(ticker.starts[n] + at[-1] for n, at in plans.items())
    load = worker.load()
    assert load.rounds >= ticker.steps and load.busy_s > 0  # a step is at most one a round


def test_a_failure_of_the_shared_work_reaches_every_stream_waiting_on_it_and_the_worker_goes_on():
    """The shared step fails on its third run: each stream waiting on it ends with that
    error (none hangs, none is silently dropped), and the worker serves the next job."""
    owner, ticker, resumed = _Echo(), _Ticker(fail_at=2), []
    worker = Worker("shared-failure", owner.run)
    try:
        failures = _failures(worker, {n: ticker.stream(n, (1, 3), resumed) for n in "ab"})
        assert failures == [(n, "the shared step failed") for n in "ab"]
        assert worker.call(lambda: "still serving") == "still serving"
    finally:
        worker.close()


def _failures(worker: Worker, starts: dict) -> list[tuple[str, str]]:
    """Read each named stream on a thread of its own, all at once; (name, message) of each
    that ended with a RuntimeError, sorted."""
    failures = []

    def read(name: str) -> None:
        try:
            list(worker.stream(starts[name]))
        except RuntimeError as err:
            failures.append((name, str(err)))

    readers = [threading.Thread(target=read, args=(n,)) for n in starts]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=60)
    return sorted(failures)


class _KeyedTicker:
    """Shared work that names the streams it woke: stream `name` has a piece on each step of
    `plans[name]`, counted from its start. `asked` counts the calls into any stream's
    `ready()`: a parked stream is never asked."""

    def __init__(self, plans: dict[str, tuple[int, ...]], fail_at: int | None = None) -> None:
        self.plans, self.fail_at = plans, fail_at
        self.steps, self.asked = 0, 0
        self.starts: dict[str, int] = {}

    def step(self) -> set[str]:
        if self.steps == self.fail_at:
            raise RuntimeError("the shared step failed")
        self.steps += 1
        return {n for n, base in self.starts.items() if self.steps - base in self.plans[n]}

    def ready(self, name: str, step: int) -> bool:
        self.asked += 1
        return self.steps - self.starts[name] >= step

    def stream(self, name: str):
        def start():
            self.starts[name] = self.steps
            for step in self.plans[name]:
                yield Shared(self.step, lambda step=step: self.ready(name, step), name)
                yield f"{name}@{self.steps - self.starts[name]}"
        return start


def test_streams_on_keyed_shared_work_wake_when_named_and_are_not_polled_meanwhile():
    """Streams whose shared work names who it woke get each piece on the step that made it,
    as polled streams do, while their `ready()` is asked twice per piece (when the stream
    starts to wait, and when the work names it), never once a round."""
    plans = {"a": (1, 9), "b": (5,), "c": (3, 12)}
    owner, ticker = _Echo(), _KeyedTicker(plans)
    worker = Worker("keyed", owner.run)

    got = _read_all(worker, {n: ticker.stream(n) for n in plans})
    assert got == {n: [f"{n}@{step}" for step in at] + [None] for n, at in plans.items()}
    assert ticker.asked == 2 * sum(len(at) for at in plans.values())
    assert worker.load().rounds >= ticker.steps == max(ticker.starts[n] + at[-1]
                                                       for n, at in plans.items())


def test_a_parked_stream_whose_caller_stops_is_closed_and_a_failure_reaches_parked_streams():
    """A stream parked on keyed work ends when its caller cancels (its generator is closed,
    the others go on), and when the work fails every stream parked on it gets the error."""
    closed = []
    plans = {"slow": (10**9,), "ok": (2,)}
    owner, ticker = _Echo(), _KeyedTicker(plans)
    worker = Worker("keyed-cancel", owner.run)

    def slow():
        try:
            yield from ticker.stream("slow")()
        finally:
            closed.append("slow")

    cancel, outcome = threading.Event(), []

    def read_slow() -> None:
        try:
            list(worker.stream(slow, cancel))
        except Cancelled:
            outcome.append("cancelled")

    try:
        reader = threading.Thread(target=read_slow)
        reader.start()
        assert list(worker.stream(ticker.stream("ok"))) == ["ok@2"]
        assert "slow" in ticker.starts  # it started before "ok" ended, and waits parked
        cancel.set()
        reader.join(timeout=60)
        assert outcome == ["cancelled"] and worker.call(lambda: list(closed)) == ["slow"]

        failing = _KeyedTicker({"x": (3,), "y": (4,)}, fail_at=2)
        errors = _failures(worker, {n: failing.stream(n) for n in "xy"})
        assert errors == [(n, "the shared step failed") for n in "xy"]
        assert worker.call(lambda: "still serving") == "still serving"
    finally:
        worker.close()
