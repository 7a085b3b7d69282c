"""The audit trail over HTTP: who did what to keys, quotas, shared knowledge, presets and
deletions (docs/keys.md).

    GET /audit      entries newest first; filter by key, action and time; paged by
                    `before` (the `next_before` of the previous page)

Admins only. The log is append-only in both backends (`engine.audit`); an entry
names its actor (a key id, `cli`, `anonymous`), the actor's role, the action, the key
whose thing it was and the thing's id, with a few details — never a secret.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import AfterValidator, BaseModel, Field

from app.access import ADMIN
from app.deps import AuditDep
from app.schemas import DIGITS_ONLY
from engine import AuditAction

router = APIRouter(tags=["audit"])

MAX_LIMIT = 200
#: A key id (a managed key's, an AUTH_API_KEYS key's), `anonymous` or `cli`.
ACTOR_PATTERN = r"^(key_[0-9a-f]{24}|anonymous|cli)$"


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        return aware.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time is outside the years 1-9999 in UTC") from None


Moment = Annotated[datetime | None, AfterValidator(_utc)]


class AuditEntryOut(BaseModel):
    """One thing done."""

    entry_id: int = Field(ge=1, description="Its place in the log (increasing).")
    at: str = Field(description="When (ISO 8601, UTC).")
    actor: str = Field(
        description="Who did it: a key id, `cli` (the command line) or `anonymous` (open mode).",
        examples=["key_0123456789abcdef01234567"],
    )
    actor_role: str | None = Field(description="The actor's role then (null: the command line).")
    action: AuditAction
    subject: str | None = Field(description="The key whose thing it was (its key id).")
    target: str | None = Field(description="The id of what was acted on.")
    details: dict[str, Any] = Field(
        description="What changed: fields, a quota's before and after; never a secret."
    )


class AuditPage(BaseModel):
    """A page of the log, newest first."""

    items: list[AuditEntryOut]
    next_before: int | None = Field(
        description="Pass as `before` for the next (older) page; null: this is the last."
    )


@router.get(
    "/audit", response_model=AuditPage, summary="Read the audit trail", dependencies=[ADMIN]
)
async def read_audit(
    audit: AuditDep,
    key_id: Annotated[
        str | None,
        Query(pattern=ACTOR_PATTERN, description="Entries this key did, or done to its things."),
    ] = None,
    action: Annotated[AuditAction | None, Query(description="Entries of this action.")] = None,
    since: Annotated[Moment, Query(description="At or after this time (ISO 8601).")] = None,
    until: Annotated[Moment, Query(description="Before this time (ISO 8601).")] = None,
    before: Annotated[
        int | None,
        Field(ge=1, le=2**62),
        DIGITS_ONLY,
        Query(description="Entries older than this entry_id (the previous page's next_before)."),
    ] = None,
    limit: Annotated[
        int, Field(ge=1, le=MAX_LIMIT), DIGITS_ONLY, Query(description="Page size.")
    ] = 50,
) -> dict[str, Any]:
    """Return audit entries newest first, matching every filter given."""
    found = await audit.search(
        key_id=key_id, action=action, since=since, until=until, before=before, limit=limit
    )
    items = [{"entry_id": record.entry_id, **_entry(record.entry)} for record in found]
    last = found[-1].entry_id if len(found) == limit else None
    return {"items": items, "next_before": last}


def _entry(entry: Any) -> dict[str, Any]:
    return {
        "at": entry.at,
        "actor": entry.actor,
        "actor_role": entry.actor_role,
        "action": entry.action,
        "subject": entry.subject,
        "target": entry.target,
        "details": entry.details,
    }
