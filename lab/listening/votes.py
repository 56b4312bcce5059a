"""A durable store of blind listening votes, and win rates computed from them.

Listening tests are slow to collect, so a vote must survive the app being killed the
moment after the button is pressed. Each vote is one SQLite transaction in WAL mode with
full sync: once `record` returns, the vote is on disk. A connection is opened per call, so
request threads never share one and a crashed process leaves nothing half-written.
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
    choice TEXT NOT NULL CHECK (choice IN ('x', 'y', 'same'))
)
"""


class VoteError(ValueError):
    """A vote is missing a field or names a choice other than x, y or same."""


@dataclass(frozen=True)
class Vote:
    """One listener's verdict on one blind pair; `config_x` is the label heard as X."""

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

    @property
    def winner(self) -> str | None:
        """The winning config label, or None for a tie."""
        return {"x": self.config_x, "y": self.config_y}.get(self.choice)


@dataclass(frozen=True)
class WinRate:
    """Head-to-head tally of two configs, `config_a` < `config_b` alphabetically.

    Rates are over all votes of the pair, ties included, so the three rates sum to one.
    """

    config_a: str
    config_b: str
    a_wins: int
    b_wins: int
    ties: int

    @property
    def total(self) -> int:
        return self.a_wins + self.b_wins + self.ties

    @property
    def a_rate(self) -> float:
        return self.a_wins / self.total

    @property
    def b_rate(self) -> float:
        return self.b_wins / self.total

    @property
    def tie_rate(self) -> float:
        return self.ties / self.total

    def to_row(self) -> dict:
        return {
            "config_a": self.config_a,
            "config_b": self.config_b,
            "votes": self.total,
            "a_wins": self.a_wins,
            "b_wins": self.b_wins,
            "ties": self.ties,
            "a_win_rate": round(self.a_rate, 3),
            "b_win_rate": round(self.b_rate, 3),
        }


def _check(vote: Vote) -> None:
    if vote.choice not in CHOICES:
        raise VoteError(f"choice={vote.choice!r} is not valid; choose one of {list(CHOICES)}")
    for name in ("session", "text", "config_x", "config_y"):
        value = getattr(vote, name)
        if not isinstance(value, str) or not value.strip():
            raise VoteError(f"a vote needs a non-empty {name}")
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
                " config_x_json, config_y_json, choice) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        """One tally per unordered config pair, across every session, most voted first."""
        tallies: dict[tuple[str, str], list[int]] = {}
        for vote in self.votes():
            pair = tuple(sorted((vote.config_x, vote.config_y)))
            counts = tallies.setdefault(pair, [0, 0, 0])
            winner = vote.winner
            if winner is None or vote.config_x == vote.config_y:
                counts[2] += 1
            elif winner == pair[0]:
                counts[0] += 1
            else:
                counts[1] += 1
        rates = [WinRate(a, b, *counts) for (a, b), counts in tallies.items()]
        return sorted(rates, key=lambda r: (-r.total, r.config_a, r.config_b))

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
    }
