"""Where each streamed chunk decodes and which of its samples it keeps.

A chunk owns `interval` frames and decodes them with `overlap` frames of context on each side, so
its work is a fixed window however long the utterance is (never a re-decode of everything so far).
Each chunk after the first also keeps `fade` samples *before* its owned region, which overlap the
previous chunk's last samples and are blended by the Crossfader.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    first: int          # first owned frame
    last: int           # one past the last owned frame
    start: int          # first decoded frame (with left context)
    stop: int           # one past the last decoded frame (with right context)
    keep_from: int      # sample offset inside the decoded window where kept audio begins
    keep_to: int        # sample offset inside the decoded window where kept audio ends


def plan_windows(n_frames: int, interval: int, overlap: int, hop: int,
                 fade: int) -> list[Window]:
    """Cut n_frames into windows; `fade` must fit inside the left context."""
    if interval < 1:
        raise ValueError(f"decode interval must be >= 1 frame, got {interval}")
    if fade > overlap * hop:
        raise ValueError(
            f"crossfade of {fade} samples needs at least {-(-fade // hop)} frames of overlap, "
            f"got {overlap}")
    if fade > interval * hop:
        raise ValueError(f"crossfade of {fade} samples is longer than a chunk ({interval * hop})")
    windows = []
    for first in range(0, n_frames, interval):
        last = min(first + interval, n_frames)
        start, stop = max(first - overlap, 0), min(last + overlap, n_frames)
        lead = fade if first > 0 else 0
        keep_from = (first - start) * hop - lead
        windows.append(Window(first, last, start, stop, keep_from, (last - start) * hop))
    return windows
