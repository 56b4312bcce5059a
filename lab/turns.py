"""How a stream says it waits on work it shares with other streams.

Streams of one autoregressive engine all advance in the same step: whoever runs the step serves
every one of them. A stream that has no audio yet therefore needs no turn of its own; it needs
the step to run once per round and to be resumed when its audio is there. It says so by yielding
a `Shared` to the pipeline's worker, which runs each distinct `advance` once per round and
resumes the stream only once `ready()` holds. A round over a hundred streams then costs one
step and a flag check per stream, where resuming each stream's generators to learn that it has
nothing cost the serving thread more than a millisecond a step (`lab.worker`).

A stream that names itself (`key`) is not even asked: the shared work reports the keys it gave
news to, and the worker wakes those streams only. A round over two hundred waiting streams then
costs the worker a cancellation check per stream instead of a call into each.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class Shared:
    """Yielded by a stream that waits: `advance()` is the shared work (one engine step), and
    `ready()` says whether this stream has something to hand out (audio, or its end).

    With a `key`, `advance()` returns the keys of every stream it gave something to hand out,
    and a stream whose key it does not return stays not ready."""

    advance: Callable[[], object]
    ready: Callable[[], bool]
    key: Hashable = None
