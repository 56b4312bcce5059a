"""The compile knob: one table from what the user picks to what torch.compile is asked for.

Inductor's own CUDA graphs are always off, whatever the choice. Where shapes are fixed (the LM
decode step) the lab captures the whole step as one CUDA graph itself (`lab.engine.graphs`),
and inductor's graphs inside it would only be captured again. Where shapes vary per text (the
voice's vocoder, the codec's windows) no graph is captured at all: inductor would record a new
graph for every new length, paying capture time and memory for replays that never come. So:

- "none": run eagerly.
- "default": inductor's default mode.
- "reduce-overhead": inductor's default mode; the launch overhead it names is removed by the
  lab's own graphs where shapes are fixed, and stays where they vary (`compile_note` says so).
- "max-autotune": inductor's autotuned kernels ("max-autotune-no-cudagraphs"); graphs as above.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CompileMode:
    """What one compile choice asks of torch.compile.

    `inductor` is the mode handed to torch.compile (None: do not compile). `wants_graphs` marks
    the choices that, in torch's own vocabulary, include CUDA graphs: where the lab captures
    none, the user is told rather than left to assume.
    """

    inductor: str | None
    wants_graphs: bool = False


COMPILE_MODES: dict[str, CompileMode] = {
    "none": CompileMode(None),
    "default": CompileMode("default"),
    "reduce-overhead": CompileMode("default", wants_graphs=True),
    "max-autotune": CompileMode("max-autotune-no-cudagraphs", wants_graphs=True),
}
# benchmarks/engine_ladder.py names inductor's own mode as a decode mode; the engine accepts it,
# but it is no user choice (it means what "max-autotune" already means).
ENGINE_ALIASES: dict[str, CompileMode] = {
    "max-autotune-no-cudagraphs": CompileMode("max-autotune-no-cudagraphs"),
}
_ALL = {**COMPILE_MODES, **ENGINE_ALIASES}
# Every name that compiles something, user choices first: the engine's compiled decode modes.
COMPILED_MODES = tuple(name for name, mode in _ALL.items() if mode.inductor is not None)


def _lookup(mode: str) -> CompileMode:
    if mode not in _ALL:
        raise ValueError(f"compile mode {mode!r} is not valid; choose one of {list(COMPILE_MODES)}")
    return _ALL[mode]


def inductor_mode(mode: str) -> str | None:
    """The inductor mode for a compile choice (or an engine alias); None for "none"."""
    return _lookup(mode).inductor


def decode_options(mode: str, rows: int) -> dict[str, bool]:
    """Inductor's options for an LM decode step of `rows` rows under a compile choice: the
    mode's own, and for one row coordinate-descent tuning. At one row every projection is a
    matrix-vector product, which inductor rewrites as a fused reduction (reading each weight
    once, with the norm before it folded in) only when that tuning is on; without it they stay
    cuBLAS calls (the Orpheus-3B step on an H100: 2.82 ms against 3.07, a one-off probe).
    With more rows nothing is rewritten, and the tuning only lengthens compilation: about 40 s
    more per batch size for that step (the same probe). Set here rather than left to the
    process: torchao's quantize_ switches the tuning on for every later compile."""
    inductor = inductor_mode(mode)
    if inductor is None:
        raise ValueError(f"compile mode {mode!r} compiles nothing")
    from torch._inductor import list_mode_options  # inductor loads only where something compiles

    return {**list_mode_options(inductor), "coordinate_descent_tuning": rows == 1}


def compiled(fn: Callable, mode: str, *, dynamic: bool) -> Callable:
    """`fn` compiled for `mode` (itself for "none"). Compilation is lazy: an error surfaces at
    the first call, which the caller's warm-up makes before any user request."""
    inductor = inductor_mode(mode)
    if inductor is None:
        return fn
    return torch.compile(fn, mode=inductor, dynamic=dynamic)


def compile_note(mode: str, where: str) -> str | None:
    """What the user should know when `mode` asked for CUDA graphs on `where`, a part whose
    shapes vary per text, so that none is captured there; None when there is nothing to say."""
    if not _lookup(mode).wants_graphs:
        return None
    return f"compile={mode}: {where} compiled without CUDA graphs: shapes vary per text"


class EagerOnFailure:
    """`fn` compiled for `mode`; the first compiled call that fails is noted in `notes` and
    rerun eagerly, and every later call stays eager, so a compiler failure never costs the
    output (the codecs decode through this)."""

    def __init__(self, fn: Callable, mode: str, what: str, notes: list[str], *,
                 dynamic: bool) -> None:
        self.eager, self.mode, self.what, self.notes = fn, mode, what, notes
        self.fn = compiled(fn, mode, dynamic=dynamic)

    @property
    def compiles(self) -> bool:
        """Whether calls still go to the compiled `fn`."""
        return self.fn is not self.eager

    @contextlib.contextmanager
    def eagerly(self) -> Iterator[None]:
        """Calls inside run `fn` uncompiled: for shapes that would compile it once more, at a
        cost only paid where they are captured in a CUDA graph (`lab.stream.codec_graphs`)."""
        fn, self.fn = self.fn, self.eager
        try:
            yield
        finally:
            self.fn = fn

    def __call__(self, *args):
        try:
            return self.fn(*args)
        except Exception as err:
            if self.fn is self.eager:
                raise
            self.notes.append(f"{self.what} torch.compile({self.mode}) failed "
                              f"({type(err).__name__}: {err}); decoding eagerly")
            self.fn = self.eager
            return self.eager(*args)
