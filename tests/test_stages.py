"""Set-up stages: said as they begin and end, nested, per thread, and heard on a real load."""

from __future__ import annotations

import re
import threading

import pytest

from lab.config import load_preset
from lab.pipeline import Pipeline
from lab.stages import counted, heard, listening, note, stage

SECONDS = r"\d+\.\d s"


def test_without_a_listener_nothing_is_said_and_the_work_still_runs():
    ran = []
    with stage("quiet"):
        ran.append(1)
        note("nobody hears this")
    assert ran == [1] and list(counted([4, 5], str)) == [4, 5]


def test_stages_nest_and_say_their_seconds():
    said: list[str] = []
    with listening(said.append), stage("outer"):
        note("inside")
        with stage("inner"):
            pass
    assert said[:3] == ["outer ...", "  inside", "  inner ..."]
    assert re.fullmatch(rf"  inner: {SECONDS}", said[3])
    assert re.fullmatch(rf"outer: {SECONDS}", said[4]) and len(said) == 5


def test_a_failing_stage_says_so_and_the_error_goes_on():
    said: list[str] = []
    with pytest.raises(ValueError, match="bad shape"), listening(said.append):
        with stage("compiling"):
            raise ValueError("bad shape")
    assert said[0] == "compiling ..."
    assert re.fullmatch(rf"compiling: failed after {SECONDS}", said[1])
    with listening(said.append):
        note("after")
    assert said[-1] == "after", "the failed stage left its indentation behind"


def test_counted_says_how_far_a_loop_is():
    said: list[str] = []
    with listening(said.append):
        assert [x * 2 for x in counted([1, 2, 3], lambda x: f"batch {x}")] == [2, 4, 6]
    assert [re.sub(SECONDS, "T", s) for s in said] == ["1/3 batch 1: T", "2/3 batch 2: T",
                                                       "3/3 batch 3: T"]


def test_each_thread_hears_only_its_own_stages():
    """Two set-ups at once, as two app sessions loading two configurations: each listener
    gets its own thread's stages, indented under the line its caller said."""
    both = threading.Barrier(2)
    heard_by = {"a": [], "b": []}

    def work(name: str) -> None:
        both.wait()
        with stage(f"stage of {name}"):
            both.wait()

    threads = [threading.Thread(target=heard(heard_by[n].append, lambda n=n: work(n)))
               for n in heard_by]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, said in heard_by.items():
        assert said[0] == f"  stage of {name} ..." and len(said) == 2
        assert re.fullmatch(rf"  stage of {name}: {SECONDS}", said[1])


def test_a_real_load_says_each_stage_under_its_step():
    """The lab's voice, quantized: loading says the quantization and the engine, warming up
    says its requests, each with its seconds, indented under the pipeline's own two lines."""
    said: list[str] = []
    Pipeline(load_preset("ar-voice-cpu", quant="int8-weight"), on_stage=said.append).close()
    ends = [s for s in said if re.search(rf": {SECONDS}$", s)]
    assert said[0] == "loading ar-voice weights (default) onto cpu"
    warm = said.index("warming up (compile, graph capture, first-call kernels)")
    assert [s.split(":")[0].split(" (")[0] for s in ends] == [
        "  quantizing with int8-weight", "  setting up the engine",
        "  running 2 warm-up requests of 16 tokens"]
    assert said.index(ends[1]) < warm < said.index(ends[2])
