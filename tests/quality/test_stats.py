"""Intervals and tests behind the lab's verdicts, against textbook values."""

import pytest

from lab.quality.stats import sign_test, votes_to_settle, wilson_interval


def test_the_wilson_interval_matches_the_textbook():
    # 8 of 10 at 95%: (0.4902, 0.9433), the worked example of Wilson's score interval.
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    # It stays inside [0, 1] where the normal approximation would not.
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)


def test_the_sign_test_matches_the_binomial_distribution():
    assert sign_test(8, 2) == pytest.approx(0.109375)  # 2 * (1 + 10 + 45) / 1024
    assert sign_test(9, 1) == pytest.approx(0.021484375)  # 2 * 11 / 1024
    assert sign_test(5, 5) == 1.0 and sign_test(0, 0) == 1.0


def test_more_votes_at_the_same_split_settle_a_real_preference():
    assert votes_to_settle(16, 4) == 0  # already p < 0.05
    more = votes_to_settle(8, 2)
    assert more is not None and more > 0
    n = 10 + more
    assert sign_test(round(0.8 * n), round(0.2 * n)) < 0.05
    assert sign_test(round(0.8 * (n - 1)), round(0.2 * (n - 1))) >= 0.05
    assert votes_to_settle(5, 5, ties=3) is None and votes_to_settle(0, 0) is None
    # Ties dilute the decisive votes, so the same wins need more votes in all.
    assert votes_to_settle(8, 2, ties=10) > more
