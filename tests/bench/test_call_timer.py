"""lab.bench.call_timer: calls and inclusive time of chosen methods, only while entered."""

from __future__ import annotations

import time

import pytest

from lab.bench.call_timer import CallTimer


class Base:
    def slow(self, x: int) -> int:
        time.sleep(0.002)
        return x + 1

    def outer(self) -> int:
        return self.slow(1) + self.slow(2)

    @staticmethod
    def double(x: int) -> int:
        return 2 * x

    @classmethod
    def name(cls) -> str:
        return cls.__name__


class Child(Base):
    pass


def test_calls_and_inclusive_time_of_each_method_while_entered():
    item = Base()
    with CallTimer([(Base, "slow"), (Base, "outer"), (Base, "slow")]) as timer:
        assert item.outer() == 5 and item.slow(0) == 1
    assert item.slow(0) == 1  # after the block: not counted
    slow, outer = timer.calls["Base.slow"], timer.calls["Base.outer"]
    assert (slow.count, outer.count) == (3, 1)
    assert outer.seconds >= 0.004 and slow.seconds >= 0.006  # the callees' time is inside
    assert list(timer.calls) == ["Base.slow", "Base.outer"]  # named twice, timed once


def test_static_class_and_inherited_methods_keep_how_they_bind_and_come_back_as_they_were():
    own = dict(vars(Base))
    with CallTimer([(Base, "double"), (Base, "name"), (Child, "slow")]) as timer:
        assert Base.double(3) == Base().double(3) == 6
        assert Child.name() == "Child" and Base.name() == "Base"
        assert Child().slow(1) == 2
    assert {k: timer.calls[k].count for k in timer.calls} == {
        "Base.double": 2, "Base.name": 2, "Child.slow": 1}
    assert dict(vars(Base)) == own and "slow" not in vars(Child)


def test_a_name_that_is_no_method_is_refused_before_anything_is_wrapped():
    with pytest.raises(ValueError, match="Base.missing is not a method"):
        CallTimer([(Base, "slow"), (Base, "missing")])
    assert vars(Base)["slow"].__name__ == "slow" and not hasattr(vars(Base)["slow"], "__wrapped__")
