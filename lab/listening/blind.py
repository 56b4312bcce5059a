"""Blind presentation of two renderings as X and Y, and the reveal after the vote.

A listener who knows which take is the optimized one hears what they expect, so the two
configurations are shuffled into X and Y by a coin flip per trial and the labels stay
hidden until the vote is in. The trial holds the mapping; the UI shows only X and Y.

A vote is a judgement of two sounds, so it counts only once both were heard: a caller that
tracks what was played passes it to `vote`, which refuses a vote before both sides.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Collection
from dataclasses import dataclass

from lab.config import PipelineConfig, to_dict
from lab.listening.votes import CHOICES, Vote, VoteError

SIDES = ("x", "y")


@dataclass(frozen=True)
class Contender:
    """One side of a trial: a short label for tables and the full config it stands for."""

    label: str
    config: PipelineConfig

    def config_json(self) -> str:
        return json.dumps(to_dict(self.config), sort_keys=True)


@dataclass(frozen=True)
class BlindTrial:
    """Two contenders rendered from the same text and seed; `a_is_x` is the hidden coin.

    `a` is the baseline and `b` the candidate, whichever of X and Y each is heard as.
    """

    a: Contender
    b: Contender
    text: str
    seed: int
    a_is_x: bool
    session: str

    @property
    def x(self) -> Contender:
        return self.a if self.a_is_x else self.b

    @property
    def y(self) -> Contender:
        return self.b if self.a_is_x else self.a

    def vote(self, choice: str, heard: Collection[str] | None = None) -> Vote:
        """The listener's verdict as a storable vote, in X/Y terms, naming the baseline.

        `heard` holds the sides ("x", "y") the listener has played; when given, a vote
        before both were played is refused. Only a scripted judge passes None.
        """
        if choice not in CHOICES:
            raise VoteError(f"choice={choice!r} is not valid; choose one of {list(CHOICES)}")
        missing = unheard(heard) if heard is not None else []
        if missing:
            raise VoteError("listen to both X and Y before voting; not played yet: "
                            + ", ".join(side.upper() for side in missing))
        return Vote(
            session=self.session,
            text=self.text,
            seed=self.seed,
            config_x=self.x.label,
            config_y=self.y.label,
            choice=choice,
            config_x_json=self.x.config_json(),
            config_y_json=self.y.config_json(),
            baseline=self.a.label,
        )

    def reveal(self) -> dict[str, str]:
        """Which label was behind X and which behind Y."""
        return {"X": self.x.label, "Y": self.y.label}


def unheard(heard: Collection[str]) -> list[str]:
    """The sides of a pair not played yet, in X, Y order."""
    return [side for side in SIDES if side not in heard]


def new_session_id() -> str:
    """A random id grouping one listener's votes; not tied to any identity."""
    return secrets.token_hex(8)


def new_trial(
    a: Contender,
    b: Contender,
    text: str,
    seed: int,
    session: str,
    rng: random.Random | None = None,
) -> BlindTrial:
    """Shuffle `a` and `b` into X and Y with a fair coin (`rng` makes it reproducible)."""
    if not text or not text.strip():
        raise VoteError("a blind trial needs text to render")
    coin = (rng or random.SystemRandom()).random() < 0.5
    return BlindTrial(a=a, b=b, text=text, seed=seed, a_is_x=coin, session=session)
