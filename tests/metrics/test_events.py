import threading
import time

import pytest

from lab.metrics.events import BENCHMARK, USER, EventLog, events


def test_record_and_recent_in_order_with_kind_filter():
    log = EventLog()
    log.record("synthesis", ttfb_ms=12.0, rtf=0.1)
    log.record("bench", batch_size=4)
    log.record("synthesis", ttfb_ms=15.0, rtf=0.2)
    assert [e["kind"] for e in log.recent()] == ["synthesis", "bench", "synthesis"]
    synth = log.recent(kind="synthesis")
    assert [e["ttfb_ms"] for e in synth] == [12.0, 15.0]
    assert all(isinstance(e["time"], float) for e in synth)


def test_recent_seconds_drops_old_events():
    log = EventLog()
    log.record("old")
    time.sleep(0.25)
    log.record("new")
    assert [e["kind"] for e in log.recent(seconds=0.15)] == ["new"]
    assert len(log.recent(seconds=10)) == 2


def test_ring_buffer_keeps_newest():
    log = EventLog(maxlen=3)
    for i in range(5):
        log.record("tick", i=i)
    assert [e["i"] for e in log.recent()] == [2, 3, 4]
    assert len(log) == 3


def test_bad_input_is_rejected_and_log_unchanged():
    log = EventLog()
    log.record("ok")
    with pytest.raises(ValueError, match="reserved"):
        log.record("synthesis", time=1.0)
    with pytest.raises(ValueError, match="non-empty"):
        log.record("")
    with pytest.raises(ValueError, match="seconds"):
        log.recent(seconds=-1)
    with pytest.raises(ValueError, match="maxlen"):
        EventLog(maxlen=0)
    assert [e["kind"] for e in log.recent()] == ["ok"]


def test_recent_returns_copies():
    log = EventLog()
    log.record("synthesis", rtf=0.5)
    log.recent()[0]["rtf"] = 99.0
    assert log.recent()[0]["rtf"] == 0.5


def test_concurrent_writers_lose_nothing():
    log = EventLog()

    def write(worker: int) -> None:
        for i in range(500):
            log.record("w", worker=worker, i=i)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(log.recent(kind="w")) == 2000
    log.clear()
    assert log.recent() == []


def test_module_level_log_exists():
    assert isinstance(events, EventLog)


class _Pipe:
    """Stands in for a pipeline: records a request the way the pipeline does."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def serve(self) -> None:
        self.log.record("synthesis", source=self.log.source_of(self), total_ms=1.0)


def test_requests_are_user_traffic_unless_their_pipeline_is_tagged():
    log = EventLog()
    user_pipe, bench_pipe = _Pipe(log), _Pipe(log)
    user_pipe.serve()
    with log.tagged(bench_pipe, BENCHMARK):
        bench_pipe.serve()
        user_pipe.serve()
    bench_pipe.serve()
    assert [e["source"] for e in log.recent()] == [USER, BENCHMARK, USER, USER]
    assert len(log.recent(kind="synthesis", source=BENCHMARK)) == 1
    assert len(log.recent(source=USER)) == 3


def test_tags_nest_and_restore_and_an_untagged_event_counts_as_user():
    log = EventLog()
    pipe = _Pipe(log)
    with log.tagged(pipe, "warmup"):
        with log.tagged(pipe, BENCHMARK):
            assert log.source_of(pipe) == BENCHMARK
        assert log.source_of(pipe) == "warmup"
    assert log.source_of(pipe) == USER
    log.record("synthesis", total_ms=2.0)
    assert [e["total_ms"] for e in log.recent(source=USER)] == [2.0]
    with pytest.raises(ValueError, match="source"), log.tagged(pipe, ""):
        pass

