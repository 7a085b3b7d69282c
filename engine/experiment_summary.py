"""An experiment's summary per arm and its results per example, from its tasks.

`summarize` counts, per arm, the pass rate of its posts' code checks, its wins, ties
and losses against every other arm (`core.stats`: a tie is half a win in the win rate,
with its Wilson interval), its mean critic score, cost, time, calls and tokens, and
the judge's calls and agreement; `results_by_example` puts each example's posts side
by side with the judged pairs and the judge's reasons. Both read tasks as stored
(`engine.experiments`), so a summary can be read at any time, also mid-experiment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.stats import JudgedPair, mean_of, pass_rate, tally_arms, tally_pairs
from engine.experiments import ExampleSnapshot, ExperimentPair, ExperimentRecord, ExperimentRun


def _sum(values: Sequence[float | int | None]) -> float | int | None:
    """Return the sum, or None when a value is unknown (an unknown cost is never zero)."""
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _rate(prefix: str, proportion: Any) -> dict[str, Any]:
    return {
        prefix: proportion.rate,
        f"{prefix}_low": proportion.low,
        f"{prefix}_high": proportion.high,
    }


def judged_pairs(experiment: ExperimentRecord, pairs: Sequence[ExperimentPair]) -> list[JudgedPair]:
    """Return the decided pairs as the statistics count them (by arm name)."""
    names = [arm.name for arm in experiment.arms]
    return [
        JudgedPair(names[p.arm_a], names[p.arm_b], p.winner)
        for p in pairs
        if p.status == "done" and p.winner is not None
    ]


def summarize(
    experiment: ExperimentRecord,
    runs: Sequence[ExperimentRun],
    pairs: Sequence[ExperimentPair],
) -> dict[str, Any]:
    """Return the summary of an experiment's results so far (per arm, and the judge's).

    Pass rates count every finished run of the arm (a run without a post fails);
    wins, ties and losses count the judged pairs (ties as half a win in the win rate,
    `core.stats.win_rate`); costs are sums over the arm's finished runs, unknown as
    soon as one run's cost is.
    """
    decided = judged_pairs(experiment, pairs)
    overall = tally_arms(decided)
    by_opponent = tally_pairs(decided)
    arms: list[dict[str, Any]] = []
    for index, arm in enumerate(experiment.arms):
        finished = [r for r in runs if r.arm == index and not r.open and r.status != "cancelled"]
        results = [r.result or {} for r in finished]
        posts = [res for res in results if res.get("post") is not None]
        tally = overall.get(arm.name)
        wins, ties, losses = (tally.wins, tally.ties, tally.losses) if tally else (0, 0, 0)
        win = tally.win_rate() if tally else None
        against = []
        for other in experiment.arms:
            if other.name == arm.name:
                continue
            versus = by_opponent.get((arm.name, other.name))
            rate = versus.win_rate() if versus else None
            against.append(
                {
                    "arm": other.name,
                    "wins": versus.wins if versus else 0,
                    "ties": versus.ties if versus else 0,
                    "losses": versus.losses if versus else 0,
                    "win_rate": rate.rate if rate else None,
                    "win_rate_low": rate.low if rate else None,
                    "win_rate_high": rate.high if rate else None,
                }
            )
        arms.append(
            {
                **arm.to_json(),
                "runs": len(finished),
                "posts": len(posts),
                "passed": sum(1 for res in results if res.get("passed")),
                **_rate("pass_rate", pass_rate(bool(res.get("passed")) for res in results)),
                "wins": wins,
                "ties": ties,
                "losses": losses,
                "win_rate": win.rate if win else None,
                "win_rate_low": win.low if win else None,
                "win_rate_high": win.high if win else None,
                "against": against,
                "critic_score": mean_of(res.get("critic_score") for res in posts).value,
                "cost": _sum([res.get("cost") for res in results]),
                "cost_per_post": mean_of(
                    (res.get("cost") for res in results), require_all=True
                ).value,
                "seconds_per_post": mean_of(res.get("seconds") for res in results).value,
                "calls": sum(int(res.get("calls") or 0) for res in results),
                "prompt_tokens": _sum([res.get("prompt_tokens") for res in results]),
                "completion_tokens": _sum([res.get("completion_tokens") for res in results]),
            }
        )
    verdicts = [p.result or {} for p in pairs if p.status == "done"]
    return {
        "arms": arms,
        "judge": {
            "pairs": len(pairs),
            "judged": len(verdicts),
            "agreed": sum(1 for v in verdicts if v.get("agreed")),
            "unavailable": sum(1 for v in verdicts if v.get("unavailable")),
            "calls": sum(int(v.get("calls") or 0) for v in verdicts),
            "cost": _sum([v.get("cost") for v in verdicts if v.get("note") is None]),
        },
    }


def results_by_example(
    experiment: ExperimentRecord,
    examples: Sequence[ExampleSnapshot],
    runs: Sequence[ExperimentRun],
    pairs: Sequence[ExperimentPair],
) -> list[dict[str, Any]]:
    """Return, per example, the posts side by side and the judge's verdicts with reasons."""
    names = [arm.name for arm in experiment.arms]
    by_example: dict[int, dict[str, Any]] = {
        ex.example_index: {
            "example_index": ex.example_index,
            "example_id": ex.example_id,
            "input": ex.input,
            "expectations": ex.expectations,
            "posts": [],
            "pairs": [],
        }
        for ex in examples
    }
    for run in sorted(runs, key=lambda r: (r.example_index, r.repetition, r.arm)):
        entry = by_example.get(run.example_index)
        if entry is not None:
            entry["posts"].append(
                {
                    "arm": names[run.arm],
                    "repetition": run.repetition,
                    "status": run.status,
                    "run_id": run.run_id,
                    "thread_id": run.thread_id,
                    "error": run.error,
                    **(run.result or {}),
                }
            )
    for pair in sorted(pairs, key=lambda p: p.key):
        entry = by_example.get(pair.example_index)
        if entry is None:
            continue
        verdict = pair.result or {}
        winner = pair.winner
        entry["pairs"].append(
            {
                "arms": [names[pair.arm_a], names[pair.arm_b]],
                "repetition": pair.repetition,
                "status": pair.status,
                "winner": None
                if winner is None
                else "tie"
                if winner == "tie"
                else names[pair.arm_a if winner == "a" else pair.arm_b],
                "run_id": pair.run_id,
                "thread_id": pair.thread_id,
                "error": pair.error,
                **{k: v for k, v in verdict.items() if k != "winner"},
            }
        )
    return [by_example[index] for index in sorted(by_example)]


__all__ = ["judged_pairs", "results_by_example", "summarize"]
