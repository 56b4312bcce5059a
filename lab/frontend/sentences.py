"""Cut text into sentences, and cut sentences into pieces no longer than a budget.

Each piece becomes one model input. Short inputs keep the acoustic model's attention and
memory bounded, let streaming start after the first sentence, and keep one odd sentence from
stalling a whole batch.
"""

from __future__ import annotations

import re

from lab.frontend.normalize import ENDINGS, LATIN, TITLES

DEFAULT_BUDGET = 400
WORD_WINDOW = 32
BOUNDARY = re.compile(r"(?<![.!?;])[.!?;]+[\"')\]\u201d\u2019]*(?=\s)")
SOFT_BREAK = re.compile(r"[,:;)\u2013\u2014](?=\s)")
NEVER_BREAK = {w.lower() for w in (*TITLES, *LATIN, "St", "No")} - {"etc"}
BREAK_BEFORE_CAPITAL = {w.lower() for w in ENDINGS} | {"etc"}


def split_sentences(text: str, max_len: int = DEFAULT_BUDGET) -> list[str]:
    """Sentences of `text`, each at most `max_len` characters.

    Splits at line breaks and at . ! ? ; followed by space, but not after abbreviations such
    as "Dr." or initials, and never inside "3.5", which has no space after its period.
    """
    if max_len < 1:
        raise ValueError(f"max_len={max_len} must be >= 1")
    pieces = []
    for line in text.split("\n"):
        for sentence in _line_sentences(line):
            pieces += chunk(sentence, max_len)
    return pieces


def _line_sentences(line: str) -> list[str]:
    sentences, start = [], 0
    for match in BOUNDARY.finditer(line):
        if _is_boundary(line, match):
            sentences.append(line[start : match.end()].strip())
            start = match.end()
    sentences.append(line[start:].strip())
    return [s for s in sentences if s]


def _is_boundary(line: str, match: re.Match) -> bool:
    if match[0].rstrip("\"')]\u201d\u2019") != ".":
        return True
    before = line[max(0, match.start() - WORD_WINDOW) : match.start()]
    words = before.split()
    if not words or len(words[-1]) == WORD_WINDOW:
        return True
    word = words[-1].lstrip("\"'([").lower()
    if word in NEVER_BREAK or re.fullmatch(r"(?:\w\.)*[a-z]", word):
        return False
    if word in BREAK_BEFORE_CAPITAL:
        return bool(re.match(r"\s+[\"'(]?[A-Z]", line[match.end() :]))
    return True


def chunk(sentence: str, max_len: int) -> list[str]:
    """Break one sentence into pieces of at most `max_len`, preferring commas, then spaces."""
    pieces = []
    while len(sentence) > max_len:
        cut = _cut_point(sentence, max_len)
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    if sentence:
        pieces.append(sentence)
    return [p for p in pieces if p]


def _cut_point(sentence: str, max_len: int) -> int:
    window = sentence[: max_len + 1]
    soft = [m.end() for m in SOFT_BREAK.finditer(window) if m.end() > max_len // 3]
    if soft:
        return soft[-1]
    space = window.rfind(" ")
    return space if space > 0 else max_len
