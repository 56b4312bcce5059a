"""Text frontend: raw text in, per-sentence phoneme ids for a Piper VITS voice out.

`prepare` is the one entry point the pipeline needs. It checks the text, cuts it into
sentences of bounded length, spells out numbers and abbreviations, phonemizes with espeak-ng
and maps phonemes to ids, collecting anything the caller should tell the user as warnings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lab.frontend.corpus import list_sentence_sets, sentence_set
from lab.frontend.errors import TextError
from lab.frontend.fixed_length import fixed_length_sentences, made_up_sentences
from lab.frontend.normalize import normalize_text
from lab.frontend.phonemes import IdMapping, phoneme_ids, phonemize
from lab.frontend.sentences import DEFAULT_BUDGET, chunk, split_sentences
from lab.frontend.validation import check_text, is_speakable

__all__ = [
    "IdMapping",
    "PreparedText",
    "Sentence",
    "TextError",
    "check_text",
    "fixed_length_sentences",
    "made_up_sentences",
    "is_speakable",
    "list_sentence_sets",
    "normalize_text",
    "phoneme_ids",
    "phonemize",
    "prepare",
    "sentence_set",
    "split_sentences",
]


@dataclass(frozen=True)
class Sentence:
    """One model input: the source text, what was spoken, its phonemes and its ids."""

    text: str
    normalized: str
    phonemes: str
    ids: list[int]
    skipped: int = 0


@dataclass(frozen=True)
class PreparedText:
    sentences: list[Sentence]
    warnings: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[list[int]]:
        return [s.ids for s in self.sentences]


def prepare(
    text: str,
    phoneme_id_map: Mapping[str, Sequence[int]],
    espeak_voice: str = "en-us",
    max_chars: int = 5000,
    max_sentence_chars: int = DEFAULT_BUDGET,
) -> PreparedText:
    """Turn user text into model inputs, or raise TextError saying what is wrong with it.

    Normalization spells numbers out in English, so it runs only for English espeak voices;
    other voices get the text as written and espeak-ng reads numbers in their language.
    """
    checked = check_text(text, max_chars, espeak_voice)
    english = espeak_voice.lower().startswith("en")
    sentences: list[Sentence] = []
    missing: Counter[str] = Counter()
    for piece in split_sentences(checked.text, max_sentence_chars):
        if not is_speakable(piece):
            continue
        for source, spoken in _fit(piece, max_sentence_chars, english):
            phonemes = phonemize(spoken, espeak_voice)
            if not phonemes:
                continue
            mapping = phoneme_ids(phonemes, phoneme_id_map)
            missing.update(mapping.missing)
            sentences.append(
                Sentence(source, spoken, "".join(phonemes), mapping.ids, mapping.skipped)
            )
    if not sentences:
        raise TextError("text produced no phonemes: there is nothing the voice can say")
    warnings = list(checked.warnings)
    if missing:
        listed = ", ".join(f"{p!r} x{n}" for p, n in missing.most_common())
        warnings.append(
            f"{missing.total()} phonemes unknown to the voice were skipped ({listed})"
        )
    return PreparedText(sentences, warnings)


def _fit(piece: str, budget: int, english: bool) -> list[tuple[str, str]]:
    """(source, spoken) pairs whose spoken form fits the budget.

    Spelling out numbers lengthens text, so a piece that fits as written may not fit spoken;
    such a piece is cut smaller in proportion and tried again.
    """
    spoken = normalize_text(piece) if english else piece
    if len(spoken) <= budget or len(piece) <= 1:
        return [(piece, spoken)] if spoken else []
    smaller = max(1, len(piece) * budget // len(spoken))
    return [pair for part in chunk(piece, smaller) for pair in _fit(part, budget, english)]
