"""Stage timers: a batched step is one shared span, charged whole to every request in it."""

import time

import pytest
import torch

from lab.metrics.timers import StageTimer, shared_stage


def test_a_shared_step_charges_every_timer_the_same_span_and_repeats_add_up():
    timers = [StageTimer(), StageTimer()]
    for pause in (0.01, 0.02):
        with shared_stage(timers, "step"):
            time.sleep(pause)
    with timers[0].stage("codec"):
        time.sleep(0.005)
    first, second = timers
    assert first.intervals("step") == second.intervals("step")
    assert first._events[0][1] is second._events[0][1]
    steps = first.intervals("step")
    assert 10 <= steps[0] < steps[1] and steps[1] >= 20
    assert first.results()["step"] == sum(steps)
    assert "codec" in first.results() and "codec" not in second.results()


@pytest.mark.parametrize("device", ["cpu", *(["cuda"] if torch.cuda.is_available() else [])])
def test_a_timer_settles_only_once_the_device_has_done_what_it_timed(device):
    """A finished stream waits for `settled` instead of blocking on the device: it must not
    report settled while the timed work still runs, and must once it is done."""
    timer = StageTimer(device)
    x = torch.randn(4096 if device == "cuda" else 64, 4096 if device == "cuda" else 64,
                    device=device)
    with timer.stage("work"):
        for _ in range(50 if device == "cuda" else 1):
            x = torch.tanh(x @ x)
    timer.mark("done")
    if device == "cuda":
        assert not timer.settled()
    while not timer.settled():
        time.sleep(0.001)
    work = timer.results()["work"]
    assert work > 0 and timer.since_start("done") >= work
