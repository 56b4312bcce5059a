"""The scheduler's policies: admission, chunked prefill, static batches, stops and aborts."""

import time

import pytest

from lab.engine.request import Request, RequestError, SamplingParams, State
from lab.engine.scheduler import Scheduler, SchedulerConfig


def make(n_slots=2, max_len=2048, **kw) -> Scheduler:
    return Scheduler(SchedulerConfig(n_slots=n_slots, max_len=max_len, **kw))


def request(n_prompt=4, max_tokens=8, stops=()) -> Request:
    return Request(list(range(1, n_prompt + 1)),
                   SamplingParams(max_tokens=max_tokens, stop_token_ids=stops))


def run_prefill(s: Scheduler) -> list[tuple[str, int, int]]:
    chunks = s.plan_prefill()
    for c in chunks:
        s.prefilled(c)
    return [(c.request.request_id, c.start, c.stop) for c in chunks]


def test_admission_waits_for_a_free_slot_in_arrival_order():
    s = make(n_slots=2)
    reqs = [request() for _ in range(3)]
    for r in reqs:
        s.add(r)
    run_prefill(s)
    assert [r.state for r in reqs] == [State.RUNNING, State.RUNNING, State.WAITING]
    assert [r.slot for r in reqs[:2]] == [0, 1]
    reqs[0].append(99)
    reqs[0].append(99)
    s.after_token(reqs[0])  # not finished yet
    assert reqs[2].state is State.WAITING
    s.abort(reqs[0].request_id)
    run_prefill(s)
    assert reqs[2].slot == 0 and reqs[2].state is State.RUNNING


def one_slot_two_requests() -> tuple[Scheduler, Request, Request]:
    """A one-slot scheduler after its first step: the first request runs, the second waits."""
    s = make(n_slots=1)
    first, second = request(), request()
    s.add(first)
    s.add(second)
    run_prefill(s)
    return s, first, second


def test_a_request_knows_how_long_it_waited_for_its_slot():
    s, first, second = one_slot_two_requests()
    assert first.admission_wait_s >= 0 and second.admission_wait_s is None
    time.sleep(0.05)
    s.abort(first.request_id)
    run_prefill(s)
    assert second.admission_wait_s >= 0.05 > first.admission_wait_s


def test_long_prompts_are_written_in_chunks_between_steps():
    s = make(n_slots=2, prefill_chunk=512, prefill_budget=512)
    long, short = request(n_prompt=1100), request(n_prompt=10)
    s.add(long)
    s.add(short)
    assert run_prefill(s) == [(long.request_id, 0, 512)]
    assert run_prefill(s) == [(long.request_id, 512, 1024)]
    assert long.state is State.PREFILLING
    assert run_prefill(s) == [(long.request_id, 1024, 1100), (short.request_id, 0, 10)]
    assert s.decode_batch() == [long, short]


def test_the_budget_counts_padded_tokens_of_all_chunks():
    s = make(n_slots=8, prefill_chunk=64, prefill_budget=200)
    for _ in range(5):
        s.add(request(n_prompt=50))
    assert len(run_prefill(s)) == 4  # 4 rows x 50 tokens fit in 200, a 5th does not


def test_static_policy_admits_the_next_batch_only_when_all_are_done():
    s = make(n_slots=2, policy="static")
    a, b, c = request(max_tokens=1), request(max_tokens=3), request()
    for r in (a, b, c):
        s.add(r)
    run_prefill(s)
    a.append(7)
    assert s.after_token(a)
    assert s.decode_rows() == 2  # the finished row still counts: the batch finishes together
    assert run_prefill(s) == []
    for _ in range(3):
        b.append(7)
    assert s.after_token(b)
    assert run_prefill(s) == [(c.request_id, 0, 4)]


def test_continuous_rows_shrink_when_the_top_slot_frees():
    s = make(n_slots=3)
    reqs = [request(max_tokens=1) for _ in range(3)]
    for r in reqs:
        s.add(r)
    run_prefill(s)
    assert s.decode_rows() == 3
    reqs[2].append(5)
    s.after_token(reqs[2])
    assert s.decode_rows() == 2


def test_stop_rules_and_release():
    s = make(n_slots=1)
    r = request(max_tokens=5, stops=(42,))
    s.add(r)
    run_prefill(s)
    r.append(1)
    assert not s.after_token(r)
    r.append(42)
    assert s.after_token(r)
    assert r.finish_reason == "stop" and r.slot is None and s.slots.n_free == 1
    assert not s.has_work


def test_a_request_that_cannot_fit_is_refused_and_nothing_is_queued():
    s = make(n_slots=1, max_len=16)
    with pytest.raises(RequestError, match="exceeds the cache length"):
        s.add(request(n_prompt=10, max_tokens=7))
    assert not s.has_work
    with pytest.raises(RequestError):
        Request([])


def test_abort_of_a_waiting_request_and_of_an_unknown_id():
    s, a, b = one_slot_two_requests()
    assert s.abort(b.request_id) is b and b.finish_reason == "abort"
    assert s.abort("nope") is None
    assert list(s.waiting) == [] and s.running == [a]


def test_a_shut_gate_admits_nobody_while_others_are_in_flight_an_open_one_one_a_step():
    s = make(n_slots=4)
    first, *later = (request() for _ in range(4))
    s.add(first)
    run_prefill(s)
    s.gate = False
    for r in later:
        s.add(r)
    assert run_prefill(s) == [] and s.slots.n_free == 3
    assert all(r.state is State.WAITING for r in later)
    s.gate = True
    run_prefill(s)
    assert [r.state for r in later] == [State.RUNNING, State.WAITING, State.WAITING]
    run_prefill(s)
    assert [r.state for r in later] == [State.RUNNING, State.RUNNING, State.WAITING]


def test_a_shut_gate_with_nothing_in_flight_admits_one():
    """Gating is for the streams in flight: with none, a wait would stop the engine, so one
    request goes in, and the caller judges it before letting in more."""
    s = make(n_slots=2)
    s.gate = False
    first, second = request(), request()
    s.add(first)
    s.add(second)
    run_prefill(s)
    assert (first.state, second.state) == (State.RUNNING, State.WAITING)


def test_the_static_policy_is_not_gated():
    """Static batching is the baseline it is kept for: whole batches, gate or not."""
    s = make(n_slots=2, policy="static")
    s.gate = False
    reqs = [request(), request()]
    for r in reqs:
        s.add(r)
    run_prefill(s)
    assert [r.state for r in reqs] == [State.RUNNING, State.RUNNING]


def test_the_decode_batch_keeps_slot_order_whatever_order_prompts_finish_in():
    """A short prompt in a higher slot starts decoding before a long one below it; the decode
    batch still lists rows by slot, as the step's rows lie in the cache."""
    s = make(n_slots=3, prefill_chunk=512, prefill_budget=1024)
    long, short, third = request(n_prompt=1500), request(n_prompt=10), request(n_prompt=10)
    for r in (long, short, third):
        s.add(r)
    run_prefill(s)
    assert short.state is State.RUNNING and long.state is State.PREFILLING
    while long.state is not State.RUNNING:
        run_prefill(s)
    assert long.slot < short.slot < third.slot
    assert s.decode_batch() == sorted([long, short, third], key=lambda r: r.slot)
    assert s.decode_rows() == 3
    s.abort(third.request_id)
    assert s.decode_batch() == [long, short] and s.decode_rows() == 2
