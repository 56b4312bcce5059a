import time

import pytest

from lab.frontend import split_sentences


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("One. Two! Three? Four; five", ["One.", "Two!", "Three?", "Four;", "five"]),
        ("Line one\nLine two\n\nLine three", ["Line one", "Line two", "Line three"]),
        ("Dr. Smith met Mr. Jones. They talked.", ["Dr. Smith met Mr. Jones.", "They talked."]),
        ("Pi is 3.14. It never ends.", ["Pi is 3.14.", "It never ends."]),
        ("It cost $3.50 today.", ["It cost $3.50 today."]),
        ("J. R. R. Tolkien wrote it. The U.S. is big.",
         ["J. R. R. Tolkien wrote it.", "The U.S. is big."]),
        ("Take fruit, e.g. plums. Then rest.", ["Take fruit, e.g. plums.", "Then rest."]),
        ("Cats vs. dogs is old.", ["Cats vs. dogs is old."]),
        ("Buy pears, etc. Then go.", ["Buy pears, etc.", "Then go."]),
        ("Buy pears, etc. and go.", ["Buy pears, etc. and go."]),
        ("See No. 5 on St. Mark St. today.", ["See No. 5 on St. Mark St. today."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("Wait... what?! Really.", ["Wait...", "what?!", "Really."]),
        ("   ", []),
    ],
)
def test_split(text, sentences):
    assert split_sentences(text) == sentences


def test_long_sentence_is_cut_at_commas_within_budget():
    text = ", ".join(f"clause number {i} of a very long list" for i in range(40)) + "."
    pieces = split_sentences(text, max_len=120)
    assert len(pieces) > 5
    assert all(len(p) <= 120 for p in pieces)
    assert all(p.endswith((",", ".")) for p in pieces)
    assert " ".join(pieces) == text


def test_long_sentence_without_commas_is_cut_at_spaces():
    text = " ".join(["word"] * 300)
    pieces = split_sentences(text, max_len=50)
    assert all(len(p) <= 50 for p in pieces)
    assert " ".join(pieces) == text


def test_unbroken_run_is_cut_hard():
    pieces = split_sentences("x" * 250, max_len=100)
    assert [len(p) for p in pieces] == [100, 100, 50]


def test_bad_budget_is_refused():
    with pytest.raises(ValueError, match="max_len"):
        split_sentences("hi", max_len=0)


def test_runs_of_terminators_split_in_linear_time():
    start = time.perf_counter()
    pieces = split_sentences("." * 4999 + "a" + " ." * 2500)
    assert time.perf_counter() - start < 0.5
    assert len(pieces) > 2500
