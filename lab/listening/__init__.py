"""Blind listening tests: shuffle two renderings into X and Y, keep every vote on disk."""

from lab.listening.blind import BlindTrial, Contender, new_session_id, new_trial
from lab.listening.votes import CHOICES, Vote, VoteError, VoteStore, WinRate

__all__ = [
    "CHOICES",
    "BlindTrial",
    "Contender",
    "Vote",
    "VoteError",
    "VoteStore",
    "WinRate",
    "new_session_id",
    "new_trial",
]
