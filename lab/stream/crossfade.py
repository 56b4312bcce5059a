"""Join streamed chunks with an equal-gain linear crossfade over their shared samples."""

from __future__ import annotations

import numpy as np


class Crossfader:
    """Holds back each chunk's last `fade` samples until the next chunk's matching lead-in arrives.

    Chunks after the first must start with `fade` samples that cover the same time as the held
    tail (see plan_windows). Emitted audio is therefore always final: nothing is revised later.
    """

    def __init__(self, fade: int) -> None:
        self.fade = fade
        self._tail: np.ndarray | None = None
        ramp = (np.arange(fade, dtype=np.float32) + 0.5) / max(fade, 1)
        self._fade_in = ramp
        self._fade_out = 1.0 - ramp

    def push(self, chunk: np.ndarray, last: bool = False) -> np.ndarray:
        """Take one chunk, return the samples that are now final."""
        if self._tail is not None and self.fade:
            head = chunk[: self.fade]
            chunk = np.concatenate(
                [self._tail * self._fade_out + head * self._fade_in, chunk[self.fade :]])
        if last or not self.fade:
            self._tail = None
            return chunk
        self._tail = chunk[-self.fade :]
        return chunk[: -self.fade]
