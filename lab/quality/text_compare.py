"""Word and character error rates between the text we asked for and the text the recogniser heard.

Both sides are normalised first so that only audible differences count: "42" and "forty two",
"Hello," and "hello", "well-known" and "well known" are the same speech. A different normaliser
can be passed for a voice that reads its input differently from the lab's frontend.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lab.frontend import normalize_text as spoken_text

Normalizer = Callable[[str], str]

_DASHES = re.compile(r"[-\u2010-\u2015\u2212]")
_NOT_SPOKEN = re.compile(r"[^\w\s']|_")
_LOOSE_APOSTROPHE = re.compile(r"(?<!\w)'|'(?!\w)")


class TextCompareError(ValueError):
    """The reference text has nothing to compare against once normalised."""


@dataclass(frozen=True)
class EditCounts:
    """How a hypothesis differs from a reference: the three edit kinds of a minimal alignment."""

    substitutions: int
    deletions: int
    insertions: int
    reference_length: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        """Errors per reference token; above 1.0 when the hypothesis adds many tokens."""
        return self.errors / self.reference_length


def normalize_text(text: str) -> str:
    """Lowercase spoken words only: read the way the voice reads it, punctuation gone.

    The text frontend's own normalisation spells out numbers, money, times and abbreviations,
    so the reference says exactly what the voice was asked to say. Hyphens become spaces;
    apostrophes inside words survive ("don't"), quotes around words do not.
    """
    text = spoken_text(text).replace("\u2019", "'").replace("\u2018", "'").lower()
    text = _DASHES.sub(" ", text)
    text = _NOT_SPOKEN.sub(" ", text)
    text = _LOOSE_APOSTROPHE.sub(" ", text)
    return " ".join(text.split())


def edit_counts(reference: Sequence[object], hypothesis: Sequence[object]) -> EditCounts:
    """Minimal substitutions, deletions and insertions turning `reference` into `hypothesis`.

    Rows of the Levenshtein table are filled with whole-array operations: within a row the
    insertion chain is a running minimum, so only the rows are looped over.
    """
    if not reference:
        raise TextCompareError("reference is empty; error rates are undefined")
    vocab: dict[object, int] = {}
    ref = np.array([vocab.setdefault(t, len(vocab)) for t in reference])
    hyp = np.array([vocab.setdefault(t, len(vocab)) for t in hypothesis], dtype=np.int64)
    columns = np.arange(hyp.size + 1)
    table = np.empty((ref.size + 1, hyp.size + 1), dtype=np.int64)
    table[0] = columns
    for i in range(1, ref.size + 1):
        above = table[i - 1]
        best = np.empty_like(above)
        best[0] = i
        best[1:] = np.minimum(above[1:] + 1, above[:-1] + (hyp != ref[i - 1]))
        table[i] = columns + np.minimum.accumulate(best - columns)
    return _count_edits(table, ref, hyp)


def _count_edits(table: np.ndarray, ref: np.ndarray, hyp: np.ndarray) -> EditCounts:
    """Walk back from the corner of a filled table, tallying each edit kind on one best path."""
    i, j = ref.size, hyp.size
    subs = dels = ins = 0
    while i > 0 or j > 0:
        if i > 0 and j > 0 and table[i, j] == table[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            subs += int(ref[i - 1] != hyp[j - 1])
            i, j = i - 1, j - 1
        elif i > 0 and table[i, j] == table[i - 1, j] + 1:
            dels += 1
            i -= 1
        else:
            ins += 1
            j -= 1
    return EditCounts(subs, dels, ins, ref.size)


def word_edits(
    reference: str, hypothesis: str, normalizer: Normalizer = normalize_text
) -> EditCounts:
    """Word-level edits between two texts after normalising both."""
    words = normalizer(reference).split()
    if not words:
        raise TextCompareError(f"reference text {reference!r} has no words after normalisation")
    return edit_counts(words, normalizer(hypothesis).split())


def wer(reference: str, hypothesis: str, normalizer: Normalizer = normalize_text) -> float:
    """Word error rate as a fraction (0.02 is two percentage points); can exceed 1.0."""
    return word_edits(reference, hypothesis, normalizer).rate


def cer(reference: str, hypothesis: str, normalizer: Normalizer = normalize_text) -> float:
    """Character error rate over the normalised texts, spaces included, as a fraction."""
    ref = normalizer(reference)
    if not ref:
        raise TextCompareError(
            f"reference text {reference!r} has no characters after normalisation"
        )
    return edit_counts(ref, normalizer(hypothesis)).rate
