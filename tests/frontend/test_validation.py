import pytest

from lab.frontend import TextError, normalize_text, split_sentences
from lab.frontend.normalize import CURRENCIES, SYMBOLS
from lab.frontend.validation import (
    check_text,
    is_pictograph,
    is_speakable,
    script_warning,
    strip_controls,
)

ONE_DROPPED = "1 emoji or pictographic symbol was dropped; it is not spoken"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "text is empty"),
        ("   \n\t ", "only whitespace"),
        ("!!! ...", "nothing to speak"),
        ("???", "nothing to speak"),
        ("\U0001f600\U0001f389", "nothing to speak"),
        ("🎉🎉", "nothing to speak"),
        ("👍🏽 🇺🇸 ❤️", "nothing to speak"),
        ("\x00\x01\x1b", "only control characters"),
        ("\x1b[31m\x1b[0m", "only control characters or escape sequences"),
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


def test_controls_become_word_breaks_but_lines_and_tabs_are_kept():
    assert strip_controls("a\x00b\x1bc\u200bd\ufeff") == "a b c d"
    assert strip_controls("soft\u00adhy\u200dphen") == "softhyphen"
    assert strip_controls("one\r\ntwo\rthree\u2028four\tfive") == "one\ntwo\nthree\nfour\tfive"
    assert strip_controls("lone \ud800 surrogate") == "lone  surrogate"


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("hello\x00world", "hello world"),
        ("hello \x00 world", "hello world"),
        ("hello\x00\x01 \x02world", "hello world"),
        ("line\x00\nnext\tword", "line \nnext\tword"),
    ],
)
def test_a_control_character_is_one_word_break(text, cleaned):
    assert check_text(text, max_chars=100).text == cleaned


@pytest.mark.parametrize(
    "text",
    [
        "\x1b[31mWarning\x1b[0m: disk full",
        "\x1b[1;38;5;196mWarning\x1b[m: disk full",
        "\x9b31mWarning\x9b0m: disk full",
        "\x1b(B\x1b[mWarning: disk\x1b[2K full",
        "\x1b]0;build log\x07Warning: disk full",
        "\x1b]2;build log\x1b\\Warning: disk full",
        "\x9d0;build log\x07Warning: disk full",
        "\x1b]8;;https://example.com\x1b\\Warning\x1b]8;;\x1b\\: disk full",
        "\x1b7Warning: disk full\x1b8",
    ],
)
def test_terminal_escape_sequences_disappear_whole(text):
    checked = check_text(text, max_chars=200)
    assert checked.text == "Warning: disk full"
    assert checked.warnings == []


def test_unterminated_title_ends_at_the_line():
    assert check_text("\x1b]0;title\nNext line", max_chars=100).text == "\nNext line"


def test_stray_escape_spares_the_next_word():
    assert check_text("Hello\x1b world", max_chars=100).text == "Hello world"


@pytest.mark.parametrize(
    ("text", "cleaned", "dropped"),
    [
        ("Great job 👍🏽!", "Great job !", 1),
        ("Great job 👍🏽👍🏽 🎉!", "Great job !", 3),
        ("Love ❤️ it", "Love it", 1),
        ("Family 👨\u200d👩\u200d👧 here", "Family here", 1),
        ("Flags 🇺🇸🇬🇧 here", "Flags here", 2),
        ("🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f England", " England", 1),
        ("Acme® and ✔ done", "Acme and done", 2),
    ],
)
def test_emoji_are_dropped_with_a_count(text, cleaned, dropped):
    checked = check_text(text, max_chars=100)
    assert checked.text == cleaned
    many = f"{dropped} emoji or pictographic symbols were dropped; they are not spoken"
    assert checked.warnings == [ONE_DROPPED if dropped == 1 else many]


def test_keycap_keeps_its_digit():
    checked = check_text("Press 1\ufe0f\u20e3 or 2\ufe0f\u20e33\ufe0f\u20e3", max_chars=100)
    assert normalize_text(checked.text) == "Press one or two three"
    assert checked.warnings == []


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("It is 20°C", "It is twenty degrees Celsius"),
        ("It is 20℃", "It is twenty degrees Celsius"),
        ("$5 & 10%", "five dollars and ten percent"),
        ("£3 + €4 = 7 @ home", "three pounds plus four euros equals seven at home"),
    ],
)
def test_spoken_symbols_are_kept(text, spoken):
    checked = check_text(text, max_chars=100)
    assert checked.text == text
    assert checked.warnings == []
    assert normalize_text(checked.text) == spoken


def test_only_unspoken_symbols_are_pictographs():
    assert not any(is_pictograph(ch) for ch in (*SYMBOLS, *CURRENCIES, "℃", "™", "+", "→"))
    assert all(is_pictograph(ch) for ch in "🎉😀❤✔©★☀")
    assert not is_speakable("🎉 👍🏽") and is_speakable("20°C") and is_speakable("1\ufe0f\u20e3")


def test_word_reading_families_get_the_same_rule():
    """Orpheus reads words: it normalizes check_text's sentences, with no phonemizer after."""
    checked = check_text("\x1b[1mGreat\x1b[0m job 👍🏽!\x00Thanks\x00all.", max_chars=100)
    units = [normalize_text(s) for s in split_sentences(checked.text) if is_speakable(s)]
    assert units == ["Great job!", "Thanks all."]
    assert checked.warnings == [ONE_DROPPED]


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
