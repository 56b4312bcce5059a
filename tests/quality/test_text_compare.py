"""Error rates and the text normalisation they rely on."""

import random

import pytest

from lab.quality.text_compare import (
    EditCounts,
    TextCompareError,
    cer,
    edit_counts,
    normalize_text,
    wer,
    word_edits,
)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("Hello, World!", "hello world"),
        ("I have 42 apples.", "i have forty two apples"),
        ("Pi is 3.14", "pi is three point one four"),
        ("1,250 people", "one thousand two hundred fifty people"),
        ("Born in 1999.", "born in nineteen ninety nine"),
        ("Agent 007", "agent zero zero seven"),
        ("It fell to -5 today", "it fell to minus five today"),
        ("a well-known fact", "a well known fact"),
        (
            "It costs $3.50 at 7:45 pm.",
            "it costs three dollars and fifty cents at seven forty five pm",
        ),
        ("pages 10-20", "pages ten twenty"),
        ("Don't say 'maybe'", "don't say maybe"),
        ("It\u2019s  fine\n\tthanks", "it's fine thanks"),
        ("100% R&D", "one hundred percent r and d"),
        ("e.g. the U.S.", "for example the u s"),
    ],
)
def test_normalize_text(text, normal):
    assert normalize_text(text) == normal


def test_edit_counts_by_kind():
    assert edit_counts("abc", "abc").errors == 0
    assert edit_counts("abc", "axc") == EditCounts(1, 0, 0, 3)
    deletion = edit_counts("abc", "ac")
    assert (deletion.substitutions, deletion.deletions, deletion.insertions) == (0, 1, 0)
    insertion = edit_counts("abc", "abxc")
    assert (insertion.substitutions, insertion.deletions, insertion.insertions) == (0, 0, 1)
    assert edit_counts("kitten", "sitting").errors == 3
    assert edit_counts("abc", "").deletions == 3


def _levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[:], i
        for j, y in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y))
    return row[-1]


def test_edit_counts_agree_with_textbook_levenshtein():
    rng = random.Random(3)
    for _ in range(300):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(1, 12)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 12)))
        counts = edit_counts(a, b)
        assert counts.errors == _levenshtein(a, b)
        assert len(a) - counts.deletions + counts.insertions == len(b)


def test_wer_counts_words_after_normalisation():
    assert wer("I have 42 apples.", "i have forty two apples") == 0.0
    assert wer("the cat sat", "the cat sat down") == pytest.approx(1 / 3)
    assert wer("the cat sat", "the dog sat") == pytest.approx(1 / 3)
    assert wer("the cat sat", "the sat") == pytest.approx(1 / 3)
    assert wer("the cat", "") == 1.0
    assert wer("yes", "yes yes yes") == 2.0
    counts = word_edits("one two three four", "one too three four five")
    assert (counts.substitutions, counts.insertions, counts.deletions) == (1, 1, 0)


def test_cer_counts_characters_and_spaces():
    assert cer("Hello!", "hello") == 0.0
    assert cer("abcd", "abed") == pytest.approx(0.25)
    assert cer("a b", "ab") == pytest.approx(1 / 3)


def test_custom_normaliser_is_used_on_both_sides():
    def shout(text):
        return text.upper()

    assert wer("the Cat", "THE CAT", normalizer=shout) == 0.0
    assert wer("the Cat", "the cat", normalizer=shout) == 0.0
    assert wer("the cat", "the cat.", normalizer=str.strip) == 0.5


@pytest.mark.parametrize("reference", ["", "   ", "?!...", "\u2014"])
def test_reference_without_words_is_refused(reference):
    with pytest.raises(TextCompareError, match="reference text"):
        wer(reference, "anything")
    with pytest.raises(ValueError, match="reference text"):
        cer(reference, "anything")
