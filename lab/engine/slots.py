"""Hand out rows of the static KV cache to requests, always the lowest free row first.

A decode step runs over cache rows [0, bucket) in one batch (a view, so a captured CUDA graph
can replay it), which means its cost follows the highest occupied row, not the number of
requests. Handing out the lowest free row keeps occupied rows packed at the bottom, so the
batch shrinks as soon as the top rows empty.
"""

from __future__ import annotations

import bisect
import heapq


class SlotsExhausted(RuntimeError):
    """No free cache row: the scheduler should have checked `n_free` first."""


class SlotManager:
    """Free/used bookkeeping for `n_slots` cache rows."""

    def __init__(self, n_slots: int) -> None:
        if n_slots < 1:
            raise ValueError(f"n_slots={n_slots} must be >= 1")
        self.n_slots = n_slots
        self._free = list(range(n_slots))
        self._used: list[int] = []

    @property
    def n_free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> list[int]:
        """Occupied rows, ascending."""
        return list(self._used)

    @property
    def high_water(self) -> int:
        """One past the highest occupied row: the fewest rows a decode step must cover."""
        return self._used[-1] + 1 if self._used else 0

    def allocate(self) -> int:
        if not self._free:
            raise SlotsExhausted(f"all {self.n_slots} cache slots are in use")
        slot = heapq.heappop(self._free)
        bisect.insort(self._used, slot)
        return slot

    def free(self, slot: int) -> None:
        index = bisect.bisect_left(self._used, slot)
        if index == len(self._used) or self._used[index] != slot:
            raise ValueError(f"slot {slot} is not in use")
        self._used.pop(index)
        heapq.heappush(self._free, slot)


def default_buckets(n_slots: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then steps of 8 up to 32 and of 16 beyond, ending at n_slots: about a dozen
    captured graphs for 128 slots, and a batch padded by at most 15 idle rows."""
    sizes = [1, 2, 4, 8, 16, 24, 32, *range(48, n_slots, 16)]
    return (*sorted(s for s in sizes if s < n_slots), n_slots)


def bucket_sizes(wanted, top: int) -> tuple[int, ...]:
    """The wanted sizes within [1, top), ascending, then `top`, so that any size fits one."""
    return tuple(sorted({n for n in wanted if 1 <= n < top} | {top}))


def smallest_bucket(sizes: tuple[int, ...], n: int, what: str) -> int:
    """The smallest of the ascending `sizes` that holds `n`; past the largest, an error."""
    for size in sizes:
        if size >= n:
            return size
    raise ValueError(f"{what} of {n} exceeds the largest bucket {sizes[-1]}")
