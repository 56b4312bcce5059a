"""A codec's window decode replayed from CUDA graphs, one per (batch bucket, frames).

A streaming codec decodes a few frames for whichever streams fall due, every step. Its device
work is small, but launching it is not: on an H100 the compiled SNAC decode cost about 7 ms
of host time per call (the compiled wrapper and the dispatch of some forty convolutions), and
with staggered streams a call falls due nearly every decode step. The LM's step runs on the
same host thread, so the codec's launches, not the GPU, capped the streams a GPU could keep in
real time. A captured decode costs one graph launch.

Shapes are fixed per graph: the batch is padded up to a bucket (padded rows decode code 0 and
are dropped), and each window length a stream can ask for (1 to `window.frames` frames) has its
graphs. Batches beyond the largest bucket run uncaptured. Most of those lengths only a stream
shorter than the longest window asks for, once, at its end (`StreamWindow.lengths` names the
others); they are captured at the smallest bucket alone, and a batch of one of them replays
that graph in pieces. With the Orpheus GPU preset's window that is 5 lengths at every bucket
and 6 at one, against 11 at every bucket.

A compiled decode is traced with dynamic sizes, but the compiler still specialises a size of 1:
batch 1, and windows of one frame, each compiled it once more (on a CPU, five compiles of the
SNAC decode over the buckets and windows a server captures, about 40 s each on one thread,
against one or two). So with a compiled decode the smallest bucket is 2 (one padded row is
cheap beside a compile), and one-frame windows, which only a stream's first or last chunk asks
for, are captured from the decode's eager version, which compiles nothing. On a GPU that saves
a compile (4 to 3 on an H200) but little time: most of a capture there is cuDNN planning its
convolutions for each new shape, about a second a (bucket, window) pair (`docs/engine.md`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable

import torch

from lab.engine.slots import bucket_sizes, smallest_bucket
from lab.quant.compile import EagerOnFailure
from lab.stages import counted, stage

BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


Decode = Callable[[torch.Tensor], torch.Tensor]


def codec_graphs(decode: Decode, frame_codes: int, device: torch.device, max_batch: int,
                 name: str, fallbacks: list[str], compiled: EagerOnFailure | None = None
                 ) -> CodecGraphs | None:
    """Graphs for a codec's window decode on a CUDA device; elsewhere None, with a note in
    `fallbacks` that the codec decodes uncaptured. `compiled`: the compiled part of `decode`
    (see `CodecGraphs`)."""
    if device.type == "cuda":
        return CodecGraphs(decode, frame_codes, device, max_batch, compiled=compiled)
    fallbacks.append(f"{name} CUDA graphs need a CUDA device; the codec is on {device.type} "
                     f"and decodes uncaptured")
    return None


class CodecGraphs:
    """`graphs(frames[B, F, C]) -> audio[B, F * frame_samples]` on the device, by replay.

    `decode` is the codec's device-side decode (long codes on its device in, float audio out).
    `compiled` is the compiled part of `decode`, if any: while it compiles, the buckets start
    at 2 and one-frame windows are captured with it run eagerly (the module's docstring says
    why). A capture that fails is recorded in `failure` and every later call decodes
    uncaptured.
    """

    def __init__(self, decode: Decode, frame_codes: int, device: torch.device,
                 max_batch: int = BATCHES[-1], batches: Iterable[int] = BATCHES,
                 compiled: EagerOnFailure | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch} must be >= 1")
        self.decode, self.frame_codes, self.device = decode, frame_codes, device
        self.compiled = compiled if compiled is not None and compiled.compiles else None
        self.buckets = graph_buckets(batches, max_batch, self.compiled is not None)
        self.failure: str | None = None
        self._inputs: dict[int, torch.Tensor] = {}
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._rare: set[int] = set()  # window lengths captured at the smallest bucket only
        self._pool = torch.cuda.graph_pool_handle()

    @property
    def captured(self) -> list[tuple[int, int]]:
        """(batch bucket, frames) pairs captured so far."""
        return sorted(self._graphs)

    def capture_windows(self, max_frames: int, fallbacks: list[str],
                        common: Collection[int] | None = None) -> None:
        """Capture windows of 1 to `max_frames` frames: those in `common` (every one when
        None) at every bucket, the rest at the smallest only; a failure lands in the codec's
        `fallbacks` once."""
        lengths = range(1, max_frames + 1)
        self._rare = set() if common is None else set(lengths) - set(common)
        with stage(f"capturing the codec's window decode: {len(self.buckets)} batch sizes for "
                   f"{max_frames - len(self._rare)} window lengths, 1 for {len(self._rare)}"):
            for frames in counted(lengths, lambda f: f"{f} frame(s)"):
                for bucket in self.buckets[:1] if frames in self._rare else self.buckets:
                    if self.failure is None:
                        self._graph(bucket, frames)
        if self.failure and self.failure not in fallbacks:
            fallbacks.append(self.failure)

    @torch.inference_mode()
    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        b, f = frames.shape[:2]
        if b > self.buckets[-1] or self.failure is not None:
            return self.decode(frames)
        if f in self._rare and b > self.buckets[0]:
            return torch.cat([self(piece) for piece in frames.split(self.buckets[0])])
        bucket = smallest_bucket(self.buckets, b, "batch")
        entry = self._graph(bucket, f)
        if entry is None:
            return self.decode(frames)
        graph, out = entry
        inputs = self._inputs[f]
        inputs[:b].copy_(frames, non_blocking=True)
        if b < bucket:
            inputs[b:bucket].zero_()
        graph.replay()
        return out[:b].clone()  # the graph's buffer is rewritten by its next replay

    def _graph(self, bucket: int, frames: int):
        if (bucket, frames) in self._graphs:
            return self._graphs[bucket, frames]
        if frames not in self._inputs:
            self._inputs[frames] = torch.zeros(self.buckets[-1], frames, self.frame_codes,
                                               dtype=torch.long, device=self.device)
        inputs = self._inputs[frames][:bucket]
        try:
            with uncompiled_for(self.compiled, frames):
                graph, out = self._capture(inputs)
        except Exception as err:  # any capture failure: say why, then decode uncaptured
            self.failure = (f"codec CUDA graph capture failed at batch {bucket}, {frames} "
                            f"frames ({type(err).__name__}: {err}); decoding uncaptured")
            self._graphs.clear()
            return None
        self._graphs[bucket, frames] = (graph, out)
        return graph, out

    def _capture(self, inputs: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """Warm the decode up on a side stream, then capture it: its graph and output."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self.decode(inputs)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = self.decode(inputs)
        return graph, out


def graph_buckets(batches: Iterable[int], max_batch: int, compiled: bool) -> tuple[int, ...]:
    """The batch buckets captured: `batches` up to `max_batch`, from 2 when the decode is
    compiled (a bucket of 1 would compile it once more), and never empty."""
    return bucket_sizes([n for n in batches if n > 1 or not compiled], max_batch)


def uncompiled_for(compiled: EagerOnFailure | None, frames: int
                   ) -> contextlib.AbstractContextManager:
    """Where a window of `frames` frames is captured: with the compiled part run eagerly for
    one frame, which would compile it once more (a size of 1); as it is otherwise."""
    if compiled is not None and frames == 1:
        return compiled.eagerly()
    return contextlib.nullcontext()
