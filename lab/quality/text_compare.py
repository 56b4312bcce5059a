"""Word and character error rates between the text we asked for and the text the recogniser heard.

Both sides are normalised first so that only audible differences count: "42" and "forty two",
"Hello," and "hello", "well-known" and "well known" are the same speech. A different normaliser
can be passed for a voice that reads its input differently from the lab's frontend. The
alignment itself is jiwer's (the library behind Hugging Face `evaluate`'s WER), so our rates
are computed the way other reports compute theirs and only the normalisation is the lab's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import jiwer

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


def word_edits(
    reference: str, hypothesis: str, normalizer: Normalizer = normalize_text
) -> EditCounts:
    """Word-level edits between two texts after normalising both."""
    ref, hyp = _normalised(reference, hypothesis, normalizer, "words")
    return _counts(jiwer.process_words(ref, hyp))


def char_edits(
    reference: str, hypothesis: str, normalizer: Normalizer = normalize_text
) -> EditCounts:
    """Character-level edits, spaces included, so a split or merged word costs one edit."""
    ref, hyp = _normalised(reference, hypothesis, normalizer, "characters")
    return _counts(jiwer.process_characters(ref, hyp))


def wer(reference: str, hypothesis: str, normalizer: Normalizer = normalize_text) -> float:
    """Word error rate as a fraction (0.02 is two percentage points); can exceed 1.0."""
    return word_edits(reference, hypothesis, normalizer).rate


def cer(reference: str, hypothesis: str, normalizer: Normalizer = normalize_text) -> float:
    """Character error rate over the normalised texts, spaces included, as a fraction."""
    return char_edits(reference, hypothesis, normalizer).rate


def _normalised(
    reference: str, hypothesis: str, normalizer: Normalizer, unit: str
) -> tuple[str, str]:
    """Both texts as they would be spoken, refusing a reference with nothing left to compare."""
    ref = normalizer(reference)
    if not ref.strip():
        raise TextCompareError(f"reference text {reference!r} has no {unit} after normalisation")
    return ref, normalizer(hypothesis)


def _counts(output: jiwer.WordOutput | jiwer.CharacterOutput) -> EditCounts:
    return EditCounts(
        substitutions=output.substitutions,
        deletions=output.deletions,
        insertions=output.insertions,
        reference_length=output.hits + output.substitutions + output.deletions,
    )
