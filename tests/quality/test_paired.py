"""The paired bootstrap behind every verdict, on synthetic per-sentence scores."""

import numpy as np
import pytest

from lab.quality.paired import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    interval,
    judge,
    resample_indices,
    sentences_to_settle,
)


def _wer_pair(n: int, shift: float, spread: float = 0.05, seed: int = 0):
    """Baseline WERs and a candidate whose WERs grew by `shift` plus paired noise."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.1, 0.5, n)
    noise = rng.normal(0.0, spread, n)
    return base + shift + noise - noise.mean(), base


def test_identical_scores_pass_with_a_zero_width_interval():
    base = np.array([3.1, 2.9, 3.4, 3.3])
    j = judge(base, base, -0.15, higher_is_better=True)
    assert (j.outcome, j.delta, j.low, j.high, j.settle) == (PASS, 0.0, 0.0, 0.0, 0)


def test_interval_is_fixed_by_its_seed_and_covers_the_mean():
    values = np.random.default_rng(1).normal(0.3, 1.0, 40)
    mean, low, high = interval(values)
    assert low < mean < high and mean == pytest.approx(values.mean())
    assert interval(values) == (mean, low, high), "a verdict must not change between runs"
    other = interval(values, indices=resample_indices(40, seed=7))
    assert other != (mean, low, high)
    # The 95% interval of 40 N(0.3, 1) draws has a half-width near 1.96 / sqrt(40) = 0.31.
    assert 0.2 < (high - low) / 2 < 0.45


def test_a_clear_growth_fails_a_small_one_passes_a_noisy_one_is_inconclusive():
    assert judge(*_wer_pair(30, 0.10), 0.02, higher_is_better=False).outcome == FAIL
    assert judge(*_wer_pair(30, 0.00), 0.02, higher_is_better=False).outcome == PASS
    noisy = judge(*_wer_pair(8, 0.03, spread=0.1), 0.02, higher_is_better=False)
    assert noisy.outcome == INCONCLUSIVE and noisy.settle > 8
    assert noisy.describe() == f"inconclusive: about {noisy.settle} sentences would settle it"


def test_mos_drop_is_judged_on_the_low_side():
    base = np.full(20, 3.0) + np.linspace(-0.2, 0.2, 20)
    assert judge(base - 0.5, base, -0.15, higher_is_better=True).outcome == FAIL
    assert judge(base + 0.5, base, -0.15, higher_is_better=True).outcome == PASS


def test_settle_estimate_grows_as_the_delta_nears_the_limit():
    """Same spread, same n; the closer the mean change sits to the limit, the more sentences
    it takes for the interval to clear it, and at the limit no number does."""
    settles = []
    for shift in (0.05, 0.04, 0.03, 0.022):
        j = judge(*_wer_pair(10, shift, spread=0.06), 0.02, higher_is_better=False)
        assert j.outcome == INCONCLUSIVE, shift
        settles.append(j.settle)
    assert settles == sorted(settles) and 10 < settles[0] < 50 and settles[-1] > 1000
    at_limit = judge(*_wer_pair(10, 0.02, spread=0.06), 0.02, higher_is_better=False)
    assert at_limit.outcome == INCONCLUSIVE and at_limit.settle is None
    assert "cannot be settled" in at_limit.describe()


def test_settle_estimate_scales_as_one_over_root_n():
    # Half-width 0.04 at n = 10 facing a limit 0.02 away: (0.04 / 0.02)^2 * 10 = 40 sentences.
    assert sentences_to_settle(10, 0.0, -0.04, 0.04, 0.02) == 40
    assert sentences_to_settle(10, 0.03, -0.01, 0.07, 0.02) == 160  # from the bad side
    assert sentences_to_settle(10, 0.02, 0.0, 0.04, 0.02) is None


def test_bad_input_is_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="differ in length: 3 candidate sentences, 2 baseline"):
        judge([1, 2, 3], [1, 2], 0.02, higher_is_better=False)
    with pytest.raises(ValueError, match="no sentences"):
        judge([], [], 0.02, higher_is_better=False)
    with pytest.raises(ValueError, match="NaN"):
        judge([1.0, np.nan], [1.0, 1.0], 0.02, higher_is_better=False)
    with pytest.raises(ValueError, match="one number per sentence"):
        interval([[1.0, 2.0]])
    with pytest.raises(ValueError, match="confidence"):
        interval([1.0, 2.0], confidence=1.5)
