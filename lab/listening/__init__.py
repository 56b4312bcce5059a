"""Blind listening tests: shuffle two renderings into X and Y, keep every vote on disk, and rank
configurations from the votes with intervals."""

from lab.listening.blind import SIDES, BlindTrial, Contender, new_session_id, new_trial, unheard
from lab.listening.ranking import (
    Gap,
    Match,
    Ranking,
    RankingError,
    Standing,
    matches_from_votes,
    rank,
)
from lab.listening.votes import CHOICES, Vote, VoteError, VoteStore, WinRate

__all__ = [
    "CHOICES",
    "SIDES",
    "BlindTrial",
    "Contender",
    "Gap",
    "Match",
    "Ranking",
    "RankingError",
    "Standing",
    "Vote",
    "VoteError",
    "VoteStore",
    "WinRate",
    "matches_from_votes",
    "new_session_id",
    "new_trial",
    "rank",
    "unheard",
]
