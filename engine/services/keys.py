"""The keys service: managed API keys, who may act, and the audit trail.

`KeysService` makes, reads, changes and revokes managed keys (`engine.keys`), each
change recorded in the audit trail in its own transaction; it authenticates a
presented secret, says whether an owner id may still act (the crons' check at fire
time, `engine.keys.OwnerCheck`) and gives the deliverer an owner's webhook secrets
(`engine.keys.SigningSecrets`). `AuditService` appends the other resources' entries
and reads the log.

Revocation is seen everywhere within `CACHE_SECONDS`: a key is looked up by its
secret's digest at most that long ago, on any replica (the database is the only
truth; this process forgets a key it changed at once). See docs/keys.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import SecretStr

from engine.audit import Actor, AuditAction, AuditEntry, AuditRecord, AuditRepository
from engine.crons import iso, parse_time, utc_now
from engine.errors import Conflict, Invalid, NotFound
from engine.keys import (
    ANONYMOUS,
    DISPLAY_CHARS,
    KEY_ROLES,
    WEBHOOK_SECRET_PREFIX,
    KeyRecord,
    KeyRepository,
    Revocation,
    check_quotas,
    new_secret,
    owner_id_for,
    secret_digest,
)

log = logging.getLogger(__name__)

#: Seconds a key looked up by its secret (or id) is trusted before it is read again.
CACHE_SECONDS = 1.0
#: Most lookups kept (presented secrets that match no key included).
CACHE_ENTRIES = 4096
#: Seconds between two writes of a key's `last_used_at`.
TOUCH_SECONDS = 60.0
#: Longest key name.
MAX_NAME_CHARS = 100
#: Longest time to the webhook secret overlap (a year).
MAX_OVERLAP_HOURS = 24 * 366


@dataclass(frozen=True, slots=True)
class CreatedKey:
    """A key just made: its record and the secrets shown this once."""

    record: KeyRecord
    #: The API key itself (`atl_…`).
    secret: str
    #: The key's webhook signing secret (`whsec_…`).
    webhook_secret: str


class _TtlCache:
    """A small map whose entries are forgotten `ttl` seconds after they were set."""

    def __init__(self, ttl: float, size: int) -> None:
        self.ttl = ttl
        self.size = size
        self._items: dict[str, tuple[float, KeyRecord | None]] = {}

    def get(self, key: str) -> tuple[bool, KeyRecord | None]:
        found = self._items.get(key)
        if found is None or found[0] < time.monotonic():
            self._items.pop(key, None)
            return False, None
        return True, found[1]

    def put(self, key: str, value: KeyRecord | None) -> None:
        if len(self._items) >= self.size:
            self._items.pop(next(iter(self._items)))  # the oldest set
        self._items[key] = (time.monotonic() + self.ttl, value)

    def forget(self, key_id: str) -> None:
        stale = [
            k for k, (_, v) in self._items.items() if k == key_id or (v and v.key_id == key_id)
        ]
        for key in stale:
            del self._items[key]


def _check_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= MAX_NAME_CHARS or not name.isprintable():
        raise Invalid(
            f"name must be 1-{MAX_NAME_CHARS} printable characters, not blank", field="name"
        )
    return name


def _check_role(role: str) -> str:
    if role not in KEY_ROLES:
        raise Invalid(f"role must be one of {', '.join(KEY_ROLES)}", field="role")
    return role


def _check_quotas(quotas: Any) -> dict[str, int | float | None]:
    if not isinstance(quotas, dict):
        raise Invalid("quotas must be an object of quota names and numbers", field="quotas")
    try:
        return check_quotas(quotas)
    except ValueError as exc:
        raise Invalid(str(exc), field="quotas") from None


class KeysService:
    """Managed keys, their authentication, and the owners that may still act."""

    def __init__(
        self,
        keys: KeyRepository,
        audit: AuditRepository,
        *,
        bootstrap: Iterable[SecretStr | str] = (),
        overlap_hours: float = 24.0,
        clock: Callable[[], datetime] = utc_now,
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        """Serve keys from `keys`, recording changes in `audit`.

        Args:
            keys: The backend's keys.
            audit: The backend's audit log.
            bootstrap: AUTH_API_KEYS (admin keys from the settings; none: open mode).
            overlap_hours: WEBHOOK_SECRET_OVERLAP_HOURS: how long a rotated webhook
                secret still signs.
            clock: The current time (tests move it on).
            cache_seconds: How long a lookup is trusted (`CACHE_SECONDS`).
        """
        self._keys = keys
        self._audit = audit
        plain = [k.get_secret_value() if isinstance(k, SecretStr) else k for k in bootstrap]
        #: The owner ids of the AUTH_API_KEYS keys.
        self.bootstrap_owners = frozenset(owner_id_for(key) for key in plain)
        self.overlap = timedelta(hours=min(max(overlap_hours, 0.0), MAX_OVERLAP_HOURS))
        self.clock = clock
        self._by_digest = _TtlCache(cache_seconds, CACHE_ENTRIES)
        self._by_id = _TtlCache(cache_seconds, CACHE_ENTRIES)
        self._touched: dict[str, float] = {}

    @property
    def keyed(self) -> bool:
        """Whether the service is keyed (AUTH_API_KEYS set); else it runs open."""
        return bool(self.bootstrap_owners)

    def _now(self) -> tuple[datetime, str]:
        moment = self.clock()
        return moment, iso(moment) or ""

    # -- the keys ----------------------------------------------------------------------

    async def create(
        self,
        *,
        name: str,
        role: str,
        actor: Actor,
        expires_at: datetime | None = None,
        quotas: dict[str, Any] | None = None,
    ) -> CreatedKey:
        """Make a key; return it with its secrets (shown this once).

        Raises:
            Invalid: A blank or over-long name, an unknown role, a past expiry, or
                quotas that are not quota names with numbers ≥ 0 or null.
        """
        now, stamp = self._now()
        name, role = _check_name(name), _check_role(role)
        checked = _check_quotas(quotas or {})
        if expires_at is not None and expires_at <= now:
            raise Invalid("expires_at must be in the future", field="expires_at")
        secret = new_secret()
        webhook_secret = new_secret(WEBHOOK_SECRET_PREFIX)
        record = KeyRecord(
            key_id=owner_id_for(secret),
            name=name,
            role=role,  # type: ignore[arg-type]  # checked above
            prefix=secret[:DISPLAY_CHARS],
            quotas=checked,
            created_at=stamp,
            updated_at=stamp,
            expires_at=iso(expires_at),
            created_by=actor.key_id,
            webhook_secret=webhook_secret,
        )
        entry = self._entry(
            actor, "key.create", record.key_id, stamp, name=name, role=role, quotas=checked
        )
        if record.expires_at is not None:
            entry.details["expires_at"] = record.expires_at
        await self._keys.insert(record, secret_digest(secret), entry)
        log.info("API key %s (%s, %s) created by %s", record.key_id, name, role, actor.key_id)
        return CreatedKey(record.public(), secret, webhook_secret)

    async def get(self, key_id: str) -> KeyRecord:
        """Return a key without its secrets.

        Raises:
            NotFound: There is no such key.
        """
        return (await self._stored(key_id)).public()

    async def _stored(self, key_id: str) -> KeyRecord:
        record = await self._keys.get(key_id)
        if record is None:
            raise NotFound(f"API key {key_id!r} not found")
        return record

    async def search(
        self, *, include_revoked: bool = True, limit: int = 100, offset: int = 0
    ) -> list[KeyRecord]:
        """Return keys without their secrets, newest first."""
        found = await self._keys.search(include_revoked=include_revoked, limit=limit, offset=offset)
        return [record.public() for record in found]

    async def count(self, *, include_revoked: bool = True) -> int:
        """Return how many keys there are."""
        return await self._keys.count(include_revoked=include_revoked)

    async def update(self, key_id: str, changes: dict[str, Any], *, actor: Actor) -> KeyRecord:
        """Change a key's `name`, `role`, `expires_at` (a datetime or None) or `quotas`.

        `quotas` replaces the key's overrides as a whole (`{}`: every default). A
        quota change is its own audit entry (`key.quotas`), with the old and new values.

        Raises:
            NotFound: There is no such key.
            Conflict: The key is revoked.
            Invalid: As `create` raises it.
        """
        now, stamp = self._now()
        current = await self._stored(key_id)
        if current.revoked_at is not None:
            raise Conflict(f"API key {key_id!r} is revoked; it can no longer be changed")
        checked: dict[str, Any] = {}
        if "name" in changes:
            checked["name"] = _check_name(changes["name"])
        if "role" in changes:
            checked["role"] = _check_role(changes["role"])
        if "expires_at" in changes:
            expires = changes["expires_at"]
            if expires is not None and expires <= now:
                raise Invalid("expires_at must be in the future", field="expires_at")
            checked["expires_at"] = iso(expires)
        if "quotas" in changes:
            checked["quotas"] = _check_quotas(changes["quotas"])
        entries: list[AuditEntry] = []
        fields = {
            name: {"from": getattr(current, name), "to": value}
            for name, value in checked.items()
            if name != "quotas" and getattr(current, name) != value
        }
        if fields:
            entries.append(self._entry(actor, "key.update", key_id, stamp, changes=fields))
        if "quotas" in checked and checked["quotas"] != current.quotas:
            entries.append(
                self._entry(
                    actor,
                    "key.quotas",
                    key_id,
                    stamp,
                    before=current.quotas,
                    after=checked["quotas"],
                )
            )
        updated = await self._keys.update(key_id, checked, stamp, entries)
        if updated is None:
            raise Conflict(f"API key {key_id!r} is revoked; it can no longer be changed")
        self._forget(key_id)
        return updated.public()

    async def revoke(self, key_id: str, *, actor: Actor) -> Revocation:
        """Revoke a key: it authenticates nothing from now on, its crons pause and its
        pending webhook deliveries are cancelled; its runs in flight finish; its data stays.

        Raises:
            NotFound: There is no such key.
            Conflict: It is revoked already.
        """
        _, stamp = self._now()
        await self._stored(key_id)
        entry = self._entry(actor, "key.revoke", key_id, stamp)
        revoked = await self._keys.revoke(key_id, stamp, entry)
        if revoked is None:
            raise Conflict(f"API key {key_id!r} is revoked already")
        self._forget(key_id)
        log.info(
            "API key %s revoked by %s: %d cron(s) paused, %d delivery(ies) cancelled",
            key_id,
            actor.key_id,
            revoked.crons_paused,
            revoked.deliveries_cancelled,
        )
        return replace(revoked, record=revoked.record.public())

    async def rotate_webhook_secret(self, key_id: str, *, actor: Actor) -> tuple[KeyRecord, str]:
        """Give a key a new webhook secret; return the key and the secret (shown this once).

        The secret it had keeps signing too for the overlap (WEBHOOK_SECRET_OVERLAP_HOURS).

        Raises:
            NotFound: There is no such key.
            Conflict: It is revoked.
        """
        now, stamp = self._now()
        current = await self._stored(key_id)
        if current.revoked_at is not None:
            raise Conflict(f"API key {key_id!r} is revoked; it can no longer be changed")
        secret = new_secret(WEBHOOK_SECRET_PREFIX)
        until = iso(now + self.overlap) or stamp
        entry = self._entry(actor, "key.rotate_webhook_secret", key_id, stamp, previous_until=until)
        rotated = await self._keys.rotate_webhook_secret(key_id, secret, until, stamp, entry)
        if rotated is None:
            raise Conflict(f"API key {key_id!r} is revoked; it can no longer be changed")
        self._forget(key_id)
        return rotated.public(), secret

    def _entry(
        self, actor: Actor, action: AuditAction, key_id: str, stamp: str, **details: Any
    ) -> AuditEntry:
        return AuditEntry(
            at=stamp,
            actor=actor.key_id,
            actor_role=actor.role,
            action=action,
            subject=key_id,
            target=key_id,
            details=details,
        )

    def _forget(self, key_id: str) -> None:
        """Drop what this process remembers of a key it changed (other replicas: the TTL)."""
        self._by_digest.forget(key_id)
        self._by_id.forget(key_id)

    # -- who may act -------------------------------------------------------------------

    async def authenticate(self, secret: str) -> KeyRecord | None:
        """Return the managed key a presented secret is, whatever its state; None: none is.

        The caller checks `KeyRecord.state`. An active key's `last_used_at` is written
        at most once a minute.
        """
        digest = secret_digest(secret)
        known, record = self._by_digest.get(digest)
        if not known:
            record = await self._keys.by_digest(digest)
            self._by_digest.put(digest, record)
        if record is not None:
            await self._touch(record)
        return record

    async def _touch(self, record: KeyRecord) -> None:
        now, stamp = self._now()
        last = parse_time(record.last_used_at)
        if last is not None and now - last < timedelta(seconds=TOUCH_SECONDS):
            return
        if time.monotonic() - self._touched.get(record.key_id, -TOUCH_SECONDS) < TOUCH_SECONDS:
            return
        self._touched[record.key_id] = time.monotonic()
        if len(self._touched) > CACHE_ENTRIES:
            self._touched.clear()
        cutoff = iso(now - timedelta(seconds=TOUCH_SECONDS)) or stamp
        try:
            await self._keys.touch(record.key_id, stamp, cutoff)
        except Exception:  # a request is not refused for a timestamp it could not write
            log.warning("could not record when API key %s was last used", record.key_id)

    async def record_of(self, owner: str) -> KeyRecord | None:
        """Return the managed key whose id is `owner` (cached as `authenticate` is), or None."""
        known, record = self._by_id.get(owner)
        if not known:
            record = await self._keys.get(owner)
            self._by_id.put(owner, record)
        return record

    async def quotas_of(self, owner: str) -> Mapping[str, Any]:
        """Return the quota overrides of the managed key whose id is `owner` (else none)."""
        record = await self.record_of(owner)
        return record.quotas if record is not None else {}

    async def active(self, owner: str) -> bool:
        """Return whether things `owner` made may still act (its crons fire).

        Keyed, only an AUTH_API_KEYS key or an active managed key may; open, any owner
        but a revoked or expired managed key (open mode authenticates nobody).
        """
        if owner in self.bootstrap_owners:
            return True
        if self.keyed and owner == ANONYMOUS:
            return False
        record = await self.record_of(owner)
        if record is None:
            return not self.keyed
        return record.state(self.clock()) == "active"

    async def signing_secrets(self, owner: str) -> list[str]:
        """Return the owner's key's valid webhook secrets, the current one first.

        Empty when `owner` has no managed key: sign with WEBHOOK_SECRET.
        """
        record = await self.record_of(owner)
        return [] if record is None else record.signing_secrets(self.clock())

    async def for_owner(self, owner: str) -> list[str]:
        """`engine.WebhookSecrets`: the secrets the deliverer signs `owner`'s deliveries with."""
        return await self.signing_secrets(owner)

    async def delivers_for(self, owner: str) -> bool:
        """Return whether deliveries of `owner`'s runs may still be sent."""
        return await self.active(owner)


class AuditService:
    """The audit trail: what routes record, and what admins read."""

    def __init__(self, audit: AuditRepository, *, clock: Callable[[], datetime] = utc_now) -> None:
        """Append to and read `audit`."""
        self._audit = audit
        self.clock = clock

    async def record(
        self,
        actor: Actor,
        action: AuditAction,
        *,
        subject: str | None = None,
        target: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Append an entry: `actor` did `action` to `target` (a thing of key `subject`)."""
        await self._audit.append(
            AuditEntry(
                at=iso(self.clock()) or "",
                actor=actor.key_id,
                actor_role=actor.role,
                action=action,
                subject=subject,
                target=target,
                details=details or {},
            )
        )

    async def search(
        self,
        *,
        key_id: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> list[AuditRecord]:
        """Return entries newest first, matching every filter given (see the repository)."""
        return await self._audit.search(
            key_id=key_id,
            action=action,
            since=iso(since),
            until=iso(until),
            before=before,
            limit=limit,
        )


__all__ = ["CACHE_SECONDS", "AuditService", "CreatedKey", "KeysService"]
