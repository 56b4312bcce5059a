"""The recogniser hears every clip afresh, whatever it heard before.

A/B verdicts score the baseline and the candidate back to back, and the benchmark scores a whole
sentence set in one process. The decoder's front end adapts as it listens (its noise-floor
estimate carries into the next utterance), so without a reset the same audio could read
differently depending on its neighbours, and a verdict on the order of evaluation.
"""

from dataclasses import replace

import pytest

from lab.quality import evaluate, transcribe
from lab.quality.asr import _decoder

# Chosen because its transcript changed after a noisy clip when the front end kept its state.
FORECAST = (
    "Although the forecast promised sunshine, we packed umbrellas and were glad we did by the "
    "end of the day."
)


@pytest.fixture(scope="module")
def forecast(voice_pipeline):
    return voice_pipeline.synthesize(FORECAST)


@pytest.fixture(scope="module")
def degraded(renderings, noisy):
    """A candidate an optimisation might produce: another sentence under noise at 0 dB SNR."""
    other = renderings[1]
    return replace(other, audio=noisy(other.audio, 0.0))


def heard(clip) -> tuple[str, str]:
    """The transcript, and the cepstral mean of the clip's features as the front end saw them.

    With batch normalisation the mean is computed from this clip alone, so it differs only if
    the front end processed the same audio differently: a sharper probe than the words.
    """
    return transcribe(clip.audio, clip.sample_rate), _decoder().get_cmn()


def test_a_clip_reads_the_same_after_another(forecast, degraded):
    first = heard(forecast)
    transcribe(degraded.audio, degraded.sample_rate)
    assert heard(forecast) == first


def test_batch_and_single_evaluation_agree(renderings, forecast, degraded):
    """Scoring a list in sequence, as the benchmark does, matches scoring each clip first."""
    clips = [renderings[0], degraded, forecast, renderings[2]]
    in_sequence = [evaluate(c.audio, c.sample_rate, c.text).transcript for c in clips]
    alone = []
    for clip in clips:
        _decoder.cache_clear()
        alone.append(transcribe(clip.audio, clip.sample_rate))
    assert in_sequence == alone
