import pytest
import torch

from lab.metrics.repeats import Spread, pinned_threads, timed_in_turn, timed_repeats


def test_spread_reports_median_and_range():
    s = Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.low, s.high, s.n) == (2.5, 1.0, 10.0, 4)
    assert s.format(0) == "2 (1-10, n=4)"
    assert s.relative_range == pytest.approx(9 / 2.5)


def test_spread_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        Spread.of([])


def test_timed_repeats_runs_warmup_untimed_and_keeps_results():
    calls = []
    spread, results = timed_repeats(lambda: calls.append(1) or len(calls), repeats=3, warmup=2)
    assert len(calls) == 5 and results == [3, 4, 5] and spread.n == 3
    with pytest.raises(ValueError, match="repeats"):
        timed_repeats(lambda: None, repeats=0)


def test_calls_compared_take_turns_after_their_warmups():
    order = []
    timed = timed_in_turn({"a": lambda: order.append("a") or len(order),
                           "b": lambda: order.append("b") or len(order)}, repeats=2, warmup=1)
    assert order == ["a", "b", "a", "b", "a", "b"]  # warm-ups first, then one of each a turn
    assert timed["a"][1] == [3, 5] and timed["b"][1] == [4, 6]
    assert timed["a"][0].n == timed["b"][0].n == 2
    with pytest.raises(ValueError, match="warmup"):
        timed_in_turn({"a": lambda: None}, warmup=-1)


def test_pinned_threads_sets_and_restores():
    before = torch.get_num_threads()
    with pinned_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        with pinned_threads(0):
            pass


def test_spread_keeps_its_values_in_order_without_changing_equality():
    s = Spread.of([3.0, 1.0, 2.0])
    assert s.values == (3.0, 1.0, 2.0)
    assert s == Spread(2.0, 1.0, 3.0, 3)
    spread, _ = timed_repeats(lambda: None, repeats=4, warmup=0)
    assert len(spread.values) == 4 and spread.low == min(spread.values)


def test_a_thread_that_first_runs_inside_the_pin_keeps_the_pinned_count():
    import queue
    import threading

    jobs: queue.Queue = queue.Queue()
    seen: list[int] = []

    def worker():
        while (job := jobs.get()) is not None:
            seen.append(job())

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        with pinned_threads(1):
            jobs.put(torch.get_num_threads)
            while not seen:
                threading.Event().wait(0.01)
        jobs.put(torch.get_num_threads)
    finally:
        jobs.put(None)
        thread.join()
    assert seen == [1, 1]
