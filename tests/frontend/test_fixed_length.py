"""lab.frontend.fixed_length: many different sentences, all of one length band, the same
on every run."""

import pytest

from lab.frontend.fixed_length import fixed_length_sentences, made_up_sentences


def test_sentences_fall_in_the_band_and_differ():
    texts = fixed_length_sentences(100)
    assert all(48 <= len(t) <= 52 for t in texts)
    assert len(set(texts)) == 100


def test_same_seed_same_sentences_and_a_shorter_list_is_a_prefix():
    assert fixed_length_sentences(40, seed=3) == fixed_length_sentences(40, seed=3)
    assert fixed_length_sentences(10, seed=3) == fixed_length_sentences(40, seed=3)[:10]
    assert fixed_length_sentences(10, seed=3) != fixed_length_sentences(10, seed=4)


def test_sentences_read_as_sentences():
    for text in fixed_length_sentences(30):
        assert text[0].isupper() and text[-1] in ".?"
        assert not any(ch.isdigit() for ch in text)


def test_a_band_no_template_reaches_is_refused():
    with pytest.raises(ValueError, match="only 0 different sentences"):
        fixed_length_sentences(1, low=5, high=6)


def test_made_up_sentences_differ_and_come_the_same_every_run():
    texts = made_up_sentences(200)
    assert len(set(texts)) == 200 and all(20 <= len(t) <= 120 for t in texts)
    assert made_up_sentences(5) == texts[:5]
    assert made_up_sentences(5) != made_up_sentences(5, seed=8)
