"""Slot bookkeeping: lowest free row first, so a decode batch stays packed at the bottom."""

import pytest

from lab.engine.slots import SlotManager, SlotsExhausted, default_buckets


def test_allocation_hands_out_the_lowest_free_slot():
    slots = SlotManager(4)
    assert [slots.allocate() for _ in range(3)] == [0, 1, 2]
    slots.free(1)
    slots.free(0)
    assert slots.allocate() == 0
    assert slots.allocate() == 1
    assert slots.allocate() == 3
    assert slots.n_free == 0


def test_high_water_follows_the_highest_used_slot():
    slots = SlotManager(8)
    assert slots.high_water == 0
    for _ in range(5):
        slots.allocate()
    slots.free(4)
    slots.free(2)
    assert slots.high_water == 4
    assert slots.used == [0, 1, 3]


def test_exhaustion_and_double_free_are_errors():
    slots = SlotManager(1)
    slots.allocate()
    with pytest.raises(SlotsExhausted):
        slots.allocate()
    slots.free(0)
    with pytest.raises(ValueError, match="not in use"):
        slots.free(0)
    with pytest.raises(ValueError):
        SlotManager(0)


@pytest.mark.parametrize("n", [1, 5, 64, 100, 128])
def test_default_buckets_cover_every_batch_with_little_padding(n):
    buckets = default_buckets(n)
    assert buckets[-1] == n and list(buckets) == sorted(set(buckets))
    for rows in range(1, n + 1):
        bucket = next(b for b in buckets if b >= rows)
        assert bucket - rows <= max(15, rows // 2)
