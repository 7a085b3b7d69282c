"""What runs cost: each run's LLM usage, recorded when it ends, and an owner's month.

The engine measures a run's LLM calls, tokens and cost with the `RunMeter` its opener
is given (the product's: `providers.usage.RunMeter`, which prices calls with
`LLM_PRICES`), around the run's graph. When the run ends, its `RunUsage` is written
in the transaction of its terminal status (`engine.records.RunUsageRecorded`), to a
table of its own (`run_usage`), not to the run's row: a run deleted afterwards (its
thread deleted, a rollback, `on_completion: delete`, retention) still counts toward
its owner's month, so deleting cannot reset a spend cap.

Unknown is never zero: a run whose calls were not all metered and priced has cost
None, an owner's month with such runs reports its cost as unknown (`cost` None,
`unknown_cost_runs` > 0) beside the known part (`known_cost`), and the spend cap
(`engine.quotas`) counts the known part only. A run no meter measured (the engine
opened without one, or a run abandoned after its worker died) has every field None.
See docs/keys.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from core.usage import RunUsage

#: The usage of a run nothing measured.
UNMEASURED = RunUsage()


class UsageReading(Protocol):
    """What a meter measured so far."""

    def usage(self) -> RunUsage:
        """Return the usage measured so far."""
        ...


class RunMeter(Protocol):
    """Measures the LLM calls made inside a block (a run's graph, and the tasks it starts)."""

    def measuring(self) -> AbstractContextManager[UsageReading]:
        """Measure the calls made inside the block; read them from what it yields."""
        ...


@dataclass(frozen=True)
class UsageTotals:
    """The sum of some runs' usage (an owner's month, or one assistant's part of it)."""

    runs: int = 0
    #: Calls, tokens: sums over the runs that know them (None when none does).
    calls: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: The sum of the costs that are known, in the deployment's currency.
    known_cost: float = 0.0
    #: Runs whose cost is unknown (not every call priced, or priced in another currency).
    unknown_cost_runs: int = 0

    @property
    def cost(self) -> float | None:
        """The runs' cost: known only when every run's is."""
        return self.known_cost if self.unknown_cost_runs == 0 else None

    def to_json(self) -> dict[str, Any]:
        """Return the totals as the usage answer shows them."""
        return {
            "runs": self.runs,
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": round(self.cost, 9) if self.cost is not None else None,
            "known_cost": round(self.known_cost, 9),
            "unknown_cost_runs": self.unknown_cost_runs,
        }


def add_totals(a: UsageTotals, b: UsageTotals) -> UsageTotals:
    """Return the sum of two totals (a None sum stays None only when both are)."""

    def plus(x: int | None, y: int | None) -> int | None:
        return None if x is None and y is None else (x or 0) + (y or 0)

    return UsageTotals(
        runs=a.runs + b.runs,
        calls=plus(a.calls, b.calls),
        prompt_tokens=plus(a.prompt_tokens, b.prompt_tokens),
        completion_tokens=plus(a.completion_tokens, b.completion_tokens),
        known_cost=a.known_cost + b.known_cost,
        unknown_cost_runs=a.unknown_cost_runs + b.unknown_cost_runs,
    )


@dataclass(frozen=True)
class Holdings:
    """What an owner holds now, against its count quotas."""

    runs_at_once: int
    runs_per_minute: int
    crons: int
    assistants: int
    store_bytes: int


class QuotaRepository(Protocol):
    """A backend's counts for quotas and usage, and the Store's byte accounting.

    The counts checked when a run, a cron or an assistant is created are made by
    those repositories' inserts, in their own transactions; this one answers reports
    and keeps the Store's part (its puts go through `engine.store.ScopedStore`).
    """

    async def month(
        self, owner: str, since: datetime, currency: str
    ) -> list[tuple[str, UsageTotals]]:
        """Return the usage of the owner's runs that ended since `since`, by assistant id."""
        ...

    async def holdings(self, owner: str, now: datetime) -> Holdings:
        """Return what the owner holds now (runs, crons, assistants, Store bytes)."""
        ...

    def hold(self, owner: str) -> AbstractAsyncContextManager[None]:
        """Hold the owner's Store accounting for the block (one holder in any process)."""
        ...

    async def store_bytes(self, owner: str, excluding: Sequence[tuple[str, str]] = ()) -> int:
        """Return the bytes of the owner's Store items, but those named (prefix, key)."""
        ...

    async def store_written(
        self, owner: str, writes: Sequence[tuple[str, str, int | None]]
    ) -> None:
        """Record Store writes: (prefix, key, bytes of the new value, or None: deleted)."""
        ...

    async def admit_search(self, owner: str, limit: int | None) -> None:
        """Count a Store search of the owner; raise `QuotaExceeded` over `limit` a minute."""
        ...


__all__ = [
    "UNMEASURED",
    "Holdings",
    "QuotaRepository",
    "RunMeter",
    "RunUsage",
    "UsageReading",
    "UsageTotals",
    "add_totals",
]
