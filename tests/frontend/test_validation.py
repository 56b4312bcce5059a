import pytest

from lab.frontend import TextError
from lab.frontend.validation import check_text, script_warning, strip_controls


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "text is empty"),
        ("   \n\t ", "only whitespace"),
        ("!!! ...", "nothing to speak"),
        ("???", "nothing to speak"),
        ("\U0001f600\U0001f389", "nothing to speak"),
        ("\x00\x01\x1b", "only control characters"),
        ("\x07 ?! \x08", "nothing to speak"),
        (None, "must be a str"),
        (b"bytes", "must be a str"),
    ],
)
def test_unspeakable_text_is_refused(text, message):
    with pytest.raises(TextError, match=message):
        check_text(text, max_chars=100)


def test_too_long_names_length_and_cap():
    with pytest.raises(TextError, match=r"text is 101 characters, over the limit of 100"):
        check_text("a" * 101, max_chars=100)
    assert check_text("a" * 100, max_chars=100).text == "a" * 100


def test_text_error_is_a_value_error():
    assert issubclass(TextError, ValueError)


def test_bad_cap_is_refused():
    with pytest.raises(ValueError, match="max_chars"):
        check_text("hi", max_chars=0)


def test_controls_are_stripped_but_lines_and_tabs_kept():
    assert strip_controls("a\x00b\x1bc\u200bd\ufeff") == "abcd"
    assert strip_controls("one\r\ntwo\rthree\u2028four\tfive") == "one\ntwo\nthree\nfour\tfive"
    assert strip_controls("lone \ud800 surrogate") == "lone  surrogate"
    assert check_text("he\x00llo", max_chars=100).text == "hello"


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("Привет, как дела?", "Cyrillic"),
        ("東京は今日も晴れです", "CJK"),
        ("Καλημέρα σας", "Greek"),
        ("Tiếng Việt rất đẹp và khó học", "accented Latin"),
    ],
)
def test_non_english_text_is_flagged(text, script):
    note = check_text(text, max_chars=100).warnings
    assert note == [f"text looks non-English ({script}); spoken with the en-us phonemizer"]


def test_mixed_scripts_are_noted():
    note = script_warning("This sentence is mostly English but ends with мир", "en-us")
    assert note is not None and note.startswith("text mixes in Cyrillic letters (3 of ")


@pytest.mark.parametrize(
    "text", ["Plain English text.", "A naïve café owner.", "1234 5678", "résumé"]
)
def test_english_text_is_not_flagged(text):
    assert check_text(text, max_chars=100).warnings == []


def test_no_script_warning_for_non_english_voices():
    assert script_warning("Привет, как дела?", "ru") is None
