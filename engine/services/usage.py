"""The usage service: what an owner's runs cost this month, and where it stands on its quotas.

`month(owner)` sums the usage each of the owner's runs recorded when it ended
(`engine.usage`), from the first day of the calendar month (UTC), in total and per
assistant, beside the owner's limits and what it holds now against each. See
docs/keys.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.quotas import QUOTA_NAMES, Limits, month_start, next_month
from engine.services.core import EngineCore
from engine.usage import Holdings, QuotaRepository, UsageTotals, add_totals


@dataclass(frozen=True)
class UsageReport:
    """An owner's month: its runs' usage, its limits and what it holds against them."""

    owner: str
    #: The month's first moment (UTC) and the next month's.
    since: datetime
    until: datetime
    currency: str
    total: UsageTotals
    #: By assistant id, sorted.
    assistants: list[tuple[str, UsageTotals]]
    limits: Limits
    holdings: Holdings

    @property
    def spend_complete(self) -> bool:
        """Whether every run's cost is known (else the spend cap counts the known part only)."""
        return self.total.unknown_cost_runs == 0

    def quotas(self) -> list[dict[str, object]]:
        """Return each quota: its name, limit (None: unlimited) and what is used of it."""
        used: dict[str, float] = {
            "runs_at_once": self.holdings.runs_at_once,
            "runs_per_minute": self.holdings.runs_per_minute,
            "crons": self.holdings.crons,
            "assistants": self.holdings.assistants,
            "store_bytes": self.holdings.store_bytes,
            "monthly_spend": round(self.total.known_cost, 9),
        }
        return [
            {"name": name, "limit": self.limits.get(name), "used": used.get(name)}
            for name in QUOTA_NAMES
        ]


class UsageService:
    """Owners' usage and quotas (see the module docstring)."""

    def __init__(
        self,
        core: EngineCore,
        quotas: QuotaRepository,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """Read the usage recorded in `quotas`; each owner's limits from the core."""
        self._core = core
        self._quotas = quotas
        self._clock = clock

    async def limits(self, owner: str) -> Limits:
        """Return the owner's limits (the deployment's defaults, with its key's overrides)."""
        return await self._core.limits(owner)

    async def month(self, owner: str) -> UsageReport:
        """Return the owner's usage this calendar month (UTC) and its quotas."""
        now = self._clock()
        limits = await self._core.limits(owner)
        since = month_start(now)
        by_assistant = await self._quotas.month(owner, since, limits.currency)
        total = UsageTotals()
        for _, totals in by_assistant:
            total = add_totals(total, totals)
        return UsageReport(
            owner=owner,
            since=since,
            until=next_month(now),
            currency=limits.currency,
            total=total,
            assistants=by_assistant,
            limits=limits,
            holdings=await self._quotas.holdings(owner, now),
        )


__all__ = ["UsageReport", "UsageService"]
