"""A key's usage this month and its quotas: `GET /keys/{key_id}/usage`.

What the key's runs cost this calendar month (UTC): runs, LLM calls, tokens and
cost, in total and per assistant, summed from the usage each run recorded when it
ended (`engine.usage`: the same calls, tokens and prices as the runs'
`result.usage`, so the month matches the sum of its runs'), and each quota of the
key with its limit and what is used of it. A cost is known only when every run's
is: with runs of unpriced models the answer says so (`cost` null,
`unknown_cost_runs`, and `spend.complete` false: the spend cap counts the known
part only). See docs/keys.md.

Who may read it: a key, its own usage (`me`, or its own key id); an admin, any
managed key's (`usage_owner`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from app.access import READ
from app.deps import CallerDep, KeysDep, UsageDep
from app.errors import NotFound
from engine import UsageReport, UsageTotals

router = APIRouter(tags=["keys"])

#: The key id that names the caller's own key.
ME = "me"
KeyId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description=f"The key: `{ME}` for the calling key, or a key id.",
        examples=[ME],
    ),
]
QuotaName = Literal[
    "runs_at_once",
    "runs_per_minute",
    "crons",
    "assistants",
    "store_bytes",
    "store_searches_per_minute",
    "monthly_spend",
]


class UsageTotalsOut(BaseModel):
    """Some runs' usage: the month's, or one assistant's part of it."""

    runs: int = Field(ge=0, description="Runs that ended this month.", examples=[12])
    calls: int | None = Field(
        ge=0, description="Their LLM calls (null: none was measured).", examples=[96]
    )
    prompt_tokens: int | None = Field(
        ge=0, description="Prompt tokens of the calls that reported them.", examples=[40210]
    )
    completion_tokens: int | None = Field(
        ge=0, description="Completion tokens of the calls that reported them.", examples=[5120]
    )
    cost: float | None = Field(
        ge=0,
        description="What they cost in `currency`; null when any run's cost is unknown "
        "(a model without a price in LLM_PRICES): unknown is never 0.",
        examples=[0.0123],
    )
    known_cost: float = Field(
        ge=0,
        description="The sum of the costs that are known (all of it when `cost` is not null).",
        examples=[0.0123],
    )
    unknown_cost_runs: int = Field(ge=0, description="Runs whose cost is unknown.", examples=[0])


class AssistantUsageOut(UsageTotalsOut):
    """One assistant's part of the month."""

    assistant_id: str = Field(description="The assistant the runs ran.", examples=["atelier"])


class QuotaOut(BaseModel):
    """One quota of the key."""

    name: QuotaName = Field(description="The quota.", examples=["runs_per_minute"])
    limit: int | float | None = Field(
        description="Its limit (null: unlimited); `monthly_spend` in `currency`.", examples=[60]
    )
    used: int | float | None = Field(
        description="What the key uses of it now: runs pending or running, runs started in "
        "the last 60 s, crons, assistants, Store bytes, this month's known cost (null: "
        "not counted here, the searches of the current minute).",
        examples=[12],
    )


class SpendOut(BaseModel):
    """The monthly spend cap and how it stands."""

    cap: float | None = Field(
        description="The most the key's runs may cost this month (null: no cap).", examples=[50]
    )
    spent: float = Field(
        ge=0, description="What the cap counts: this month's known cost.", examples=[0.0123]
    )
    complete: bool = Field(
        description="Whether every run's cost is known; false: some runs used unpriced "
        "models, and the cap counts the known part only."
    )


class UsageOut(BaseModel):
    """A key's usage this month and its quotas."""

    key_id: str = Field(description="The key, as the path named it.", examples=[ME])
    month: str = Field(
        pattern=r"^\d{4}-\d{2}$", description="The calendar month (UTC).", examples=["2026-03"]
    )
    since: datetime = Field(description="The month's first moment (UTC).")
    until: datetime = Field(description="The next month's first moment (UTC).")
    currency: str = Field(
        description="The currency of costs and of the spend cap (LLM_PRICE_CURRENCY).",
        examples=["USD"],
    )
    total: UsageTotalsOut = Field(description="Every run of the month.")
    assistants: list[AssistantUsageOut] = Field(description="By assistant, sorted by id.")
    quotas: list[QuotaOut] = Field(description="Each quota, its limit and what is used.")
    spend: SpendOut = Field(description="The monthly spend cap.")


def usage_owner(key_id: str, caller: str, *, admin: bool = False) -> str:
    """Return the owner id whose usage `key_id` names for `caller`.

    A key reads its own usage; an admin (`admin`) names any key, whose existence the
    route checks.

    Raises:
        NotFound: Not the caller's own key, for a caller that is no admin.
    """
    if key_id in (ME, caller):
        return caller
    if admin:
        return key_id
    raise NotFound(f"key {key_id!r} not found", field="key_id")


def _totals(totals: UsageTotals) -> UsageTotalsOut:
    return UsageTotalsOut(**totals.to_json())


def usage_out(key_id: str, report: UsageReport) -> UsageOut:
    """Return the answer of `GET /keys/{key_id}/usage` for a report."""
    return UsageOut(
        key_id=key_id,
        month=report.since.strftime("%Y-%m"),
        since=report.since,
        until=report.until,
        currency=report.currency,
        total=_totals(report.total),
        assistants=[
            AssistantUsageOut(assistant_id=assistant_id, **totals.to_json())
            for assistant_id, totals in report.assistants
        ],
        quotas=[QuotaOut.model_validate(quota) for quota in report.quotas()],
        spend=SpendOut(
            cap=report.limits.monthly_spend,
            spent=round(report.total.known_cost, 9),
            complete=report.spend_complete,
        ),
    )


@router.get(
    "/keys/{key_id}/usage",
    response_model=UsageOut,
    summary="A key's usage this month",
    dependencies=[READ],
)
async def key_usage(key_id: KeyId, usage: UsageDep, caller: CallerDep, keys: KeysDep) -> UsageOut:
    """Return the key's runs, tokens and cost this month, per assistant, and its quotas.

    A key reads its own (`me`); an admin any managed key's (404 for an unknown one).
    """
    admin = caller.role == "admin"
    owner = usage_owner(key_id, caller.owner, admin=admin)
    if owner != caller.owner:
        await keys.get(owner)  # NotFound: no such key
    report = await usage.month(owner)
    return usage_out(key_id, report)
