"""Stage timers: a batched step is one shared span, charged whole to every request in it."""

import time

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
