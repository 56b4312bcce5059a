"""What text is refused, cleaned or flagged before it reaches the phonemizer.

Control characters become word breaks rather than being refused: they come from copy-paste,
terminals and PDF extraction, carry no sound, and would otherwise reach espeak-ng, whose C
interface stops reading at a NUL byte and so drops everything after it without a word. They
become a space rather than nothing because they sat between two words as often as not.
Terminal escape sequences (colours, window titles) are removed whole: after the escape
character comes markup, not words. Emoji and other pictographic symbols are dropped with a
note, because espeak-ng reads out their Unicode names ("grinning face"), which no reader says.
Refusing any of these would turn a harmless artifact into a failed request; only text left
with nothing to say is refused.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from lab.frontend.errors import TextError
from lab.frontend.normalize import CURRENCIES, SYMBOLS

LINE_BREAKS = str.maketrans({"\r": "\n", "\u2028": "\n", "\u2029": "\n", "\x85": "\n"})
KEPT_CONTROLS = {"\n", "\t"}
NON_ENGLISH_SHARE = 0.5
ACCENTED_SHARE = 0.15
ACCENTED_MIN = 3

# CSI (colours, cursor moves); OSC and the other string forms (titles, links, images) up to
# BEL or ST, or to the line's end when unterminated; else ESC, intermediates and a final byte.
# A space is not taken as an intermediate, so a stray ESC before a word does not eat it.
ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    r"|(?:\x1b[\]PX^_]|\x9d)[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\x21-\x2f]*[\x30-\x7e]"
)
WORD_BREAKING = r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b]"
SPOKEN_SYMBOLS = {*SYMBOLS, *CURRENCIES}
SKIN_TONES = "\U0001f3fb-\U0001f3ff"
EMOJI_TAIL = f"[\ufe0e\ufe0f{SKIN_TONES}\U000e0020-\U000e007f]*"
KEYCAP = re.compile(r"([0-9#*])\ufe0f?\u20e3 *")
STRAY_SELECTORS = re.compile("[\ufe0e\ufe0f\u20e3]")
SYMBOL_PLANES = 0x20000  # Unicode assigns So only in the basic and supplementary planes


@dataclass(frozen=True)
class CheckedText:
    """Text that passed the checks, cleaned for speaking, and notes for the caller."""

    text: str
    warnings: list[str] = field(default_factory=list)


def _as_break(item: str) -> re.Pattern:
    """A run of `item`s with the spaces around it, so the whole run becomes one space."""
    return re.compile(f" *(?:{item})(?: *(?:{item}))* *")


CONTROL_RUN = _as_break(WORD_BREAKING)


def strip_escapes(text: str) -> str:
    """Remove terminal escape sequences whole, so "\\x1b[31m" leaves no "[31m" to be read."""
    return ESCAPE.sub("", text)


def strip_controls(text: str) -> str:
    """Turn control characters and zero-width spaces into word breaks; keep newlines and tabs.

    Other invisible code points (format, surrogate, private-use, unassigned) are dropped, as
    they sit inside words: soft hyphens, joiners, byte-order marks.
    """
    text = CONTROL_RUN.sub(" ", text.replace("\r\n", "\n").translate(LINE_BREAKS))
    return "".join(
        ch for ch in text if ch in KEPT_CONTROLS or unicodedata.category(ch)[0] != "C"
    )


def is_pictograph(ch: str) -> bool:
    """A symbol (So) with no reading: not one normalize_text speaks (°), nor letters in NFKC (℃)."""
    return (
        unicodedata.category(ch) == "So"
        and ch not in SPOKEN_SYMBOLS
        and not is_speakable(unicodedata.normalize("NFKC", ch))
    )


def _char_class(points: list[int]) -> str:
    """A regex class of sorted code points as ranges; thousands of single members match slowly."""
    ranges: list[list[int]] = []
    for cp in points:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges) + "]"


@cache
def _emoji_patterns() -> tuple[re.Pattern, re.Pattern]:
    """One emoji, and a run of them; built on first use, as finding every So takes a moment.

    An emoji is a pictograph, a flag (two regional indicators) or a lone skin tone, with its
    presentation selector, skin tone and tags, and any further pictographs joined by ZWJ.
    """
    pictograph = _char_class([cp for cp in range(SYMBOL_PLANES) if is_pictograph(chr(cp))])
    base = f"(?:[\U0001f1e6-\U0001f1ff]{{2}}|{pictograph}|[{SKIN_TONES}])"
    emoji = f"{base}{EMOJI_TAIL}(?:\u200d{pictograph}{EMOJI_TAIL})*"
    return re.compile(emoji), _as_break(emoji)


def drop_pictographs(text: str) -> tuple[str, int]:
    """Text with each run of emoji made one space, and how many emoji there were.

    A keycap ("1️⃣") keeps its digit, followed by a break so that "1️⃣2️⃣" stays two digits.
    """
    one, run = _emoji_patterns()
    count = len(one.findall(text))
    text = KEYCAP.sub(r"\1 ", run.sub(" ", text))
    return STRAY_SELECTORS.sub("", text), count


def is_speakable(text: str) -> bool:
    """True when some letter or digit is present; punctuation, symbols and emoji alone are not."""
    return any(unicodedata.category(ch)[0] in "LN" for ch in text)


def clean(text: str) -> tuple[str, int]:
    """Text ready to speak, and how many emoji were dropped from it.

    Escapes go first because they start with a control character, and emoji before controls
    because the joiners inside an emoji are invisible format characters.
    """
    text, dropped = drop_pictographs(strip_escapes(text))
    return strip_controls(text), dropped


def _dropped_note(count: int) -> str:
    if count == 1:
        return "1 emoji or pictographic symbol was dropped; it is not spoken"
    return f"{count} emoji or pictographic symbols were dropped; they are not spoken"


def check_text(text: object, max_chars: int, voice: str = "en-us") -> CheckedText:
    """Refuse text that cannot be spoken, clean it (see module docstring), flag foreign scripts."""
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
    cleaned, dropped = clean(text)
    if not cleaned.strip() and not dropped:
        raise TextError(
            "text has only control characters or escape sequences and nothing to speak"
        )
    if not is_speakable(cleaned):
        raise TextError(
            "text has nothing to speak: no letters or digits, only punctuation, symbols or emoji"
        )
    notes = [_dropped_note(dropped)] if dropped else []
    note = script_warning(cleaned, voice)
    return CheckedText(cleaned, notes + ([note] if note else []))


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
