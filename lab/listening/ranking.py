"""Rank more than two configurations from blind pairwise votes: Bradley-Terry, Elo, bootstrap.

A/B votes come in pairs (fp32 vs bf16 today, fp32 vs int8 tomorrow), so no single win table
orders three configurations. The Bradley-Terry model gives each configuration a strength s
such that it beats another with probability s_a / (s_a + s_b); one fit over every vote puts
configurations that never met on one scale, through the opponents they share. The public TTS
arenas report the same fit on the Elo scale, 400 * log10(s) around 1000, so a 100-point gap
means the stronger side wins about 64% of the time.

A tie ("same") counts as half a win for each side. Every configuration also gets one virtual
tie against an average configuration: without it, a configuration that has never lost has an
infinite strength; with it, a handful of votes pulls a rating only part of the way, and the
pull fades as votes accumulate.

The fit maximises the likelihood (Newton's method on log strengths). Intervals come from the
bootstrap: the votes are resampled with replacement (fixed seed) and refitted, and the middle
95% of the ratings is the interval. Adjacent configurations whose intervals overlap are not
separated yet. The converse is weaker: a record that is all wins resamples to all wins, so over
a few votes the intervals look narrower than the evidence is. What settles a pair of
neighbours is their own head-to-head votes under the sign test, and how many more of them
would settle it comes from `lab.quality.stats.votes_to_settle`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lab.listening.votes import Vote
from lab.quality.stats import CONFIDENCE, sign_test, votes_to_settle

RESAMPLES = 1000
SEED = 0
ELO_BASE, ELO_SCALE = 1000.0, 400.0
PRIOR_TIES = 1.0
"""Virtual ties per configuration against an average one (strength 1)."""
TOLERANCE, MAX_STEPS = 1e-10, 100


class RankingError(ValueError):
    """No votes to rank, a malformed match, or a configuration the votes do not name."""


@dataclass(frozen=True)
class Match:
    """One vote between configurations `a` and `b`: `score` is 1 when `a` won, 0 when `b`
    won, 0.5 for a tie."""

    a: str
    b: str
    score: float


@dataclass(frozen=True)
class Standing:
    """One configuration's place: its Elo rating, the bootstrap interval, and its record."""

    rank: int
    config: str
    elo: float
    low: float
    high: float
    votes: int
    wins: int
    ties: int
    losses: int

    @property
    def score(self) -> float:
        """Share of its votes won, a tie counting half."""
        return (self.wins + self.ties / 2) / self.votes

    def to_row(self) -> dict:
        return {"rank": self.rank, "config": self.config, "elo": round(self.elo),
                "elo_low": round(self.low), "elo_high": round(self.high), "votes": self.votes,
                "wins": self.wins, "ties": self.ties, "losses": self.losses,
                "score": round(self.score, 3)}


@dataclass(frozen=True)
class Gap:
    """Two neighbours in the ranking and what their own head-to-head votes say."""

    upper: str
    lower: str
    upper_wins: int
    lower_wins: int
    ties: int
    overlap: bool
    """Whether their bootstrap intervals overlap (not separated yet)."""

    @property
    def met(self) -> int:
        return self.upper_wins + self.lower_wins + self.ties

    @property
    def p_value(self) -> float:
        return sign_test(self.upper_wins, self.lower_wins)

    @property
    def to_settle(self) -> int | None:
        """More head-to-head votes, split as so far, for p < 0.05; None if the split is even
        or they never met."""
        if self.met == 0:
            return None
        return votes_to_settle(self.upper_wins, self.lower_wins, self.ties)

    def advice(self) -> str:
        """In words: are the two separated, and what would separate them."""
        pair = f"`{self.upper}` over `{self.lower}`"
        if self.met == 0:
            return (f"{pair}: they have no head-to-head votes; their order rests only on votes "
                    f"against other configurations. Pair them directly in the A/B test.")
        record = (f"{self.met} head-to-head vote{'s' * (self.met != 1)}: {self.upper_wins} "
                  f"for `{self.upper}`, {self.lower_wins} for `{self.lower}`, {self.ties} same "
                  f"(sign test p = {self.p_value:.2g})")
        more = self.to_settle
        if more == 0:
            return f"{pair}: separated; {record}."
        if more is None:
            return (f"{pair}: {record}; the split is even, so more votes at this split would "
                    f"not separate them: they may sound the same.")
        said = f"{pair}: not separated; {record}. About {more} more votes at this split would."
        if not self.overlap:
            said += (" Their intervals already part, but resampling a one-sided record over few "
                     "votes cannot vary it, so the sign test is the stricter judge here.")
        return said


@dataclass(frozen=True)
class Ranking:
    """Standings best first, with the neighbours' gaps and how the intervals were drawn."""

    standings: list[Standing]
    gaps: list[Gap]
    votes: int
    resamples: int
    seed: int

    def standing(self, config: str) -> Standing:
        for standing in self.standings:
            if standing.config == config:
                return standing
        known = ", ".join(s.config for s in self.standings)
        raise RankingError(f"config {config!r} has no votes; ranked: {known}")

    def to_rows(self) -> list[dict]:
        return [s.to_row() for s in self.standings]


def matches_from_votes(votes: Iterable[Vote]) -> list[Match]:
    """The stored A/B votes as matches between the configs heard as X and Y."""
    score = {"x": 1.0, "y": 0.0, "same": 0.5}
    return [Match(v.config_x, v.config_y, score[v.choice]) for v in votes
            if v.config_x != v.config_y]


def rank(matches: Sequence[Match], configs: Sequence[str] | None = None, *,
         resamples: int = RESAMPLES, seed: int = SEED,
         confidence: float = CONFIDENCE) -> Ranking:
    """Fit Bradley-Terry to the matches and bootstrap its Elo ratings.

    `configs`, when given, names every configuration the matches may mention, and each must
    have at least one vote; a match naming any other is refused.
    """
    names = _names(matches, configs)
    index = {name: i for i, name in enumerate(names)}
    kinds, counts = _tally(matches, index)
    wins, games = _tables(kinds, counts[None, :], len(names))
    elo = _elo(_fit(wins, games))[0]
    draws = np.random.default_rng(seed).multinomial(counts.sum(), counts / counts.sum(),
                                                    size=resamples)
    spread = _elo(_fit(*_tables(kinds, draws, len(names))))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(spread, [tail, 100 - tail], axis=0)
    order = sorted(range(len(names)), key=lambda i: (-elo[i], names[i]))
    records = _records(matches, names)
    standings = [Standing(rank, names[i], float(elo[i]), float(low[i]), float(high[i]),
                          *records[names[i]]) for rank, i in enumerate(order, 1)]
    gaps = [_gap(up, down, matches) for up, down in zip(standings, standings[1:], strict=False)]
    return Ranking(standings, gaps, len(matches), resamples, seed)


def _names(matches: Sequence[Match], configs: Sequence[str] | None) -> list[str]:
    if not matches:
        raise RankingError("no votes to rank yet")
    for m in matches:
        if not (isinstance(m.a, str) and m.a.strip() and isinstance(m.b, str) and m.b.strip()):
            raise RankingError(f"a match needs two config names, got {m.a!r} and {m.b!r}")
        if m.a == m.b:
            raise RankingError(f"a match needs two different configs, got {m.a!r} twice")
        if m.score not in (0.0, 0.5, 1.0):
            raise RankingError(f"a match's score is 1, 0.5 or 0, got {m.score!r}")
    voted = sorted({m.a for m in matches} | {m.b for m in matches})
    if configs is None:
        return voted
    unknown = [name for name in voted if name not in configs]
    if unknown:
        raise RankingError(f"votes name unknown config(s) {unknown}; known: {list(configs)}")
    silent = [name for name in configs if name not in voted]
    if silent:
        raise RankingError(f"config(s) {silent} have no votes to rank them by")
    return list(dict.fromkeys(configs))


def _tally(matches: Sequence[Match], index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (a, b, score) outcomes as rows of `kinds`, and how often each occurred: the
    bootstrap resamples these counts instead of the votes one by one."""
    seen: dict[tuple[int, int, float], int] = {}
    for m in matches:
        key = (index[m.a], index[m.b], m.score)
        seen[key] = seen.get(key, 0) + 1
    return np.array(list(seen), dtype=float), np.array(list(seen.values()), dtype=float)


def _tables(kinds: np.ndarray, counts: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per draw: each config's wins (ties half) and the games between each pair, (draws, n)
    and (draws, n, n)."""
    a, b, score = kinds[:, 0].astype(int), kinds[:, 1].astype(int), kinds[:, 2]
    into_a, into_b = np.eye(size)[a], np.eye(size)[b]  # (kinds, n) one-hot rows
    wins = counts @ (score[:, None] * into_a + (1 - score)[:, None] * into_b)
    meetings = np.einsum("ki,kj->kij", into_a, into_b)
    games = np.einsum("dk,kij->dij", counts, meetings + meetings.transpose(0, 2, 1))
    return wins, games


def _fit(wins: np.ndarray, games: np.ndarray) -> np.ndarray:
    """Bradley-Terry log strengths maximising the likelihood, one fit per draw, all at once.

    Newton's method on the log strengths (a logistic fit): the virtual ties make the
    likelihood strictly concave, so a few steps converge. Zermelo's MM iteration reaches the
    same point, but once the votes far outnumber the virtual ties the overall level is held
    only by those, and it crawls: 20,000 steps for 2,000 votes among four configurations.
    Steps are capped at one unit of log strength so a lopsided record cannot overshoot.
    Returns (draws, n).
    """
    theta = np.zeros_like(wins)
    won = wins + PRIOR_TIES / 2
    for _ in range(MAX_STEPS):
        beats = _sigmoid(theta[:, :, None] - theta[:, None, :])
        versus_average = _sigmoid(theta)
        slope = won - (games * beats).sum(axis=2) - PRIOR_TIES * versus_average
        spread = games * beats * (1 - beats)
        own = spread.sum(axis=2) + PRIOR_TIES * versus_average * (1 - versus_average)
        curvature = spread - own[:, :, None] * np.eye(wins.shape[1])
        step = np.clip(np.linalg.solve(curvature, -slope[..., None])[..., 0], -1.0, 1.0)
        theta = theta + step
        if np.abs(step).max() < TOLERANCE:
            break
    return theta


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(x / 2))


def _elo(log_strength: np.ndarray) -> np.ndarray:
    """Log strengths on the Elo scale, the average configuration at ELO_BASE."""
    centred = log_strength - log_strength.mean(axis=-1, keepdims=True)
    return ELO_BASE + ELO_SCALE / math.log(10) * centred


def _records(matches: Sequence[Match], names: list[str]) -> dict[str, tuple[int, int, int, int]]:
    """Each config's (votes, wins, ties, losses)."""
    record = {name: [0, 0, 0, 0] for name in names}
    for m in matches:
        for side, won in ((m.a, m.score), (m.b, 1 - m.score)):
            row = record[side]
            row[0] += 1
            row[1 if won == 1 else 2 if won == 0.5 else 3] += 1
    return {name: tuple(row) for name, row in record.items()}


def _gap(upper: Standing, lower: Standing, matches: Sequence[Match]) -> Gap:
    up_wins = down_wins = ties = 0
    for m in matches:
        if {m.a, m.b} != {upper.config, lower.config}:
            continue
        up_score = m.score if m.a == upper.config else 1 - m.score
        if up_score == 0.5:
            ties += 1
        elif up_score == 1:
            up_wins += 1
        else:
            down_wins += 1
    overlap = upper.low <= lower.high
    return Gap(upper.config, lower.config, up_wins, down_wins, ties, overlap)
