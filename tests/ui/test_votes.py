"""The vote store keeps every vote across kills and restarts; blind trials hide and reveal."""

import csv
import random
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from lab.config import PipelineConfig
from lab.listening import Contender, Vote, VoteError, VoteStore, new_trial, unheard
from lab.listening.votes import WinRate
from lab.ui.ab_tab import confidence_text

VOTES_SCHEMA_WITHOUT_BASELINE = """
CREATE TABLE votes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, session TEXT NOT NULL,
    text TEXT NOT NULL, seed INTEGER NOT NULL, config_x TEXT NOT NULL, config_y TEXT NOT NULL,
    config_x_json TEXT NOT NULL, config_y_json TEXT NOT NULL,
    choice TEXT NOT NULL CHECK (choice IN ('x', 'y', 'same'))
)
"""


def _vote(choice: str, x: str = "fp32", y: str = "int8", session: str = "s1",
          baseline: str | None = None) -> Vote:
    return Vote(session=session, text="Hello there.", seed=0, config_x=x, config_y=y,
                choice=choice, baseline=baseline)


def test_store_uses_wal_and_lives_under_data_dir(tmp_path):
    store = VoteStore(tmp_path / "lab-data")
    assert store.path.parent == tmp_path / "lab-data"
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_record_returns_id_and_persists_for_a_new_store(tmp_path):
    stored = VoteStore(tmp_path).record(_vote("x"))
    assert stored.id == 1 and stored.time > 0
    again = VoteStore(tmp_path).votes()
    assert [(v.config_x, v.config_y, v.choice) for v in again] == [("fp32", "int8", "x")]


def test_bad_choice_is_rejected_and_nothing_stored(tmp_path):
    store = VoteStore(tmp_path)
    with pytest.raises(VoteError, match="choice='maybe'"):
        store.record(_vote("maybe"))
    with pytest.raises(VoteError, match="session"):
        store.record(_vote("x", session=" "))
    assert len(store) == 0


def test_win_rates_merge_sessions_and_both_orders(tmp_path):
    store = VoteStore(tmp_path)
    store.record(_vote("x", x="fp32", y="int8", session="s1"))
    store.record(_vote("y", x="int8", y="fp32", session="s2"))
    store.record(_vote("same", x="fp32", y="int8", session="s2"))
    store.record(_vote("x", x="int8", y="fp32", session="s3"))
    store.record(_vote("x", x="bf16", y="fp32", session="s3"))
    rates = store.win_rates()
    top = rates[0]
    assert (top.baseline, top.candidate) == ("fp32", "int8")
    assert (top.baseline_wins, top.candidate_wins, top.ties, top.total) == (2, 1, 1, 4)
    assert top.baseline_rate == pytest.approx(0.5)
    assert top.baseline_rate + top.candidate_rate + top.tie_rate == pytest.approx(1.0)
    assert (rates[1].baseline, rates[1].candidate, rates[1].baseline_wins) == ("bf16", "fp32", 1)


def test_the_baseline_stays_on_the_baseline_side_in_one_row_per_pair(tmp_path):
    """'a-int8' sorts before 'b-fp32', yet it is the candidate: it must not become column A."""
    store = VoteStore(tmp_path)
    base, cand = "b-fp32", "a-int8"
    store.record(_vote("x", x=cand, y=base, session="s1", baseline=base))
    store.record(_vote("x", x=base, y=cand, session="s2", baseline=base))
    store.record(_vote("y", x=base, y=cand, session="s3", baseline=base))
    (rate,) = store.win_rates()
    assert (rate.baseline, rate.candidate) == (base, cand)
    assert (rate.baseline_wins, rate.candidate_wins, rate.ties) == (1, 2, 0)
    row = rate.to_row()
    assert row["baseline"] == base and row["candidate_win_rate"] == pytest.approx(0.667)
    assert store.win_rate(cand, base) == rate == store.win_rate(base, cand)
    assert store.win_rate(base, "other") is None
    with pytest.raises(VoteError, match="baseline='c'"):
        store.record(_vote("x", x=base, y=cand, baseline="c"))


def test_a_store_from_before_baselines_gains_the_column_and_keeps_its_votes(tmp_path):
    old_schema = VOTES_SCHEMA_WITHOUT_BASELINE
    with sqlite3.connect(tmp_path / "votes.sqlite") as conn:
        conn.execute(old_schema)
        conn.execute("INSERT INTO votes (time, session, text, seed, config_x, config_y,"
                     " config_x_json, config_y_json, choice)"
                     " VALUES (1.0, 'old', 't', 0, 'b-fp32', 'a-int8', '{}', '{}', 'x')")
    store = VoteStore(tmp_path)
    (old,) = store.votes()
    assert old.baseline is None and old.winner == "b-fp32"
    store.record(_vote("y", x="a-int8", y="b-fp32", baseline="b-fp32"))
    (rate,) = store.win_rates()
    assert (rate.baseline, rate.candidate, rate.baseline_wins, rate.total) == (
        "b-fp32", "a-int8", 2, 2)


def test_concurrent_votes_are_all_kept(tmp_path):
    store = VoteStore(tmp_path)

    def cast(n: int) -> None:
        for i in range(10):
            store.record(_vote("xy"[i % 2], session=f"t{n}"))

    threads = [threading.Thread(target=cast, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(VoteStore(tmp_path)) == 40


def test_vote_survives_sigkill_right_after_record(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal
        from lab.listening import Vote, VoteStore
        store = VoteStore({str(tmp_path)!r})
        store.record(Vote(session="k", text="t", seed=1, config_x="a", config_y="b",
                          choice="y"))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert proc.returncode == -9
    votes = VoteStore(tmp_path).votes()
    assert [(v.session, v.choice, v.winner) for v in votes] == [("k", "y", "b")]


def test_export_csv_has_one_row_per_vote(tmp_path):
    store = VoteStore(tmp_path)
    store.record(_vote("x"))
    store.record(_vote("same"))
    path = store.export_csv(tmp_path / "out" / "votes.csv")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["choice"] for r in rows] == ["x", "same"]
    assert rows[0]["config_x"] == "fp32" and rows[0]["id"] == "1"


def test_blind_trial_shuffles_and_reveals():
    a = Contender("fp32", PipelineConfig())
    b = Contender("int8", PipelineConfig(quant="int8-dynamic"))
    rng = random.Random(3)
    trials = [new_trial(a, b, "Hi.", 7, "s", rng=rng) for _ in range(40)]
    assert {t.a_is_x for t in trials} == {True, False}
    for t in trials:
        assert {t.x.label, t.y.label} == {"fp32", "int8"}
        assert t.reveal() == {"X": t.x.label, "Y": t.y.label}
        vote = t.vote("x")
        assert vote.winner == t.x.label and vote.baseline == "fp32"
        assert '"quant": "int8-dynamic"' in (
            vote.config_x_json if t.x is b else vote.config_y_json
        )
    with pytest.raises(VoteError, match="choice"):
        trials[0].vote("z")
    with pytest.raises(VoteError, match="text"):
        new_trial(a, b, "  ", 0, "s")


def test_a_vote_before_both_clips_are_heard_is_refused():
    trial = new_trial(Contender("fp32", PipelineConfig()),
                      Contender("bf16", PipelineConfig(dtype="bf16")), "Hi.", 0, "s")
    assert unheard(set()) == ["x", "y"]
    for heard, missing in ((set(), "X, Y"), ({"x"}, "Y"), ({"y"}, "X")):
        with pytest.raises(VoteError, match=f"listen to both X and Y.*not played yet: {missing}$"):
            trial.vote("same", heard=heard)
    assert trial.vote("same", heard={"x", "y"}).choice == "same"


def test_a_win_rate_carries_its_interval_its_p_value_and_the_votes_that_would_settle_it():
    clear = WinRate("fp32", "int8", baseline_wins=4, candidate_wins=16, ties=0)
    row = clear.to_row()
    assert row["p_value"] < 0.05 and row["votes_to_settle"] == 0
    assert row["preference_low"] < 0.8 < row["preference_high"]
    assert "a real preference" in confidence_text(clear)
    early = WinRate("fp32", "int8", baseline_wins=2, candidate_wins=8, ties=2)
    assert early.preference == pytest.approx((8 + 1) / 12)
    assert early.to_row()["votes_to_settle"] > 0
    assert "more votes at this split would settle it" in confidence_text(early)
    even = WinRate("fp32", "int8", baseline_wins=3, candidate_wins=3, ties=1)
    assert even.to_settle is None and "no preference" in confidence_text(even)
