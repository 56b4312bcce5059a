"""Blind listening tests: shuffle two renderings into X and Y, keep every vote on disk."""

from lab.listening.blind import SIDES, BlindTrial, Contender, new_session_id, new_trial, unheard
from lab.listening.votes import CHOICES, Vote, VoteError, VoteStore, WinRate

__all__ = [
    "CHOICES",
    "SIDES",
    "BlindTrial",
    "Contender",
    "Vote",
    "VoteError",
    "VoteStore",
    "WinRate",
    "new_session_id",
    "new_trial",
    "unheard",
]
