"""Intelligibility: the offline recogniser understands the lab's voice."""

import numpy as np
import pytest
from scipy.signal import resample_poly

from lab.quality import transcribe, wer


def test_clean_renderings_are_understood(clean_scores):
    for scores in clean_scores:
        assert scores.transcript
        assert scores.wer < 0.5, (scores.text, scores.transcript)
    assert np.mean([s.wer for s in clean_scores]) < 0.3


def test_transcript_of_another_sentence_scores_badly(clean_scores):
    """The recogniser hears what was said, not what we asked for."""
    heard_first = clean_scores[0].transcript
    assert wer(clean_scores[1].text, heard_first) > 0.7


def test_any_sample_rate_is_accepted(speech, clean_scores):
    at_48k = resample_poly(speech.audio, 320, 147).astype(np.float32)
    assert wer(speech.text, transcribe(at_48k, 48000)) <= clean_scores[0].wer + 0.2


def test_noise_without_speech_yields_few_words():
    noise = np.random.default_rng(1).normal(0, 0.1, 3 * 16000).astype(np.float32)
    assert len(transcribe(noise, 16000).split()) <= 2


def test_bad_audio_is_refused():
    with pytest.raises(ValueError, match="audio is empty"):
        transcribe(np.zeros(0, np.float32), 16000)
