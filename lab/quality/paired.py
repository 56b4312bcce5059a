"""Paired bootstrap verdicts: is the candidate's change on a metric within tolerance, beyond it,
or not yet known?

Comparing two means against a fixed threshold cannot tell "no audible change" from "too few
sentences to know": a recogniser with a 30% floor moves its mean by several points from
transcription noise alone. Baseline and candidate render the same sentences with the same
seeds, so each sentence gives one paired difference, and what varies from sentence to sentence
is exactly the noise a verdict must see through. Resampling sentences with replacement (a fixed
seed, so a verdict never changes between runs) gives a percentile interval of the mean
difference, and the rule is plain:

- pass: the whole interval lies on the acceptable side of the limit;
- fail: the whole interval lies beyond it;
- inconclusive otherwise, with an estimate of how many sentences would settle it: an interval's
  half-width shrinks as 1/sqrt(n), so it clears the limit once it is narrower than the distance
  from the mean to the limit. A mean sitting on the limit cannot be settled by any number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
SLACK = 1e-9
"""Float rounding at the limit counts as on it (2.85 vs 3.0 is exactly a 5% drop)."""
SETTLE_LIMIT = 100_000
"""Past this many sentences a check is called unsettleable: the mean sits on the limit."""
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


@dataclass(frozen=True)
class Judgement:
    """One metric's paired verdict, in the metric's own units.

    `delta` is the mean of candidate minus baseline over the sentences, `low`/`high` its
    bootstrap interval, and `limit` the worst acceptable delta (a floor when higher is better,
    a ceiling when lower is). `settle` is the number of sentences that would likely settle an
    inconclusive check (None: no number would; 0: already settled).
    """

    outcome: str
    delta: float
    low: float
    high: float
    limit: float
    higher_is_better: bool
    n: int
    settle: int | None

    def describe(self) -> str:
        """The outcome in words: "pass", "fail", or "inconclusive: about N sentences would
        settle it" / "inconclusive: the mean sits at the limit, so it cannot be settled"."""
        if self.outcome != INCONCLUSIVE:
            return self.outcome
        if self.settle is None:
            return f"{INCONCLUSIVE}: the mean sits at the limit, so it cannot be settled"
        return f"{INCONCLUSIVE}: about {self.settle} sentences would settle it"


def resample_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n) sentence indices drawn with replacement; one matrix serves every metric
    of a comparison, so their intervals come from the same resampled sentence sets."""
    if n < 1:
        raise ValueError("a paired bootstrap needs at least one sentence")
    if resamples < 1:
        raise ValueError(f"resamples={resamples} must be >= 1")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def interval(values: object, confidence: float = CONFIDENCE,
             indices: np.ndarray | None = None) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` and its percentile bootstrap interval."""
    data = _vector(values)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must lie strictly between 0 and 1")
    idx = resample_indices(data.size) if indices is None else indices
    if idx.ndim != 2 or idx.shape[1] != data.size:
        raise ValueError(f"indices of shape {idx.shape} do not resample {data.size} values")
    means = data[idx].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    mean = float(data.mean())
    # The percentile interval of a constant is that constant; keep rounding from excluding it.
    return mean, float(min(low, mean)), float(max(high, mean))


def judge(candidate: object, baseline: object, limit: float, *, higher_is_better: bool,
          confidence: float = CONFIDENCE, indices: np.ndarray | None = None) -> Judgement:
    """Paired verdict on per-sentence `candidate` and `baseline` values of one metric.

    `limit` is the worst acceptable mean difference (candidate minus baseline): -0.15 for
    "MOS may drop by 0.15", +0.02 for "WER may grow by two points".
    """
    cand, base = _vector(candidate, "candidate"), _vector(baseline, "baseline")
    if cand.size != base.size:
        raise ValueError(f"paired values differ in length: {cand.size} candidate sentences, "
                         f"{base.size} baseline sentences")
    delta, low, high = interval(cand - base, confidence, indices)
    # In "badness" units (bigger is worse) the rule reads one way for every metric.
    sign = -1.0 if higher_is_better else 1.0
    bad_low, bad_high = sorted((sign * low, sign * high))
    bad, bad_limit = sign * delta, sign * limit + SLACK
    if bad_high <= bad_limit:
        outcome, settle = PASS, 0
    elif bad_low > bad_limit:
        outcome, settle = FAIL, 0
    else:
        outcome, settle = INCONCLUSIVE, sentences_to_settle(cand.size, bad, bad_low, bad_high,
                                                            bad_limit)
    return Judgement(outcome, delta, low, high, limit, higher_is_better, int(cand.size), settle)


def sentences_to_settle(n: int, mean: float, low: float, high: float, limit: float
                        ) -> int | None:
    """Sentences at which an interval [low, high] around `mean` (from `n` sentences) would
    clear `limit`, if the per-sentence spread stays as it is: the half-width facing the limit
    scales as 1/sqrt(n). None when the mean sits on the limit (no number would settle it)."""
    gap = abs(limit - mean)
    half = (high - mean) if mean < limit else (mean - low)
    if gap <= 2 * SLACK * max(1.0, abs(limit)):
        return None
    needed = math.ceil(n * (half / gap) ** 2 - 1e-9)
    return None if needed > SETTLE_LIMIT else max(needed, n + 1)


def _vector(values: object, name: str = "values") -> np.ndarray:
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1:
        raise ValueError(f"{name} must be one number per sentence, got shape {data.shape}")
    if data.size == 0:
        raise ValueError(f"{name} holds no sentences; a verdict needs at least one")
    if not np.isfinite(data).all():
        raise ValueError(f"{name} holds NaN or infinite scores")
    return data
