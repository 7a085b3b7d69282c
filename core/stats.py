"""Statistics of evaluations: proportions with their Wilson interval, tallies, means, agreement.

Pure functions over plain values, with no product types, so the run engine (experiments,
online evaluation) and the product alike may call them:

- `proportion` / `wilson_interval`: a share with its 95 % Wilson score interval;
- `tally_pairs` / `tally_arms`: wins, ties and losses from judged pairs (the judge's
  swap-agreement rule is applied before: a pair arrives here already decided);
- `Tally.win_rate`: ties count as half a win and half a loss (see `win_rate`);
- `pass_rate`, `mean_of`;
- `agreement` / `agreement_on_common`: how often two raters' pass/fail agree (the
  judge's and people's thumbs), with its interval, the count and Cohen's kappa.

The protocol these numbers summarise is in docs/evaluate-internals.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Literal

__all__ = [
    "Agreement",
    "JudgedPair",
    "Mean",
    "Proportion",
    "Tally",
    "Winner",
    "agreement",
    "agreement_on_common",
    "mean_of",
    "pass_rate",
    "proportion",
    "tally_arms",
    "tally_pairs",
    "wilson_interval",
    "win_rate",
]

#: The confidence of every interval here unless a caller asks for another.
CONFIDENCE = 0.95


def _z(confidence: float) -> float:
    """Return the two-sided standard normal quantile of a confidence level (1.96 for 95 %)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(
    successes: float, n: int, *, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Return the Wilson score interval of a proportion (Wilson 1927; Newcombe 1998, method 3).

    The interval holds every p whose score test does not reject the observed share
    ``successes / n``; unlike the Wald interval it stays inside [0, 1] and does not
    collapse to a point at 0 or n successes, which matters for the handful of pairs an
    experiment judges (4 wins of 4 gives 0.510–1.000, not 1.000–1.000).

    Args:
        successes: Successes counted; may be fractional (a tie counting half a win).
        n: Trials, at least 1.
        confidence: The interval's confidence level (0.95: z ≈ 1.96).

    Returns:
        (low, high), inside [0, 1].

    Raises:
        ValueError: n < 1, successes outside 0..n or not finite, or a confidence
            outside (0, 1).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number of at least 1, got {n!r}")
    if isinstance(successes, bool) or not math.isfinite(successes) or not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n ({n}), got {successes!r}")
    z = _z(confidence)
    share = successes / n
    z2n = z * z / n
    denominator = 1 + z2n
    centre = (share + z2n / 2) / denominator
    half = z * math.sqrt(share * (1 - share) / n + z2n / (4 * n)) / denominator
    # At 0 or n successes the bound is exactly 0 or 1; float noise must not move it.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True, slots=True)
class Proportion:
    """A share with its Wilson interval; rate and bounds are None when nothing was counted."""

    successes: float  # may be fractional (ties as half a win)
    n: int
    rate: float | None
    low: float | None
    high: float | None

    def as_dict(self) -> dict[str, Any]:
        """Return the proportion as a JSON-able mapping."""
        return asdict(self)


def proportion(successes: float, n: int, *, confidence: float = CONFIDENCE) -> Proportion:
    """Return `successes` of `n` as a `Proportion` with its Wilson interval (None when n is 0)."""
    if n == 0 and successes == 0:
        return Proportion(successes=0, n=0, rate=None, low=None, high=None)
    low, high = wilson_interval(successes, n, confidence=confidence)
    return Proportion(successes=successes, n=n, rate=successes / n, low=low, high=high)


def pass_rate(passed: Iterable[bool], *, confidence: float = CONFIDENCE) -> Proportion:
    """Return the share of True among `passed` (e.g. posts passing their code checks)."""
    values = list(passed)
    return proportion(sum(1 for v in values if v), len(values), confidence=confidence)


# ---------------------------------------------------------------------------
# Pairs, tallies, win rates
# ---------------------------------------------------------------------------

#: Which post of a judged pair won: arm `a`'s, arm `b`'s, or neither.
Winner = Literal["a", "b", "tie"]


@dataclass(frozen=True, slots=True)
class JudgedPair:
    """One pair of posts as the judge decided it (the swap-agreement rule already applied)."""

    a: str  # the arm that wrote post a
    b: str  # the arm that wrote post b
    winner: Winner


@dataclass(slots=True)
class Tally:
    """Wins, ties and losses of one arm (against one other arm, or against all of them)."""

    wins: int = 0
    ties: int = 0
    losses: int = 0

    @property
    def n(self) -> int:
        """Return the pairs counted."""
        return self.wins + self.ties + self.losses

    def win_rate(self, *, confidence: float = CONFIDENCE) -> Proportion:
        """Return the win rate with its interval, ties counting half (see `win_rate`)."""
        return win_rate(self, confidence=confidence)


def win_rate(tally: Tally, *, confidence: float = CONFIDENCE) -> Proportion:
    """Return an arm's win rate: (wins + ties / 2) / pairs, with its Wilson interval.

    A tie counts as half a win and half a loss, the convention of MT-Bench's adjusted
    win rate (FastChat's `win_rate_adjusted`) and AlpacaEval. Ties are not dropped
    because the judge's swap rule turns every disagreement into a tie: an arm that
    only ever "wins" through position bias then sits at 0.5, where it belongs,
    instead of its few agreed pairs deciding alone. The raw counts travel with the
    rate, so a reader can still compute the ties-excluded rate.
    """
    return proportion(tally.wins + tally.ties / 2, tally.n, confidence=confidence)


_FLIPPED: dict[Winner, Winner] = {"a": "b", "b": "a", "tie": "tie"}


def _count(tally: Tally, outcome: Winner) -> None:
    if outcome == "a":
        tally.wins += 1
    elif outcome == "b":
        tally.losses += 1
    else:
        tally.ties += 1


def tally_pairs(pairs: Iterable[JudgedPair]) -> dict[tuple[str, str], Tally]:
    """Count wins, ties and losses per (arm, opponent), from the arm's side.

    Every pair is counted from both sides: a win of `a` over `b` is a win in
    ``(a, b)`` and a loss in ``(b, a)``.

    Raises:
        ValueError: A pair has the same arm on both sides, or an unknown winner.
    """
    tallies: dict[tuple[str, str], Tally] = {}
    for pair in pairs:
        if pair.a == pair.b:
            raise ValueError(f"a pair needs two different arms, got {pair.a!r} twice")
        if pair.winner not in _FLIPPED:
            raise ValueError(f"winner must be 'a', 'b' or 'tie', got {pair.winner!r}")
        _count(tallies.setdefault((pair.a, pair.b), Tally()), pair.winner)
        _count(tallies.setdefault((pair.b, pair.a), Tally()), _FLIPPED[pair.winner])
    return tallies


def tally_arms(pairs: Iterable[JudgedPair]) -> dict[str, Tally]:
    """Count each arm's wins, ties and losses against every other arm together."""
    totals: dict[str, Tally] = {}
    for (arm, _opponent), tally in tally_pairs(pairs).items():
        total = totals.setdefault(arm, Tally())
        total.wins += tally.wins
        total.ties += tally.ties
        total.losses += tally.losses
    return totals


# ---------------------------------------------------------------------------
# Means
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mean:
    """The mean of the known values, how many were known, and how many were not."""

    value: float | None
    count: int
    missing: int

    def as_dict(self) -> dict[str, Any]:
        """Return the mean as a JSON-able mapping."""
        return asdict(self)


def mean_of(values: Iterable[float | None], *, require_all: bool = False) -> Mean:
    """Return the mean of the values that are known (None is unknown).

    Args:
        values: Numbers, None where a value is unknown (a post no judge scored).
        require_all: The mean is None as soon as one value is unknown: for costs,
            where a mean over the priced posts alone would pass for the mean of all
            (an unknown cost is never zero, `providers.usage`).

    Raises:
        ValueError: A value is NaN or infinite.
    """
    known: list[float] = []
    missing = 0
    for value in values:
        if value is None:
            missing += 1
            continue
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"values must be finite numbers, got {value!r}")
        known.append(number)
    if not known or (require_all and missing):
        return Mean(value=None, count=len(known), missing=missing)
    return Mean(value=math.fsum(known) / len(known), count=len(known), missing=missing)


# ---------------------------------------------------------------------------
# Agreement
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Agreement:
    """How often two raters' pass/fail agree, with its Wilson interval and Cohen's kappa."""

    matches: int
    n: int
    rate: float | None
    low: float | None
    high: float | None
    #: Agreement beyond chance (Cohen 1960): 1 perfect, 0 what chance gives, < 0 worse.
    #: None when chance alone explains everything (both raters always said the same).
    kappa: float | None

    def as_dict(self) -> dict[str, Any]:
        """Return the agreement as a JSON-able mapping."""
        return asdict(self)


def agreement(ratings: Iterable[tuple[bool, bool]], *, confidence: float = CONFIDENCE) -> Agreement:
    """Return how often two raters agree over items both rated.

    Args:
        ratings: One (first rater's pass, second rater's pass) per item, e.g. the
            judge's pass/fail and a person's 👍 (True) / 👎 (False) on one run.
        confidence: The interval's confidence level.
    """
    pairs = [(bool(x), bool(y)) for x, y in ratings]
    n = len(pairs)
    matches = sum(1 for x, y in pairs if x == y)
    share = proportion(matches, n, confidence=confidence)
    kappa = None
    if n:
        first = sum(1 for x, _ in pairs if x) / n
        second = sum(1 for _, y in pairs if y) / n
        chance = first * second + (1 - first) * (1 - second)
        if chance < 1:
            kappa = (matches / n - chance) / (1 - chance)
    return Agreement(
        matches=matches, n=n, rate=share.rate, low=share.low, high=share.high, kappa=kappa
    )


def agreement_on_common(
    first: Mapping[str, bool], second: Mapping[str, bool], *, confidence: float = CONFIDENCE
) -> Agreement:
    """Return the agreement of two raters over the items (e.g. run ids) both rated.

    Items only one rater rated are left out: a run the judge scored and nobody
    thumbed (or the reverse) says nothing about whether they agree.
    """
    common = sorted(first.keys() & second.keys())
    return agreement(((first[k], second[k]) for k in common), confidence=confidence)
