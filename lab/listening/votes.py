"""A durable store of blind listening votes, and win rates computed from them.

Listening tests are slow to collect, so a vote must survive the app being killed the
moment after the button is pressed. Each vote is one SQLite transaction in WAL mode with
full sync: once `record` returns, the vote is on disk. A connection is opened per call, so
request threads never share one and a crashed process leaves nothing half-written.

Win rates follow the arenas: one row per pair of configs, whichever order they were heard
in, with the baseline on the baseline side. A vote names its baseline, and a config is
named by itself, not by what it was compared with, so the same two configs always meet in
the same row.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lab.quality.stats import sign_test, votes_to_settle, wilson_interval

CHOICES = ("x", "y", "same")
DB_NAME = "votes.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    session TEXT NOT NULL,
    text TEXT NOT NULL,
    seed INTEGER NOT NULL,
    config_x TEXT NOT NULL,
    config_y TEXT NOT NULL,
    config_x_json TEXT NOT NULL,
    config_y_json TEXT NOT NULL,
    choice TEXT NOT NULL CHECK (choice IN ('x', 'y', 'same')),
    baseline TEXT
)
"""
# Stores written before votes named their baseline gain the column; their old votes keep
# NULL there and take their pair's orientation from the votes that do name one.
MIGRATIONS = {"baseline": "ALTER TABLE votes ADD COLUMN baseline TEXT"}


class VoteError(ValueError):
    """A vote is missing a field or names a choice other than x, y or same."""


@dataclass(frozen=True)
class Vote:
    """One listener's verdict on one blind pair; `config_x` is the label heard as X and
    `baseline` the label of the side that was the baseline (None: not recorded)."""

    session: str
    text: str
    seed: int
    config_x: str
    config_y: str
    choice: str
    config_x_json: str = "{}"
    config_y_json: str = "{}"
    time: float = 0.0
    id: int | None = None
    baseline: str | None = None

    @property
    def winner(self) -> str | None:
        """The winning config label, or None for a tie."""
        return {"x": self.config_x, "y": self.config_y}.get(self.choice)


@dataclass(frozen=True)
class WinRate:
    """Head-to-head tally of a candidate config against its baseline.

    Rates are over all votes of the pair, ties included, so the three rates sum to one.
    """

    baseline: str
    candidate: str
    baseline_wins: int
    candidate_wins: int
    ties: int

    @property
    def total(self) -> int:
        return self.baseline_wins + self.candidate_wins + self.ties

    @property
    def baseline_rate(self) -> float:
        return self.baseline_wins / self.total

    @property
    def candidate_rate(self) -> float:
        return self.candidate_wins / self.total

    @property
    def tie_rate(self) -> float:
        return self.ties / self.total

    @property
    def preference(self) -> float:
        """The candidate's share, a tie counting half for each side: 0.5 is no preference."""
        return (self.candidate_wins + self.ties / 2) / self.total

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% Wilson interval of `preference`."""
        return wilson_interval(self.candidate_wins + self.ties / 2, self.total)

    @property
    def p_value(self) -> float:
        """Two-sided sign test of the decisive votes against 50/50."""
        return sign_test(self.candidate_wins, self.baseline_wins)

    @property
    def to_settle(self) -> int | None:
        """More votes, split as so far, that the sign test needs to reach p < 0.05."""
        return votes_to_settle(self.candidate_wins, self.baseline_wins, self.ties)

    def to_row(self) -> dict:
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "votes": self.total,
            "baseline_wins": self.baseline_wins,
            "candidate_wins": self.candidate_wins,
            "ties": self.ties,
            "baseline_win_rate": round(self.baseline_rate, 3),
            "candidate_win_rate": round(self.candidate_rate, 3),
            "tie_rate": round(self.tie_rate, 3),
            "candidate_preference": round(self.preference, 3),
            "preference_low": round(self.interval[0], 3),
            "preference_high": round(self.interval[1], 3),
            "p_value": round(self.p_value, 4),
            "votes_to_settle": self.to_settle,
        }


def _baseline_of(pair: tuple[str, str], votes: list[Vote]) -> str:
    """The side the pair's votes name as baseline most often (the latest breaks a tie);
    for a pair none of whose votes names one, the first label alphabetically."""
    named = [v.baseline for v in votes if v.baseline in pair]
    if not named:
        return pair[0]
    counts = {label: named.count(label) for label in pair}
    top = max(counts.values())
    return next(label for label in reversed(named) if counts[label] == top)


def tally(pair: tuple[str, str], votes: list[Vote]) -> WinRate:
    """One pair's votes as wins for its baseline and its candidate, and ties."""
    baseline = _baseline_of(pair, votes)
    candidate = pair[1] if baseline == pair[0] else pair[0]
    wins = {baseline: 0, candidate: 0}
    ties = 0
    for vote in votes:
        winner = vote.winner
        if winner is None or vote.config_x == vote.config_y:
            ties += 1
        else:
            wins[winner] += 1
    return WinRate(baseline, candidate, wins[baseline], wins[candidate], ties)


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _check(vote: Vote) -> None:
    if vote.choice not in CHOICES:
        raise VoteError(f"choice={vote.choice!r} is not valid; choose one of {list(CHOICES)}")
    for name in ("session", "text", "config_x", "config_y"):
        value = getattr(vote, name)
        if not isinstance(value, str) or not value.strip():
            raise VoteError(f"a vote needs a non-empty {name}")
    if vote.baseline is not None and vote.baseline not in (vote.config_x, vote.config_y):
        raise VoteError(f"baseline={vote.baseline!r} is neither config_x nor config_y")
    for name in ("config_x_json", "config_y_json"):
        try:
            json.loads(getattr(vote, name))
        except json.JSONDecodeError as err:
            raise VoteError(f"{name} is not valid JSON: {err}") from err


class VoteStore:
    """Votes in `<data_dir>/votes.sqlite`, shared by every session and every app restart."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / DB_NAME
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(SCHEMA)
            have = {row[1] for row in conn.execute("PRAGMA table_info(votes)")}
            for column, statement in MIGRATIONS.items():
                if column not in have:
                    conn.execute(statement)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30.0)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            yield conn
        finally:
            conn.close()

    def record(self, vote: Vote) -> Vote:
        """Store one vote in its own committed transaction; returns it with id and time."""
        _check(vote)
        stamp = vote.time or time.time()
        with self._connect() as conn, conn:
            cursor = conn.execute(
                "INSERT INTO votes (time, session, text, seed, config_x, config_y,"
                " config_x_json, config_y_json, choice, baseline)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    stamp,
                    vote.session,
                    vote.text,
                    int(vote.seed),
                    vote.config_x,
                    vote.config_y,
                    vote.config_x_json,
                    vote.config_y_json,
                    vote.choice,
                    vote.baseline,
                ),
            )
            new_id = cursor.lastrowid
        return Vote(**{**_fields(vote), "time": stamp, "id": new_id})

    def votes(self) -> list[Vote]:
        """Every stored vote, oldest first."""
        with self._connect() as conn:
            conn.row_factory = sqlite3.Row
            rows = conn.execute("SELECT * FROM votes ORDER BY id").fetchall()
        return [Vote(**dict(row)) for row in rows]

    def __len__(self) -> int:
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM votes").fetchone()[0]

    def win_rates(self) -> list[WinRate]:
        """One tally per pair of configs, across every session, most voted first."""
        groups: dict[tuple[str, str], list[Vote]] = {}
        for vote in self.votes():
            groups.setdefault(_pair(vote.config_x, vote.config_y), []).append(vote)
        rates = [tally(pair, votes) for pair, votes in groups.items()]
        return sorted(rates, key=lambda r: (-r.total, r.baseline, r.candidate))

    def win_rate(self, a: str, b: str) -> WinRate | None:
        """The tally of the pair of configs labelled `a` and `b`, or None before any vote."""
        pair = _pair(a, b)
        votes = [v for v in self.votes() if _pair(v.config_x, v.config_y) == pair]
        return tally(pair, votes) if votes else None

    def export_csv(self, path: str | Path) -> Path:
        """Write every vote, one row each, for analysis elsewhere."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        columns = list(_fields(Vote("s", "t", 0, "a", "b", "x")))
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            for vote in self.votes():
                writer.writerow(_fields(vote))
        return path


def _fields(vote: Vote) -> dict:
    return {
        "id": vote.id,
        "time": vote.time,
        "session": vote.session,
        "text": vote.text,
        "seed": vote.seed,
        "config_x": vote.config_x,
        "config_y": vote.config_y,
        "choice": vote.choice,
        "config_x_json": vote.config_x_json,
        "config_y_json": vote.config_y_json,
        "baseline": vote.baseline,
    }
