"""Error rates and the text normalisation they rely on."""

import random

import jiwer
import pytest

from lab.quality.text_compare import (
    EditCounts,
    TextCompareError,
    cer,
    char_edits,
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


@pytest.mark.parametrize(
    ("hypothesis", "edits"),
    [
        ("the cat sat on the mat", EditCounts(0, 0, 0, 6)),
        ("the cat sit on the mat", EditCounts(1, 0, 0, 6)),
        ("the cat on the mat", EditCounts(0, 1, 0, 6)),
        ("the cat sat down on the mat", EditCounts(0, 0, 1, 6)),
        ("a cat sat the mat too", EditCounts(1, 1, 1, 6)),
        ("", EditCounts(0, 6, 0, 6)),
    ],
)
def test_word_edits_match_hand_counts(hypothesis, edits):
    assert word_edits("the cat sat on the mat", hypothesis) == edits
    assert wer("the cat sat on the mat", hypothesis) == pytest.approx(edits.errors / 6)


def test_wer_of_a_textbook_pair():
    """Two substitutions (jumps/jumped, the/a) and one insertion over nine reference words."""
    reference = "the quick brown fox jumps over the lazy dog"
    hypothesis = "the quick brown fox jumped over a lazy dog dog"
    assert word_edits(reference, hypothesis) == EditCounts(2, 0, 1, 9)
    assert wer(reference, hypothesis) == pytest.approx(3 / 9)


def test_char_edits_match_hand_counts():
    assert char_edits("kitten", "sitting") == EditCounts(2, 0, 1, 6)
    assert char_edits("abcd", "acd") == EditCounts(0, 1, 0, 4)
    assert char_edits("abc", "abxc") == EditCounts(0, 0, 1, 3)
    assert char_edits("abc", "") == EditCounts(0, 3, 0, 3)
    assert cer("kitten", "sitting") == pytest.approx(0.5)


def _levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[:], i
        for j, y in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y))
    return row[-1]


def test_char_edits_agree_with_textbook_levenshtein():
    rng = random.Random(3)
    for _ in range(300):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(1, 12)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 12)))
        counts = char_edits(a, b, normalizer=str)
        assert counts.errors == _levenshtein(a, b)
        assert len(a) - counts.deletions + counts.insertions == len(b)


def test_rates_are_jiwers_on_the_normalised_texts():
    reference, hypothesis = "My brother found 12 old coins.", "my brother found twelve cold coins"
    expected = normalize_text(reference), normalize_text(hypothesis)
    assert wer(reference, hypothesis) == pytest.approx(jiwer.wer(*expected))
    assert cer(reference, hypothesis) == pytest.approx(jiwer.cer(*expected))


def test_normalisation_comes_before_alignment():
    """Case, punctuation and spelled-out numbers cost nothing; only the spoken words count."""
    assert wer("Hello, World! I have 42 apples.", "hello world i have forty two apples") == 0.0
    assert cer("Hello, World!", "HELLO world") == 0.0
    assert word_edits("I have 42 apples.", "i have forty three apples") == EditCounts(1, 0, 0, 5)
    assert wer("It costs $3.50.", "it costs three dollars and fifty cents") == 0.0


def test_wer_counts_words_after_normalisation():
    assert wer("the cat sat", "the cat sat down") == pytest.approx(1 / 3)
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
