"""What text is refused, cleaned or flagged before it reaches the phonemizer.

Control characters are stripped rather than refused: they come from copy-paste, terminals and
PDF extraction, carry no sound, and would otherwise reach espeak-ng, whose C interface stops
reading at a NUL byte and so drops everything after it without a word. Refusing them would
turn a harmless artifact into a failed request; only text left with nothing to say is refused.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from lab.frontend.errors import TextError

LINE_BREAKS = str.maketrans({"\r": "\n", "\u2028": "\n", "\u2029": "\n", "\x85": "\n"})
KEPT_CONTROLS = {"\n", "\t"}
NON_ENGLISH_SHARE = 0.5
ACCENTED_SHARE = 0.15
ACCENTED_MIN = 3


@dataclass(frozen=True)
class CheckedText:
    """Text that passed the checks, with control characters removed, and notes for the caller."""

    text: str
    warnings: list[str] = field(default_factory=list)


def strip_controls(text: str) -> str:
    """Drop control, format, surrogate and unassigned code points; keep newlines and tabs."""
    text = text.replace("\r\n", "\n").translate(LINE_BREAKS)
    return "".join(
        ch for ch in text if ch in KEPT_CONTROLS or unicodedata.category(ch)[0] != "C"
    )


def is_speakable(text: str) -> bool:
    """True when some letter or digit is present; punctuation, symbols and emoji alone are not."""
    return any(unicodedata.category(ch)[0] in "LN" for ch in text)


def check_text(text: object, max_chars: int, voice: str = "en-us") -> CheckedText:
    """Refuse text that cannot be spoken, strip control characters, and flag foreign scripts."""
    if not isinstance(text, str):
        raise TextError(f"text must be a str, not {type(text).__name__}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars={max_chars!r} must be a positive integer")
    if len(text) > max_chars:
        raise TextError(
            f"text is {len(text)} characters, over the limit of {max_chars} (max_chars); "
            "shorten it or raise max_chars"
        )
    if not text.strip():
        raise TextError("text is empty" if not text else "text is only whitespace")
    cleaned = strip_controls(text)
    if not cleaned.strip():
        raise TextError("text has only control characters and nothing to speak")
    if not is_speakable(cleaned):
        raise TextError(
            "text has nothing to speak: no letters or digits, only punctuation, symbols or emoji"
        )
    note = script_warning(cleaned, voice)
    return CheckedText(cleaned, [note] if note else [])


def letter_script(ch: str) -> str:
    """The writing system of one letter, named as a person would say it."""
    if ch.isascii():
        return "Latin"
    first = unicodedata.name(ch, "UNKNOWN").split()[0]
    if first == "LATIN":
        return "accented Latin"
    return "CJK" if first == "CJK" else first.title()


def script_warning(text: str, voice: str) -> str | None:
    """A note when an English voice is given text mostly in another script.

    The text is still spoken, because a rough reading beats a refusal in a lab that measures
    speed; the note lets the UI say why the audio sounds wrong.
    """
    if not voice.lower().startswith("en"):
        return None
    scripts = Counter(letter_script(ch) for ch in text if ch.isalpha())
    total = sum(scripts.values())
    if not total:
        return None
    foreign = Counter({name: n for name, n in scripts.items() if name != "Latin"})
    tail = f"spoken with the {voice} phonemizer"
    if foreign.total() / total > NON_ENGLISH_SHARE:
        return f"text looks non-English ({foreign.most_common(1)[0][0]}); {tail}"
    accented = scripts["accented Latin"]
    if accented >= ACCENTED_MIN and accented / total >= ACCENTED_SHARE:
        return f"text looks non-English (accented Latin); {tail}"
    other = Counter({name: n for name, n in foreign.items() if name != "accented Latin"})
    if other:
        name, count = other.most_common(1)[0]
        return f"text mixes in {name} letters ({count} of {total}); {tail}"
    return None
