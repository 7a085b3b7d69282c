"""Per-key limits: how much one API key may run, create and spend.

A `Limits` value says, for one owner (an API key's owner id), how many runs may be
pending or running at once (`runs_at_once`), how many may start in any 60 s
(`runs_per_minute`), how many crons and created assistants it may keep, how many
bytes its Store items may take (`store_bytes`), how many Store searches with a
`query` it may make in a minute (`store_searches_per_minute`), and how much its runs
may cost in a calendar month (UTC) in the deployment's price currency
(`monthly_spend`). None is unlimited. The deployment's defaults come from settings
(the product's composition); a key's `quotas` override them name by name
(`Limits.overlay`), and the engine asks for an owner's limits (`LimitsFor`) where
the thing is created: every run, whatever its adapter (HTTP, MCP, A2A, a cron's
tick), in the transaction that records it; a cron, an assistant, a Store put, a
Store search. Over a limit the request is refused with `QuotaExceeded` (429, with
`retry_after` seconds); what was already running goes on.

The counts come from the database, in the transaction of the insert, never from a
process's memory: SQLite's single writer makes count and insert one step; in
PostgreSQL a per-owner advisory lock held by that transaction makes every replica's
count and insert take turns (`engine.postgres.quotas`). The one exception is the
embedded deployment's search rate, counted in memory by the one process that owns
DATA_DIR (`SearchWindow`). See docs/keys.md.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from core.settings import Settings
from engine.errors import RunsError

#: The quotas a key's `quotas` may set, in the order they are reported.
QUOTA_NAMES: tuple[str, ...] = (
    "runs_at_once",
    "runs_per_minute",
    "crons",
    "assistants",
    "store_bytes",
    "store_searches_per_minute",
    "monthly_spend",
)
#: The largest value a count quota may take (a bound, not a default).
MAX_COUNT = 10**12
#: The largest spend cap (in the price currency).
MAX_SPEND = 10**12
#: Seconds a refusal of a count quota (crons, assistants, Store bytes) tells the client
#: to wait: nominal, as room comes back only when something is deleted.
COUNT_RETRY_AFTER = 60
#: The window of the per-minute rates, in seconds.
RATE_WINDOW = 60.0


@dataclass(frozen=True, kw_only=True)
class Limits:
    """One owner's limits (None: unlimited); see the module docstring."""

    runs_at_once: int | None = None
    runs_per_minute: int | None = None
    crons: int | None = None
    assistants: int | None = None
    store_bytes: int | None = None
    store_searches_per_minute: int | None = None
    #: The most this month's runs may cost, in `currency`.
    monthly_spend: float | None = None
    #: The currency of `monthly_spend` and of run costs (LLM_PRICE_CURRENCY); not a quota.
    currency: str = "USD"

    def overlay(self, overrides: Mapping[str, Any]) -> Limits:
        """Return these limits with a key's overrides on top (a name set to None: unlimited).

        Raises:
            ValueError: An unknown name, or a value that is not a whole number (a
                decimal for `monthly_spend`) from 0 to the bound.
        """
        checked: dict[str, Any] = check_quotas(overrides)
        return replace(self, **checked)

    def get(self, name: str) -> int | float | None:
        """Return the limit of a quota by name."""
        if name not in QUOTA_NAMES:
            raise KeyError(name)
        value: int | float | None = getattr(self, name)
        return value

    def to_json(self) -> dict[str, int | float | None]:
        """Return the quotas by name (None: unlimited)."""
        return {name: self.get(name) for name in QUOTA_NAMES}

    @property
    def counts_runs(self) -> bool:
        """Whether creating a run must count the owner's runs or spend first."""
        return any(
            v is not None for v in (self.runs_at_once, self.runs_per_minute, self.monthly_spend)
        )


#: Nothing limited.
UNLIMITED = Limits()
#: Returns an owner's limits (the deployment's defaults with the key's overrides).
LimitsFor = Callable[[str], Awaitable[Limits]]


def check_quotas(
    quotas: Mapping[str, Any], *, label: str = "quota "
) -> dict[str, int | float | None]:
    """Return a key's quota overrides checked (unknown names and bad values refused).

    Args:
        quotas: Quota name → limit: a whole number from 0 (a decimal for
            `monthly_spend`), or None for unlimited.
        label: What a message calls a quota before its name (`quotas.` names the
            field of a key's request).

    Raises:
        ValueError: Naming the quota and the rule it broke.
    """
    checked: dict[str, int | float | None] = {}
    for name, value in quotas.items():
        if name not in QUOTA_NAMES:
            raise ValueError(f"unknown quota {name!r}; quotas: {', '.join(QUOTA_NAMES)}")
        if value is None:
            checked[name] = None
        elif name == "monthly_spend":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{label}monthly_spend must be a number or null")
            if not math.isfinite(value) or not 0 <= value <= MAX_SPEND:
                raise ValueError(f"{label}monthly_spend must be from 0 to {MAX_SPEND}")
            checked[name] = float(value)
        else:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{label}{name} must be a whole number or null")
            if not 0 <= value <= MAX_COUNT:
                raise ValueError(f"{label}{name} must be from 0 to {MAX_COUNT}")
            checked[name] = value
    return checked


def limits_from_settings(settings: Settings) -> Limits:
    """Return the deployment's default limits (the `QUOTA_*` settings, in LLM_PRICE_CURRENCY)."""
    return Limits(
        runs_at_once=settings.quota_runs_at_once,
        runs_per_minute=settings.quota_runs_per_minute,
        crons=settings.quota_crons,
        assistants=settings.quota_assistants,
        store_bytes=settings.quota_store_bytes,
        store_searches_per_minute=settings.quota_store_searches_per_minute,
        monthly_spend=settings.quota_monthly_spend,
        currency=settings.llm_price_currency,
    )


def fixed_limits(limits: Limits) -> LimitsFor:
    """Return a `LimitsFor` that gives every owner `limits`."""

    async def limits_for(_owner: str) -> Limits:
        return limits

    return limits_for


def limits_with_overrides(
    defaults: Limits, overrides: Callable[[str], Awaitable[Mapping[str, Any]]] | None
) -> LimitsFor:
    """Return a `LimitsFor`: `defaults`, with each owner's overrides (a key's `quotas`) on top.

    Args:
        defaults: The deployment's limits (settings).
        overrides: Returns an owner's quota overrides (empty: the defaults); None: none.
    """
    if overrides is None:
        return fixed_limits(defaults)
    read = overrides

    async def limits_for(owner: str) -> Limits:
        return defaults.overlay(await read(owner))

    return limits_for


class QuotaExceeded(RunsError):
    """A request over one of its owner's quotas (HTTP 429 with `Retry-After`)."""

    status = 429

    def __init__(
        self, quota: str, limit: int | float, retry_after: float, *, why: str = ""
    ) -> None:
        """Name the quota, its limit and when to retry (seconds, rounded up, at least 1).

        Args:
            quota: The quota's name (`QUOTA_NAMES`).
            limit: Its limit.
            retry_after: Seconds until a retry may pass.
            why: More of the sentence (what was counted), after the quota's name.
        """
        self.quota = quota
        self.limit = limit
        self.retry_after = max(1, math.ceil(retry_after))
        shown = f"{limit:g}" if isinstance(limit, float) else str(limit)
        more = f": {why}" if why else ""
        super().__init__(
            f"quota {quota} ({shown}) reached{more}; retry in {self.retry_after} s",
            field=quota,
        )


# -- the counts a run's creation checks -----------------------------------------------


@dataclass(frozen=True)
class RunCounts:
    """What an owner has under way and spent, counted in the transaction of a run's insert."""

    #: Runs pending or running.
    active: int = 0
    #: Runs created in the last `RATE_WINDOW` seconds (deleted ones too).
    recent: int = 0
    #: When the run whose leaving the window makes room was created (None: no such run).
    frees_at: datetime | None = None
    #: This month's known cost in the limits' currency (runs of unknown cost count 0 here
    #: and are reported apart, `engine.usage`).
    spent: float = 0.0


def rate_cutoff(now: datetime) -> datetime:
    """Return the start of the per-minute window that ends at `now`."""
    return now - timedelta(seconds=RATE_WINDOW)


def month_start(now: datetime) -> datetime:
    """Return the start (UTC) of the calendar month `now` is in."""
    now = now.astimezone(UTC)
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def next_month(now: datetime) -> datetime:
    """Return the start (UTC) of the calendar month after `now`'s."""
    start = month_start(now)
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def check_run_counts(limits: Limits, counts: RunCounts, now: datetime) -> None:
    """Refuse a new run that would go over a limit (`QuotaExceeded`).

    The spend cap is checked first: over it, no run starts before next month.
    """
    if limits.monthly_spend is not None and counts.spent >= limits.monthly_spend:
        raise QuotaExceeded(
            "monthly_spend",
            limits.monthly_spend,
            (next_month(now) - now).total_seconds(),
            why=f"this month's runs cost {counts.spent:.6g} {limits.currency}",
        )
    if limits.runs_at_once is not None and counts.active >= limits.runs_at_once:
        raise QuotaExceeded(
            "runs_at_once",
            limits.runs_at_once,
            5,
            why=f"{counts.active} runs are pending or running",
        )
    if limits.runs_per_minute is not None and counts.recent >= limits.runs_per_minute:
        wait = RATE_WINDOW
        if counts.frees_at is not None:
            wait = (counts.frees_at + timedelta(seconds=RATE_WINDOW) - now).total_seconds()
        raise QuotaExceeded("runs_per_minute", limits.runs_per_minute, wait)


def check_count(quota: str, limit: int | None, count: int, adding: int = 1) -> None:
    """Refuse adding `adding` to an owner's `count` of something limited to `limit`."""
    if limit is not None and count + adding > limit:
        raise QuotaExceeded(quota, limit, COUNT_RETRY_AFTER)


def check_store_bytes(limit: int | None, used: int, adding: int) -> None:
    """Refuse a Store put that would bring the owner's items from `used` to `used + adding`."""
    if limit is not None and adding > 0 and used + adding > limit:
        raise QuotaExceeded(
            "store_bytes",
            limit,
            COUNT_RETRY_AFTER,
            why=f"the key's items would take {used + adding} bytes",
        )


# -- the search rate -----------------------------------------------------------------------


def minute_of(now: datetime) -> tuple[datetime, float]:
    """Return the calendar minute (UTC) `now` is in, and the seconds left of it.

    Store searches are counted per calendar minute in both deployments.
    """
    start = now.astimezone(UTC).replace(second=0, microsecond=0)
    return start, RATE_WINDOW - (now - start).total_seconds()


def check_searches(limit: int | None, count: int, seconds_left: float) -> None:
    """Refuse a search that is the `count`-th of its minute when `limit` is passed."""
    if limit is not None and count > limit:
        raise QuotaExceeded("store_searches_per_minute", limit, seconds_left)


class SearchWindow:
    """Store searches per owner in the current calendar minute, in this process's memory.

    For the embedded deployment only: one process owns DATA_DIR, so it sees every
    search. The scale-out deployment counts in PostgreSQL (`engine.postgres.quotas`).
    """

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """Count with `clock`."""
        self._clock = clock
        self._minute: datetime | None = None
        self._counts: dict[str, int] = {}

    def admit(self, owner: str, limit: int | None) -> None:
        """Count one search of `owner`, or refuse it (not counted) when over `limit`."""
        if limit is None:
            return
        minute, left = minute_of(self._clock())
        if minute != self._minute:  # a new minute: every count starts again
            self._minute, self._counts = minute, {}
        count = self._counts.get(owner, 0) + 1
        check_searches(limit, count, left)
        self._counts[owner] = count


__all__ = [
    "COUNT_RETRY_AFTER",
    "QUOTA_NAMES",
    "UNLIMITED",
    "Limits",
    "LimitsFor",
    "QuotaExceeded",
    "RunCounts",
    "SearchWindow",
    "check_count",
    "check_quotas",
    "check_run_counts",
    "check_searches",
    "check_store_bytes",
    "fixed_limits",
    "limits_from_settings",
    "limits_with_overrides",
    "minute_of",
    "month_start",
    "next_month",
    "rate_cutoff",
]
