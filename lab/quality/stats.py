"""How sure a verdict is: intervals and tests for the few votes or sentences a user has.

A blind A/B tally of 7 to 3 looks like a preference and is not one: a fair coin does that one
time in six. Each figure here comes with the uncertainty its sample size leaves, so the app can
say "pass", "fail" or "not enough data yet", and how much more data would decide.
"""

from __future__ import annotations

import math

from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
SETTLE_LIMIT = 100_000
"""Past this many votes at the same split the two sides are called indistinguishable."""


def wilson_interval(successes: float, n: int, confidence: float = CONFIDENCE
                    ) -> tuple[float, float]:
    """The Wilson score interval of a proportion: unlike the normal approximation it stays
    inside [0, 1] and is sound for the handful of votes an A/B session collects. `successes`
    may be fractional (a tie counted as half a win)."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} must lie in [0, n={n}]")
    z = stats.norm.ppf(1 - (1 - confidence) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(wins_a: int, wins_b: int) -> float:
    """Two-sided binomial p-value of the decisive votes against a 50/50 split. Ties say
    nothing about which side is better, so they are left out (the sign test)."""
    n = wins_a + wins_b
    return 1.0 if n == 0 else float(stats.binomtest(wins_a, n, 0.5).pvalue)


def votes_to_settle(wins_a: int, wins_b: int, ties: int = 0, alpha: float = ALPHA
                    ) -> int | None:
    """How many more votes, split as the votes so far are, would make the sign test reach
    `alpha`: 0 if it already does, None if the split is even (no number of votes would)."""
    total = wins_a + wins_b + ties
    if total == 0 or wins_a == wins_b:
        return None
    if sign_test(wins_a, wins_b) < alpha:
        return 0
    share_a, share_b = wins_a / total, wins_b / total

    def settled(n: int) -> bool:
        return sign_test(round(share_a * n), round(share_b * n)) < alpha

    high = total * 2
    while not settled(high):  # the p-value falls as votes grow at a fixed split
        if high > SETTLE_LIMIT:
            return None
        high *= 2
    low = total
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if settled(mid) else (mid, high)
    return high - total
