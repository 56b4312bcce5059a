"""Score many renderings: in worker processes where that is faster, with a progress bar.

A verdict over a sentence set runs every meter on every sentence twice (baseline and
candidate), and the meters, not the voice, are then the slow part of a sweep. The sentences are
independent, so they can be scored in parallel. Threads would not help: the recogniser holds one
decoder behind a lock and the fidelity meters are Python loops. So the work goes to a pool of
worker processes, started once (each loads its own meters) and reused for every later call.

Workers start with `spawn`: a forked child would inherit the parent's torch and onnxruntime
thread pools mid-state, which can hang. `workers=1` scores in this process.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

import numpy as np
from tqdm import tqdm

from lab.quality.report import QualityScores, evaluate

WORKERS_ENV = "LAB_SCORE_WORKERS"
_pool: ProcessPoolExecutor | None = None
_pool_size = 0


def default_workers() -> int:
    """$LAB_SCORE_WORKERS, else one worker per two cores, so one process on a 2-core machine.

    DNSMOS dominates the scoring time and onnxruntime already spreads each of its windows
    over every core, so on 2 cores two worker processes only fight over them: measured on 12
    short sentences with fidelity, 17.5-19.9 s in this process against 16.9-18.0 s in two
    workers (quiet machine), and no better with one onnxruntime thread per worker. With more
    cores than onnxruntime uses well, processes are the way to use them (not measured here).
    """
    env = os.environ.get(WORKERS_ENV)
    return max(1, int(env) if env else (os.cpu_count() or 1) // 2)


def score_many(audio: Sequence[np.ndarray], sample_rate: int, texts: Sequence[str],
               references: Sequence[np.ndarray] | None = None,
               reference_rate: int | None = None, *, workers: int | None = None,
               desc: str = "scoring") -> list[QualityScores]:
    """`evaluate` on each (audio, text[, reference]) in order, with a tqdm bar (the app's
    progress tracker shows it in the browser)."""
    if len(audio) != len(texts):
        raise ValueError(f"{len(audio)} renderings but {len(texts)} texts; give one text per "
                         "rendering")
    if references is not None and len(references) != len(audio):
        raise ValueError(f"{len(references)} references for {len(audio)} renderings")
    if not audio:
        raise ValueError("nothing to score: the sentence list is empty")
    refs = list(references) if references is not None else [None] * len(audio)
    jobs = [(a, sample_rate, t, r, reference_rate) for a, t, r in zip(audio, texts, refs,
                                                                       strict=True)]
    count = min(workers or default_workers(), len(jobs))
    with tqdm(total=len(jobs), desc=desc, unit="sentence") as bar:
        if count <= 1:
            out = []
            for job in jobs:
                out.append(_score(job))
                bar.update()
            return out
        results: list[QualityScores | None] = [None] * len(jobs)
        try:
            pool = _shared_pool(count)
            futures = {pool.submit(_score, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update()
        except BrokenProcessPool as err:
            # A script without an `if __name__ == "__main__":` guard cannot spawn workers.
            shutdown()
            warnings.warn(f"scoring workers failed ({err}); scoring in this process instead",
                          RuntimeWarning, stacklevel=2)
            for i, job in enumerate(jobs):
                if results[i] is None:
                    results[i] = _score(job)
                    bar.update()
    return results  # type: ignore[return-value]


def shutdown() -> None:
    """Stop the worker processes (they also stop when this process exits)."""
    global _pool, _pool_size
    if _pool is not None:
        _pool.shutdown(cancel_futures=True)
    _pool, _pool_size = None, 0


def _shared_pool(size: int) -> ProcessPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size != size:
        shutdown()
        _pool = ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=_quiet_threads)
        _pool_size = size
    return _pool


def _quiet_threads() -> None:
    """One intra-op thread per worker: the workers are the parallelism, and a worker's torch
    pool as wide as the machine would fight the others for the same cores."""
    import torch

    torch.set_num_threads(1)


def _score(job: tuple) -> QualityScores:
    audio, rate, text, reference, reference_rate = job
    return evaluate(audio, rate, text, reference=reference, reference_rate=reference_rate)


atexit.register(shutdown)
