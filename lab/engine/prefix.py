"""Prompt prefixes written once and reused: the voice prefix cache.

Every request to one voice starts with the same tokens (the voice's name and the turn's
opening, or a speaker's reference tokens for a cloned voice). Prefilling them again for every
request costs a pass over the weights per arrival, which stalls every decoding stream, and
adds to time to first audio. `PrefixStore` keeps their K/V, written once at load; a request
whose prompt starts with a stored prefix gets a copy in its slot at admission and prefills
only the rest (`Request.n_cached`). A copy costs prefix x layers x K/V bytes of device
bandwidth (about 20 MB for 200 tokens of the Orpheus-3B shape in bf16: microseconds), so
slots stay private and the decode step, its graphs and its key buckets need not know.
"""

from __future__ import annotations

from collections.abc import Sequence

from lab.engine.cache import StaticLayer


class PrefixStore:
    """Saved K/V per token prefix, and the longest one a prompt can reuse."""

    def __init__(self) -> None:
        self._saved: dict[tuple[int, ...], StaticLayer] = {}

    def __len__(self) -> int:
        return len(self._saved)

    def clear(self) -> None:
        """Forget every prefix: requests queued from now on prefill their whole prompt."""
        self._saved.clear()

    def add(self, ids: Sequence[int], saved: StaticLayer) -> None:
        self._saved[tuple(ids)] = saved

    def match(self, prompt: Sequence[int]) -> int:
        """Tokens of the longest stored prefix that `prompt` starts with and goes past (the
        prompt's last token must still run: its logits pick the first output token)."""
        best = 0
        for ids in self._saved:
            if best < len(ids) < len(prompt) and tuple(prompt[:len(ids)]) == ids:
                best = len(ids)
        return best

    def saved(self, prompt: Sequence[int], length: int) -> StaticLayer:
        """The K/V stored for the first `length` tokens of `prompt` (a `match`)."""
        return self._saved[tuple(prompt[:length])]

    def nbytes(self) -> int:
        return sum(part.numel() * part.element_size()
                   for saved in self._saved.values() for part in saved if part is not None)
