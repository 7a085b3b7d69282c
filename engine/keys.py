"""Managed API keys: a role, an optional expiry, quotas and a webhook secret per key.

A key's secret (`atl_` and 43 base62 characters, about 256 bits) is shown once, when
the key is made; the database keeps its SHA-256 digest (a secret this random needs no
slow hash) and its first characters for display. A key's id is its owner id, the id
its threads, runs, crons and Store items are recorded under: `key_` and 24 hex
characters of an HMAC of the secret (`owner_id_for`), the scheme `AUTH_API_KEYS`
keys have always had, so a key's things and its record name the same id.

A key is **active** until it is revoked or its expiry passes; then it authenticates
nothing, its crons stop firing (paused when revoked, and skipped at fire time in any
case) and its pending webhook deliveries are cancelled. Its data stays. Each key has a
webhook signing secret (`whsec_…`, kept in the clear: deliveries are signed with it);
rotating it keeps the previous one valid for an overlap window.

`quotas` holds a key's overrides of the deployment's limits (`QUOTA_NAMES`): a number
≥ 0, or None for unlimited; a name left out takes the settings' default.

The rules the HTTP API follows (roles, bootstrap keys, open mode): docs/keys.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol, get_args

from engine.audit import AuditEntry
from engine.crons import parse_time
from engine.quotas import MAX_COUNT, QUOTA_NAMES
from engine.quotas import check_quotas as check_limits

#: What a key may do: everything (keys, quotas, shared knowledge, the audit log, any
#: key's crons), its own world (runs, crons, presets, Store, notes), or read its own.
KeyRole = Literal["admin", "member", "read-only"]
KEY_ROLES: tuple[KeyRole, ...] = get_args(KeyRole)
#: Where a key stands.
KeyState = Literal["active", "revoked", "expired"]

#: The limits a key may override, each a number ≥ 0 or None (unlimited).
#: Quotas counted in whole units (the rest, `monthly_spend`, may have a fraction).
WHOLE_QUOTAS = frozenset(QUOTA_NAMES) - {"monthly_spend"}
#: Largest quota value accepted (a bigger limit is no limit: use null); the engine's bound.
MAX_QUOTA = MAX_COUNT

#: Owner id of every caller when the service runs open (no `AUTH_API_KEYS`).
ANONYMOUS = "anonymous"
SECRET_PREFIX = "atl_"
WEBHOOK_SECRET_PREFIX = "whsec_"
#: Characters of a secret shown to identify it (`atl_` and 8 more).
DISPLAY_CHARS = 12
#: The pattern of a key id (an owner id of a key).
KEY_ID_PATTERN = r"^key_[0-9a-f]{24}$"

_OWNER_ID_SALT = b"atelier.owner-id.v1"
_BASE62 = string.ascii_letters + string.digits
_SECRET_CHARS = 43  # 43 × log2(62) ≈ 256 bits


def owner_id_for(key: str) -> str:
    """Return the stable, non-reversible owner id of an API key's secret."""
    digest = hmac.new(_OWNER_ID_SALT, key.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"key_{digest[:24]}"


def is_key_secret(text: str) -> bool:
    """Return whether a presented credential has the shape of a managed key's secret."""
    return (
        len(text) == len(SECRET_PREFIX) + _SECRET_CHARS
        and text.startswith(SECRET_PREFIX)
        and all(ch in _BASE62 for ch in text[len(SECRET_PREFIX) :])
    )


def secret_digest(secret: str) -> str:
    """Return the hex SHA-256 digest a key's secret is stored and looked up by."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret(prefix: str = SECRET_PREFIX) -> str:
    """Return a new random secret: `prefix` and 43 base62 characters."""
    return prefix + "".join(secrets.choice(_BASE62) for _ in range(_SECRET_CHARS))


def check_quotas(quotas: Mapping[str, Any]) -> dict[str, int | float | None]:
    """Return quota overrides once each is a known name with a number ≥ 0 or None.

    The rules are the engine's (`engine.quotas.check_quotas`), so a key never holds
    an override its limits would refuse; a counted quota written as a whole float
    (`3.0`, as some JSON encoders send it) is taken as that integer.

    Raises:
        ValueError: An unknown name, or a value that is not a finite number in
            0..MAX_QUOTA (whole for every quota but `monthly_spend`).
    """
    whole = {
        name: int(value)
        if name in WHOLE_QUOTAS and isinstance(value, float) and value.is_integer()
        else value
        for name, value in quotas.items()
    }
    return check_limits(whole, label="quotas.")  # named as the key's field


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A managed key as stored, without its secret (only its digest is kept)."""

    #: The key's id: its owner id, which everything it makes is recorded under.
    key_id: str
    name: str
    role: KeyRole
    #: The secret's first characters, to tell keys apart (`atl_AbCdEfGh`).
    prefix: str
    created_at: str
    updated_at: str
    #: Quota overrides (`QUOTA_NAMES`); a name left out takes the default.
    quotas: dict[str, int | float | None] = field(default_factory=dict)
    #: After this time (ISO 8601, UTC) the key authenticates nothing; None: never.
    expires_at: str | None = None
    #: When the key last authenticated a request (updated at most once a minute).
    last_used_at: str | None = None
    revoked_at: str | None = None
    #: The key id (or "cli") that made it.
    created_by: str | None = None
    #: Signs the key's webhook deliveries (`whsec_…`); never shown after creation.
    webhook_secret: str = ""
    #: The secret before the last rotation, valid until `previous_secret_until`.
    previous_webhook_secret: str | None = None
    previous_secret_until: str | None = None

    def state(self, now: datetime) -> KeyState:
        """Return whether the key is active, revoked or expired at `now`."""
        if self.revoked_at is not None:
            return "revoked"
        expires = parse_time(self.expires_at)
        if expires is not None and expires <= now:
            return "expired"
        return "active"

    def signing_secrets(self, now: datetime) -> list[str]:
        """Return the webhook secrets valid at `now`, the current one first."""
        found = [self.webhook_secret] if self.webhook_secret else []
        until = parse_time(self.previous_secret_until)
        if self.previous_webhook_secret and until is not None and now < until:
            found.append(self.previous_webhook_secret)
        return found

    def public(self) -> KeyRecord:
        """Return the record without its webhook secrets (what reads answer)."""
        return replace(self, webhook_secret="", previous_webhook_secret=None)


@dataclass(frozen=True, slots=True)
class Revocation:
    """What revoking a key stopped, in the revocation's transaction."""

    record: KeyRecord
    crons_paused: int
    deliveries_cancelled: int


class KeyRepository(Protocol):
    """Managed keys in one backend (`engine.sqlite.keys`, `engine.postgres.keys`).

    Every write takes the audit entries that describe it and appends them in the
    same transaction: a change and its record commit together or not at all.
    """

    async def insert(self, record: KeyRecord, digest: str, audit: AuditEntry) -> None:
        """Store a new key under its secret's digest."""
        ...

    async def get(self, key_id: str) -> KeyRecord | None:
        """Return a key by id, or None."""
        ...

    async def by_digest(self, digest: str) -> KeyRecord | None:
        """Return the key whose secret has this digest, or None."""
        ...

    async def search(
        self, *, include_revoked: bool = True, limit: int = 100, offset: int = 0
    ) -> list[KeyRecord]:
        """Return keys, newest first."""
        ...

    async def count(self, *, include_revoked: bool = True) -> int:
        """Return how many keys there are."""
        ...

    async def update(
        self, key_id: str, changes: dict[str, Any], stamp: str, audit: list[AuditEntry]
    ) -> KeyRecord | None:
        """Change a key that is not revoked (`name`, `role`, `expires_at`, `quotas`).

        Returns:
            The key as changed, or None when there is no such key or it is revoked.
        """
        ...

    async def revoke(self, key_id: str, stamp: str, audit: AuditEntry) -> Revocation | None:
        """Revoke a key, pause its crons and cancel its pending deliveries, at once.

        Returns:
            What it stopped, or None when there is no such key or it is revoked already.
        """
        ...

    async def rotate_webhook_secret(
        self, key_id: str, secret: str, previous_until: str, stamp: str, audit: AuditEntry
    ) -> KeyRecord | None:
        """Make `secret` the key's webhook secret; the current one stays valid until then.

        Returns:
            The key, or None when there is no such key or it is revoked.
        """
        ...

    async def touch(self, key_id: str, stamp: str, unless_after: str) -> None:
        """Set the key's `last_used_at` to `stamp`, unless it is already after `unless_after`."""
        ...

    async def pause_crons(self, owner: str) -> int:
        """Disable every enabled cron of an owner (a key that may no longer run); how many."""
        ...


class OwnerCheck(Protocol):
    """Whether the things an owner id made may still act (its crons fire)."""

    async def active(self, owner: str) -> bool:
        """Return whether `owner` can still authenticate (an active key, or open mode's)."""
        ...


class SigningSecrets(Protocol):
    """The webhook signing secrets of an owner's key, for the deliverer.

    `signing_secrets` answers the current secret first, then the previous one while the
    rotation's overlap lasts; an empty list means the owner has no managed key (an
    `AUTH_API_KEYS` key, open mode): sign with WEBHOOK_SECRET. `delivers_for` is False
    for a revoked or expired key: its deliveries are cancelled, not sent.
    """

    async def signing_secrets(self, owner: str) -> list[str]:
        """Return the owner's key's valid webhook secrets, the current one first."""
        ...

    async def delivers_for(self, owner: str) -> bool:
        """Return whether deliveries of `owner`'s runs may still be sent."""
        ...


__all__ = [
    "ANONYMOUS",
    "DISPLAY_CHARS",
    "KEY_ID_PATTERN",
    "KEY_ROLES",
    "MAX_QUOTA",
    "QUOTA_NAMES",
    "SECRET_PREFIX",
    "WEBHOOK_SECRET_PREFIX",
    "KeyRecord",
    "KeyRepository",
    "KeyRole",
    "KeyState",
    "OwnerCheck",
    "Revocation",
    "SigningSecrets",
    "check_quotas",
    "is_key_secret",
    "new_secret",
    "owner_id_for",
    "secret_digest",
]
