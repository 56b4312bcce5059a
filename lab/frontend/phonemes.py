"""Text to espeak-ng phonemes, and phonemes to the ids a Piper VITS voice was trained on."""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

BOS, PAD, EOS = "^", "_", "$"

_ESPEAK_LOCK = threading.Lock()
LETTER_DOT = r"[^\W\d_][^\w\s.]*\.[^\w\s]*"
LETTER_CHAIN = re.compile(rf"(?:{LETTER_DOT}){{8,}}")


@functools.lru_cache(maxsize=4096)
def _espeak(text: str, voice: str) -> tuple[str, ...]:
    """Cached because benchmarks and the app send the same sentences again and again.

    espeak-ng keeps global state, so calls from the app's worker threads are serialised. It is
    imported here, not at module load: only the voice reads phonemes, and families that read
    words (Orpheus) run where espeak-ng has no build.
    """
    from piper_phonemize import phonemize_espeak

    with _ESPEAK_LOCK:
        try:
            clauses = phonemize_espeak(text, voice)
        except RuntimeError as err:
            raise ValueError(f"espeak-ng has no voice {voice!r}: {err}") from err
    phonemes: list[str] = []
    for clause in clauses:
        if clause and phonemes:
            phonemes.append(" ")
        phonemes.extend(clause)
    return tuple(phonemes)


def phonemize(text: str, voice: str = "en-us") -> list[str]:
    """IPA phonemes of `text`, one code point each, as Piper's espeak voices expect.

    espeak-ng may cut the text into several sentences of its own; they are joined with a
    space so that one frontend sentence stays one model input.
    """
    return list(_espeak(break_letter_chains(text), voice))


def break_letter_chains(text: str) -> str:
    """Put a space after each letter in runs like "a.b.c.d.e.f.g.h.".

    espeak-ng reads such a run as one abbreviation and crashes the whole process (a buffer
    overflow, not an exception) once it passes about 130 bytes: 26 four-byte letters or 87
    ASCII ones. Real initialisms are far shorter than the 8 letters this leaves alone.
    """
    return LETTER_CHAIN.sub(lambda m: re.sub(LETTER_DOT, r"\g<0> ", m[0]), text)


@dataclass(frozen=True)
class IdMapping:
    """Model input ids, and the phonemes the voice does not know (left out of `ids`)."""

    ids: list[int]
    missing: Counter[str]

    @property
    def skipped(self) -> int:
        return sum(self.missing.values())


def phoneme_ids(
    phonemes: Iterable[str], phoneme_id_map: Mapping[str, Sequence[int]]
) -> IdMapping:
    """Map phonemes to ids the way Piper trained its voices.

    The sequence is BOS, PAD, then each known phoneme followed by PAD, then EOS:
    [^, _, p1, _, p2, _, ..., pn, _, $]. The pads give the VITS duration predictor a slot
    between every pair of sounds. Unknown phonemes are skipped, pad included, and counted.
    """
    absent = [s for s in (BOS, PAD, EOS) if s not in phoneme_id_map]
    if absent:
        raise ValueError(f"phoneme_id_map lacks the special symbols {absent}; is it a Piper map?")
    pad = list(phoneme_id_map[PAD])
    ids = [*phoneme_id_map[BOS], *pad]
    missing: Counter[str] = Counter()
    for phoneme in phonemes:
        if phoneme not in phoneme_id_map:
            missing[phoneme] += 1
            continue
        ids += phoneme_id_map[phoneme]
        ids += pad
    ids += phoneme_id_map[EOS]
    return IdMapping(ids=ids, missing=missing)
