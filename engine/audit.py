"""The audit trail: an append-only log of who did what to keys, quotas and shared things.

Each entry names its actor (the key id that acted, `cli` for the command line,
`anonymous` in open mode) and that key's role, an action (`AUDIT_ACTIONS`), the key
whose thing was acted on (`subject`), the id of the thing (`target`) and a few details
(which fields changed, a quota's old and new values). Never a secret.

Both backends refuse to change or delete an entry (a trigger), so the log is only
ever appended to. Entries are read newest first, by key, action and time
(`AuditRepository.search`); `GET /audit` serves them to admins (docs/keys.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

#: What an entry records.
AuditAction = Literal[
    "key.create",
    "key.update",
    "key.quotas",
    "key.revoke",
    "key.rotate_webhook_secret",
    "note.create",
    "note.update",
    "note.archive",
    "assistant.create",
    "assistant.update",
    "assistant.delete",
    "assistant.set_latest",
    "thread.delete",
    "cron.delete",
]
AUDIT_ACTIONS: tuple[AuditAction, ...] = get_args(AuditAction)
#: The actor of what the command line does (`atelier keys …`).
CLI_ACTOR = "cli"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who does something the audit trail records: a key id and its role."""

    #: The key id that acts (`cli` for the command line, `anonymous` in open mode).
    key_id: str
    #: Its role (None: the command line, which the database's owner runs).
    role: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One thing done, as it is appended."""

    at: str
    #: The key id that acted (`cli`, `anonymous`).
    actor: str
    action: AuditAction
    #: The acting key's role (None: the command line).
    actor_role: str | None = None
    #: The key whose thing was acted on (its key id), when it is a key's.
    subject: str | None = None
    #: The id of what was acted on (a key, note, assistant, thread, cron).
    target: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """An entry as stored: the entry and its place in the log."""

    #: Its position in the log (increasing; a page's cursor).
    entry_id: int
    entry: AuditEntry


class AuditRepository(Protocol):
    """The audit log of one backend (`engine.sqlite.keys`, `engine.postgres.keys`)."""

    async def append(self, entry: AuditEntry) -> None:
        """Append one entry."""
        ...

    async def search(
        self,
        *,
        key_id: str | None = None,
        action: str | None = None,
        since: str | None = None,
        until: str | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> list[AuditRecord]:
        """Return entries newest first, matching every filter given.

        Args:
            key_id: Entries whose actor or subject is this key.
            action: Entries of this action.
            since: At or after this time (ISO 8601).
            until: Before this time (ISO 8601).
            before: Entries with a smaller `entry_id` (the next page's cursor).
            limit: At most this many.
        """
        ...


#: The command line's actor.
CLI = Actor(CLI_ACTOR)

__all__ = [
    "AUDIT_ACTIONS",
    "CLI",
    "CLI_ACTOR",
    "Actor",
    "AuditAction",
    "AuditEntry",
    "AuditRecord",
    "AuditRepository",
]
