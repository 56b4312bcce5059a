import random
import re
import statistics
import time

import pytest

from lab.frontend import split_sentences
from lab.frontend.normalize import normalize_text
from lab.frontend.phonemes import phonemize
from lab.training import textgen
from lab.training.textgen import generate, held_out_texts, make_split, normalized, words

NUMBER_FORMS = {
    "cardinal": r"\b\d{1,3}\b",
    "thousands": r"\d,\d{3}",
    "decimal": r"\d\.\d",
    "year": r"\b(1[1-9]|20)\d\d\b",
    "clock": r"\d:\d\d",
    "meridiem": r"\d [ap]\.m\.",
    "money": r"[$£€]\d",
    "percent": r"\d%",
    "ordinal": r"\d(st|nd|rd|th)\b",
    "date": r"(January|March|October) \d",
    "phone": r"\b0\d{2,} 0\d{2,}",
    "measure": r"\d (kilometers|miles|kilograms|liters|minutes)\b",
    "temperature": r"\d(°[CF]| degrees)",
}


@pytest.fixture(scope="module")
def sample() -> list[str]:
    return generate(5000, seed=0)


def word_counts(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def test_same_seed_same_sentences(sample):
    assert generate(5000, seed=0) == sample
    assert generate(300, seed=0) == sample[:300]


def test_other_seed_other_sentences(sample):
    other = generate(5000, seed=1)
    assert other != sample
    assert len(set(other) & set(sample)) < 250  # only short stock phrases recur


def test_no_duplicates_and_varied(sample):
    assert len(set(sample)) == len(sample)
    assert len({normalized(t) for t in sample}) > 0.95 * len(sample)
    vocabulary = {w.strip('.,;:!?"').lower() for t in sample for w in t.split()}
    assert len(vocabulary) > 2500


def test_questions_exclamations_quotes_and_names(sample):
    def share(pattern: str) -> float:
        return sum(bool(re.search(pattern, t)) for t in sample) / len(sample)

    assert share(r"\?\"?$") > 0.12
    assert share(r"!\"?$") > 0.05
    assert share(r'"') > 0.03
    assert share(r"\d") > 0.15
    assert share(r"\w, \w.*,? and \w") > 0.03  # lists
    names = {w.forms[0] for w in words("first_names")}
    used = {w.strip('.,;:!?"\'') for t in sample for w in t.split()} & names
    assert len(used) > 0.8 * len(names)


@pytest.mark.parametrize("form", NUMBER_FORMS)
def test_number_forms(sample, form):
    assert any(re.search(NUMBER_FORMS[form], t) for t in sample), form


def test_the_frontend_spells_every_number_out(sample):
    """No digit or symbol should reach espeak-ng, which would read it its own way."""
    for text in sample:
        assert not re.search(r"[\d$£€%°]", normalize_text(text)), text


def test_one_sentence_each_mostly(sample):
    multi = [t for t in sample if len(split_sentences(t)) > 1]
    assert len(multi) < 0.02 * len(sample)  # only the semicolon joins split


def test_length_spread(sample):
    counts = word_counts(sample)
    assert sum(c <= 4 for c in counts) > 0.05 * len(counts)
    assert sum(c >= 25 for c in counts) > 0.03 * len(counts)
    assert 9 <= statistics.mean(counts) <= 13
    assert max(counts) <= 60


def test_phoneme_coverage():
    """The generated text should carry nearly every sound the lab's own sentence sets do. The
    sets' Cyrillic, Greek and Japanese lines add a few symbols no English text gives."""
    reference = {p for t in held_out_texts() for p in phonemize(normalize_text(t))}
    generated = {p for t in generate(500, seed=0) for p in phonemize(normalize_text(t))}
    missing = reference - generated
    print(f"phonemes: {len(reference - missing)}/{len(reference)}; missing {sorted(missing)}")
    assert len(reference - missing) >= 0.95 * len(reference), sorted(missing)


def test_split_keeps_evaluation_text_out_of_training():
    split = make_split(3000, 200, seed=0)
    lab = held_out_texts()
    assert split.held_out[: len(lab)] == lab
    assert len(split.held_out) == len(lab) + 200
    assert len(split.train) == 3000
    banned = {normalized(t) for t in split.held_out}
    assert not [t for t in split.train if normalized(t) in banned]
    assert make_split(3000, 200, seed=0) == split


def test_every_template_fills():
    writer = textgen._Writer(random.Random(0))
    for entry in words("templates"):
        text = entry.forms[0].replace("{list}", "apples, pears and plums")
        assert "{" not in writer.fill(text), text


def test_word_lists_are_well_formed():
    assert all(len(v.forms) == 5 and v.tags for v in words("verbs"))
    for kind in textgen.NOUN_LISTS:
        assert all(len(w.forms) == 2 for w in words(kind)), kind
    assert all(w.tags for w in words("venues"))
    lists = [p.stem for p in textgen.WORDS_DIR.glob("*.txt") if p.stem != "templates"]
    assert sum(len(words(name)) for name in lists) > 1500


def test_fast_enough():
    start = time.perf_counter()
    generate(30_000, seed=7)
    assert time.perf_counter() - start < 10
