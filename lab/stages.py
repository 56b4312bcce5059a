"""Set-up stages, heard as they happen.

Building a pipeline can take minutes: a 3B model is made and cast, quantized, its codec is
compiled and captured for every batch size, and its decode step for every batch and key bucket.
A log that says "loading" for all of that cannot tell a slow stage from a hung one, nor say
which knob made start-up slow. The code doing each piece marks it with `stage`; whoever starts
the set-up hears each stage begin and end, with its seconds, by running it inside
`listening(say)`. Without a listener nothing is said and nothing is timed.

The listener lives in a context variable, so two pipelines set up at once on two threads each
hear only their own stages. Stages nest, and a nested one is said indented under its parent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

Say = Callable[[str], None]
T = TypeVar("T")

_listener: ContextVar[Say | None] = ContextVar("stage_listener", default=None)
_depth: ContextVar[int] = ContextVar("stage_depth", default=0)


@contextmanager
def listening(say: Say | None) -> Iterator[None]:
    """Within the block, every `stage` and `note` in this context is said through `say`
    (None: nothing is)."""
    token = _listener.set(say)
    try:
        yield
    finally:
        _listener.reset(token)


def heard(say: Say | None, fn: Callable[[], T]) -> Callable[[], T]:
    """`fn` to run wherever it will run (another thread too), with its stages said through
    `say`, indented one step under the line its caller has already said for it."""

    def run() -> T:
        with listening(say):
            token = _depth.set(_depth.get() + 1)
            try:
                return fn()
            finally:
                _depth.reset(token)

    return run


def note(message: str) -> None:
    """Say `message` at the current depth, to the listener if there is one."""
    say = _listener.get()
    if say is not None:
        say("  " * _depth.get() + message)


@contextmanager
def stage(what: str) -> Iterator[None]:
    """Say `what` as it begins and, with its seconds, as it ends; a stage that raises is
    said to have failed after its seconds, and the error goes on."""
    if _listener.get() is None:
        yield
        return
    note(f"{what} ...")
    started = time.perf_counter()
    token = _depth.set(_depth.get() + 1)
    try:
        yield
    except BaseException:
        _depth.reset(token)
        note(f"{what}: failed after {time.perf_counter() - started:.1f} s")
        raise
    _depth.reset(token)
    note(f"{what}: {time.perf_counter() - started:.1f} s")


def counted(items: Sequence[T], name: Callable[[T], str]) -> Iterator[T]:
    """Each of `items` in turn; once the caller's work on one is done, "k/n <name>: seconds"
    is said, so a long loop of compiles or captures shows how far it is and what each cost."""
    for k, item in enumerate(items, start=1):
        started = time.perf_counter()
        yield item
        note(f"{k}/{len(items)} {name(item)}: {time.perf_counter() - started:.1f} s")
