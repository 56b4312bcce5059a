"""glibc's allocator, set once per process before a model runs on the CPU.

PyTorch's CPU tensors come straight from `malloc`. By default glibc serves every block above a
moving threshold (at most 32 MB) with fresh pages from `mmap` and hands freed memory back to
the kernel, so each sentence's large activations fault their pages in again; and each thread
that runs a model (the pipeline's worker) gets an arena of its own, from which the same work
ran slower than from the main thread's. On a 2-core x86 machine the default voice rendered 25
sentences through the pipeline in 4.3-5.0 s with glibc's defaults, 4.2-4.4 s with one arena,
and 3.8-4.0 s with one arena that keeps what it frees, against 4.1-4.2 s for the same backend
called on the main thread (same process layout, runs interleaved).

The price is memory: the process keeps its peak heap for the next request instead of returning
it. A new pipeline hands that kept heap back once (`release_kept_memory`), so a config built
after a larger one does not start out holding the larger one's activations. A user who set
glibc's own `MALLOC_*` variables keeps them, and nothing changes where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
KEEP = 2**31 - 1  # the largest value mallopt takes: blocks below it never go back to mmap
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, KEEP), (M_TRIM_THRESHOLD, KEEP))


@functools.cache
def keep_freed_memory() -> str:
    """Apply SETTINGS once per process; logs and returns what was done."""
    note = _apply()
    logging.getLogger("lab").info(note)
    return note


def _apply() -> str:
    own = sorted(k for k in os.environ if k.startswith("MALLOC_"))
    if own:
        return f"glibc malloc left as the environment sets it ({', '.join(own)})"
    if platform.libc_ver()[0] != "glibc":
        return "malloc left alone: the C library is not glibc"
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    failed = [param for param, value in SETTINGS if libc.mallopt(param, value) != 1]
    if failed:
        return f"glibc refused mallopt parameters {failed}; its defaults stay for those"
    return "glibc malloc: one arena that keeps freed memory (no mmap, no trim below 2 GB)"


def release_kept_memory() -> None:
    """Give the heap that earlier requests freed back to the kernel. Done once per pipeline,
    never per request: a sentence whose pages must fault in again took 30% longer."""
    if platform.libc_ver()[0] == "glibc":
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
