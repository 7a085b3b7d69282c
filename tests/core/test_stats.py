"""The evaluation statistics (core.stats) against numbers known from elsewhere."""

from __future__ import annotations

import math

import pytest

from core.stats import (
    JudgedPair,
    Tally,
    agreement,
    agreement_on_common,
    mean_of,
    pass_rate,
    proportion,
    tally_arms,
    tally_pairs,
    wilson_interval,
    win_rate,
)

# Newcombe (1998), "Two-sided confidence intervals for the single proportion",
# Statistics in Medicine 17:857-872, table II, method 3 (score interval without
# continuity correction), to the four decimals the paper prints.
NEWCOMBE = [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0000, 0.1611),
    (1, 29, 0.0061, 0.1718),
]


@pytest.mark.parametrize(("k", "n", "low", "high"), NEWCOMBE)
def test_wilson_matches_the_published_values(k: int, n: int, low: float, high: float) -> None:
    got = wilson_interval(k, n)
    assert round(got[0], 4) == low
    assert round(got[1], 4) == high


def _score_test_bound(k: float, n: int, *, upper: bool, z: float = 1.959963984540054) -> float:
    """Find a bound by inverting the score test with bisection (no closed form involved)."""

    def rejected(p: float) -> bool:
        return abs(k / n - p) > z * math.sqrt(p * (1 - p) / n)

    lo, hi = (k / n, 1.0) if upper else (0.0, k / n)
    for _ in range(200):
        mid = (lo + hi) / 2
        inside = not rejected(mid)
        if upper:
            lo, hi = (mid, hi) if inside else (lo, mid)
        else:
            lo, hi = (lo, mid) if inside else (mid, hi)
    return (lo + hi) / 2


@pytest.mark.parametrize(("k", "n"), [(3, 10), (7, 9), (2.5, 4), (50, 100), (1, 1000)])
def test_wilson_is_the_inverted_score_test(k: float, n: int) -> None:
    low, high = wilson_interval(k, n)
    assert low == pytest.approx(_score_test_bound(k, n, upper=False), abs=1e-9)
    assert high == pytest.approx(_score_test_bound(k, n, upper=True), abs=1e-9)


def test_four_wins_of_four_exclude_a_coin_flip_and_the_ends_are_exact() -> None:
    low, high = wilson_interval(4, 4)
    assert round(low, 4) == 0.5101 and low > 0.5
    assert high == 1.0
    assert wilson_interval(0, 4)[0] == 0.0
    # A wider confidence widens the interval.
    assert wilson_interval(4, 4, confidence=0.99)[0] < low


@pytest.mark.parametrize(
    ("successes", "n"), [(1, 0), (-1, 4), (5, 4), (math.nan, 4), (1, 2.0), (True, 3)]
)
def test_wilson_refuses_what_is_not_a_proportion(successes: float, n: int) -> None:
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


def test_wilson_refuses_a_confidence_outside_zero_and_one() -> None:
    for confidence in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="confidence"):
            wilson_interval(1, 2, confidence=confidence)


def test_nothing_counted_is_no_rate_rather_than_zero() -> None:
    empty = proportion(0, 0)
    assert (empty.rate, empty.low, empty.high, empty.n) == (None, None, None, 0)
    assert pass_rate([]).rate is None


def test_pass_rate_counts_the_share_of_passes() -> None:
    rate = pass_rate([True, True, True, False])
    assert (rate.successes, rate.n, rate.rate) == (3, 4, 0.75)
    assert (rate.low, rate.high) == wilson_interval(3, 4)
    assert rate.as_dict()["rate"] == 0.75


def test_pairs_are_tallied_from_both_sides() -> None:
    pairs = [
        JudgedPair("A", "B", "a"),
        JudgedPair("A", "B", "a"),
        JudgedPair("B", "A", "b"),  # A's post shown as b still counts for A
        JudgedPair("A", "B", "tie"),
        JudgedPair("B", "C", "b"),
    ]
    tallies = tally_pairs(pairs)
    assert tallies["A", "B"] == Tally(wins=3, ties=1, losses=0)
    assert tallies["B", "A"] == Tally(wins=0, ties=1, losses=3)
    assert tallies["B", "C"] == Tally(wins=0, ties=0, losses=1)
    assert tallies["C", "B"] == Tally(wins=1, ties=0, losses=0)
    arms = tally_arms(pairs)
    assert arms["B"] == Tally(wins=0, ties=1, losses=4)
    assert arms["A"].n == 4 and arms["C"].n == 1


def test_a_pair_needs_two_arms_and_a_known_winner() -> None:
    with pytest.raises(ValueError, match="two different arms"):
        tally_pairs([JudgedPair("A", "A", "a")])
    with pytest.raises(ValueError, match="winner"):
        tally_pairs([JudgedPair("A", "B", "1")])  # type: ignore[arg-type]


def test_ties_count_as_half_a_win() -> None:
    rate = win_rate(Tally(wins=2, ties=2, losses=0))
    assert rate.successes == 3 and rate.n == 4 and rate.rate == 0.75
    assert (rate.low, rate.high) == wilson_interval(3, 4)


def test_all_ties_is_a_coin_flip_and_all_wins_excludes_it() -> None:
    ties = Tally(ties=4).win_rate()
    assert ties.rate == 0.5
    assert ties.low is not None and ties.high is not None
    assert ties.low < 0.5 < ties.high
    wins = Tally(wins=4).win_rate()
    assert wins.rate == 1.0 and wins.low is not None and wins.low > 0.5
    losses = Tally(losses=4).win_rate()
    assert losses.rate == 0.0 and losses.high is not None and losses.high < 0.5


def test_a_mean_is_over_the_known_values_and_says_how_many_were_missing() -> None:
    mean = mean_of([0.8, None, 0.6, 0.7])
    assert mean.value == pytest.approx(0.7)
    assert (mean.count, mean.missing) == (3, 1)
    assert mean_of([0.8, None], require_all=True).value is None
    assert mean_of([]).value is None and mean_of([None]).missing == 1
    assert mean_of([0.1] * 10).value == pytest.approx(0.1, abs=0)  # fsum: no drift
    with pytest.raises(ValueError, match="finite"):
        mean_of([1.0, math.inf])


def test_agreement_with_known_thumbs() -> None:
    # Judge pass/fail vs people's thumbs on 10 runs: 8 agree.
    ratings = [
        (True, True),
        (True, True),
        (True, True),
        (True, True),
        (True, True),
        (False, False),
        (False, False),
        (False, False),
        (True, False),
        (False, True),
    ]
    result = agreement(ratings)
    assert (result.matches, result.n, result.rate) == (8, 10, 0.8)
    assert (result.low, result.high) == wilson_interval(8, 10)
    # Cohen's kappa by hand: each rater passes 6 of 10, chance = .36 + .16 = .52.
    assert result.kappa == pytest.approx((0.8 - 0.52) / (1 - 0.52))


def test_agreement_counts_only_runs_with_both_ratings() -> None:
    judge = {"r1": True, "r2": False, "r3": True, "r4": True}
    people = {"r1": True, "r2": True, "r3": True, "r9": False}
    result = agreement_on_common(judge, people)
    assert (result.matches, result.n) == (2, 3)
    assert result.as_dict()["n"] == 3


def test_agreement_without_ratings_or_variation() -> None:
    none = agreement([])
    assert (none.n, none.rate, none.kappa) == (0, None, None)
    # Both raters always pass: full agreement, and kappa is undefined (chance explains it).
    same = agreement([(True, True)] * 3)
    assert same.rate == 1.0 and same.kappa is None
