"""Bradley-Terry rankings from blind votes: known strengths come back in order, intervals
narrow with votes, equal configurations stay together, ties count half, bad input is named."""

import math

import numpy as np
import pytest

from lab.listening import Match, RankingError, Vote, matches_from_votes, rank

TRUE_ELO = {"fp32": 1120, "bf16": 1060, "int8": 980, "stream8": 900, "int4": 820}


def simulate(elo: dict[str, float], votes: int, seed: int = 0, tie_rate: float = 0.2
             ) -> list[Match]:
    """Random pairs judged by the Bradley-Terry law of `elo`; a share of them called ties."""
    rng = np.random.default_rng(seed)
    names = list(elo)
    matches = []
    for _ in range(votes):
        i, j = rng.choice(len(names), 2, replace=False)
        a, b = names[i], names[j]
        if rng.random() < tie_rate:
            matches.append(Match(a, b, 0.5))
        else:
            a_wins = rng.random() < 1 / (1 + 10 ** ((elo[b] - elo[a]) / 400))
            matches.append(Match(a, b, float(a_wins)))
    return matches


def widths(matches: list[Match]) -> dict[str, float]:
    return {s.config: s.high - s.low for s in rank(matches).standings}


def test_known_strengths_come_back_in_order():
    ranking = rank(simulate(TRUE_ELO, 3000))
    assert [s.config for s in ranking.standings] == list(TRUE_ELO)
    assert [s.rank for s in ranking.standings] == [1, 2, 3, 4, 5]
    assert all(s.low <= s.elo <= s.high for s in ranking.standings)
    assert all(not gap.overlap for gap in ranking.gaps)


def test_without_ties_the_intervals_hold_the_true_ratings():
    """Ties called at random pull every rating towards the middle; without them the fit lands
    on the simulated Elo scale (centred on 1000)."""
    centre = np.mean(list(TRUE_ELO.values()))
    for s in rank(simulate(TRUE_ELO, 3000, seed=4, tie_rate=0.0)).standings:
        assert s.low - 10 < TRUE_ELO[s.config] - centre + 1000 < s.high + 10


def test_a_lopsided_pair_sits_where_the_elo_law_puts_it():
    """3 to 1 is log10(3) * 400 = 191 Elo points apart once the votes swamp the virtual tie."""
    matches = [Match("a", "b", 1.0)] * 3000 + [Match("a", "b", 0.0)] * 1000
    a, b = rank(matches, resamples=200).standings
    assert a.elo - b.elo == pytest.approx(400 * math.log10(3), abs=1.0)
    assert a.elo + b.elo == pytest.approx(2000)


def test_intervals_shrink_as_votes_grow():
    few, some, many = (widths(simulate(TRUE_ELO, n, seed=1)) for n in (60, 600, 6000))
    for config in TRUE_ELO:
        assert few[config] > some[config] > many[config]
    assert max(many.values()) < 60 < min(few.values())


def test_identical_strengths_give_overlapping_intervals():
    ranking = rank(simulate(dict.fromkeys("abcd", 1000.0), 400, seed=2))
    top, bottom = ranking.standings[0], ranking.standings[-1]
    assert top.low < bottom.high, "equal configs must not look separated"
    assert all(gap.overlap for gap in ranking.gaps)
    assert all(s.low < 1000 < s.high for s in ranking.standings)


def test_a_tie_is_half_a_win_for_each_side():
    two_ties = rank([Match("a", "b", 0.5)] * 2 + [Match("b", "c", 1.0)])
    split = rank([Match("a", "b", 1.0), Match("a", "b", 0.0), Match("b", "c", 1.0)])
    assert [(s.config, s.elo) for s in two_ties.standings] == pytest.approx(
        [(s.config, s.elo) for s in split.standings])
    only_ties = rank([Match("a", "b", 0.5)] * 5)
    assert [s.elo for s in only_ties.standings] == pytest.approx([1000, 1000])
    a = only_ties.standing("a")
    assert (a.votes, a.wins, a.ties, a.losses, a.score) == (5, 0, 5, 0, 0.5)


def test_an_unbeaten_config_gets_a_finite_rating():
    ranking = rank([Match("a", "b", 1.0)] * 4)
    a, b = ranking.standings
    assert a.config == "a" and math.isfinite(a.elo) and 1000 < a.elo < 1400
    assert a.high < 1600


def test_the_bootstrap_is_reproducible_by_its_seed():
    matches = simulate(TRUE_ELO, 200, seed=3)
    assert rank(matches).to_rows() == rank(matches).to_rows()
    assert rank(matches, seed=1).to_rows() != rank(matches).to_rows()
    assert rank(matches).resamples == 1000


def test_neighbours_say_what_would_separate_them():
    matches = ([Match("a", "b", 1.0)] * 10 + [Match("a", "b", 0.0)] * 1
               + [Match("b", "c", 1.0)] * 3 + [Match("c", "b", 1.0)] * 2
               + [Match("c", "d", 1.0)] * 3 + [Match("c", "d", 0.0)] * 3
               + [Match("a", "d", 1.0)] * 2)
    ranking = rank(matches)
    assert [s.config for s in ranking.standings] == ["a", "b", "c", "d"]
    settled, open_, even = ranking.gaps
    assert settled.to_settle == 0 and "separated;" in settled.advice()
    assert (open_.upper_wins, open_.lower_wins, open_.ties) == (3, 2, 0)
    assert open_.to_settle > 0 and f"About {open_.to_settle} more votes" in open_.advice()
    assert even.to_settle is None and "even" in even.advice()

    one_sided = rank([Match("a", "b", 1.0)] * 4 + [Match("b", "c", 1.0)] * 4).gaps[0]
    assert not one_sided.overlap and one_sided.to_settle > 0, "4-0 resamples to 4-0"
    assert "the sign test is the stricter judge" in one_sided.advice()
    never = rank([Match("a", "b", 1.0)] * 3 + [Match("c", "b", 1.0)] * 3)
    (gap,) = [g for g in never.gaps if {g.upper, g.lower} == {"a", "c"}]
    assert gap.met == 0 and gap.to_settle is None
    assert "no head-to-head votes" in gap.advice()


def test_votes_become_matches_by_what_was_heard_as_x_and_y():
    def vote(choice, x="fp32", y="bf16"):
        return Vote(session="s", text="t", seed=0, config_x=x, config_y=y, choice=choice)

    matches = matches_from_votes([vote("x"), vote("y"), vote("same"), vote("x", "a", "a")])
    assert matches == [Match("fp32", "bf16", 1.0), Match("fp32", "bf16", 0.0),
                       Match("fp32", "bf16", 0.5)]


@pytest.mark.parametrize(
    ("matches", "configs", "message"),
    [
        ([], None, "no votes"),
        ([Match("a", "b", 1.0)], ["a", "c"], r"unknown config\(s\) \['b'\]"),
        ([Match("a", "b", 1.0)], ["a", "b", "c"], r"\['c'\] have no votes"),
        ([Match("a", "a", 1.0)], None, "two different configs"),
        ([Match("a", "", 1.0)], None, "two config names"),
        ([Match("a", "b", 0.3)], None, "1, 0.5 or 0"),
    ],
)
def test_bad_input_is_refused_with_the_reason(matches, configs, message):
    with pytest.raises(RankingError, match=message):
        rank(matches, configs)


def test_asking_for_an_unranked_config_names_the_ranked_ones():
    with pytest.raises(RankingError, match="'int4' has no votes; ranked: a, b"):
        rank([Match("a", "b", 1.0)]).standing("int4")
