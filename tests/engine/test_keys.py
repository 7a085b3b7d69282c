"""Managed keys and the audit trail in the engine, over each backend (SQLite, PostgreSQL).

The keys service on each backend's repositories: a key is stored hashed and found by
its secret, changed with its audit entries, revoked with its crons paused and its
pending deliveries cancelled in one transaction; the webhook secret rotates with an
overlap; the audit log refuses to be changed; a cron whose key may no longer run is
disabled at fire time instead of fired.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.audit import CLI, Actor, AuditEntry
from engine.crons import CronRecord, iso, parse_time
from engine.errors import Conflict, Invalid, NotFound
from engine.keys import KEY_ID_PATTERN, check_quotas, owner_id_for, secret_digest
from engine.records import WebhookQueued
from engine.services.keys import AuditService, KeysService
from tests.engine.conftest import Opened

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADMIN = Actor("key_" + "a" * 24, "admin")


class Clock:
    """A clock tests move on."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def repositories(opened: Opened) -> tuple[Any, Any, Any]:
    """Return the keys, the audit log and the crons on the storage's database."""
    if opened.where.startswith("postgresql://"):
        from engine.postgres.crons import PostgresCronRepository
        from engine.postgres.keys import PostgresAuditRepository, PostgresKeyRepository

        pool = opened.storage.pool
        return (
            PostgresKeyRepository(pool),
            PostgresAuditRepository(pool),
            PostgresCronRepository(pool),
        )
    from engine.sqlite.crons import SqliteCronRepository
    from engine.sqlite.keys import SqliteAuditRepository, SqliteKeyRepository

    database = opened.storage.database
    return (
        SqliteKeyRepository(database),
        SqliteAuditRepository(database),
        SqliteCronRepository(database),
    )


def service(opened: Opened, clock: Clock, **options: Any) -> KeysService:
    keys, audit, _ = repositories(opened)
    return KeysService(keys, audit, clock=clock, cache_seconds=0, **options)


def a_cron(cron_id: str, owner: str) -> CronRecord:
    return CronRecord(
        cron_id=cron_id,
        owner=owner,
        assistant_id="studio",
        thread_id=None,
        schedule="* * * * *",
        timezone=None,
        payload={},
        created_at=iso(T0) or "",
        updated_at=iso(T0) or "",
        next_run_at=iso(T0 + timedelta(minutes=1)),
    )


async def test_a_key_is_stored_hashed_and_found_by_its_secret(opened: Opened) -> None:
    keys = service(opened, Clock())
    made = await keys.create(name="Client A", role="member", actor=ADMIN, quotas={"crons": 5})

    assert made.secret.startswith("atl_") and len(made.secret) == 47
    assert made.webhook_secret.startswith("whsec_")
    record = made.record
    assert record.key_id == owner_id_for(made.secret)
    import re

    assert re.match(KEY_ID_PATTERN, record.key_id)
    assert record.prefix == made.secret[:12] and record.webhook_secret == ""
    assert record.quotas == {"crons": 5} and record.created_by == ADMIN.key_id
    found = await keys.authenticate(made.secret)
    assert found is not None and found.key_id == record.key_id and found.role == "member"
    assert await keys.authenticate(made.secret + "x") is None
    # Neither the secret nor the webhook secret leaves the service in a read.
    listed = await keys.search()
    assert [k.key_id for k in listed] == [record.key_id] and listed[0].webhook_secret == ""
    # The database holds the digest, never the secret.
    where = opened.where
    if where.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(where) as conn:
            rows = conn.execute("SELECT digest, prefix FROM api_keys").fetchall()
    else:
        import sqlite3

        with sqlite3.connect(where) as conn:
            rows = conn.execute("SELECT digest, prefix FROM api_keys").fetchall()
    assert rows == [(secret_digest(made.secret), made.secret[:12])]


async def test_bad_fields_are_refused_naming_the_field(opened: Opened) -> None:
    keys = service(opened, Clock())
    for fields, field in [
        ({"name": "  ", "role": "member"}, "name"),
        ({"name": "x" * 101, "role": "member"}, "name"),
        ({"name": "ok\x00", "role": "member"}, "name"),
        ({"name": "ok", "role": "owner"}, "role"),
        ({"name": "ok", "role": "member", "expires_at": T0}, "expires_at"),
        ({"name": "ok", "role": "member", "quotas": {"crons": -1}}, "quotas"),
        ({"name": "ok", "role": "member", "quotas": {"tokens": 5}}, "quotas"),
        ({"name": "ok", "role": "member", "quotas": {"crons": 1.5}}, "quotas"),
        ({"name": "ok", "role": "member", "quotas": {"crons": True}}, "quotas"),
        ({"name": "ok", "role": "member", "quotas": {"monthly_spend": float("nan")}}, "quotas"),
    ]:
        with pytest.raises(Invalid) as refused:
            await keys.create(actor=ADMIN, **fields)
        assert refused.value.field == field
    assert await keys.count() == 0  # nothing half-written


def test_quotas_are_numbers_or_null_and_whole_where_counted() -> None:
    assert check_quotas({"crons": 3.0, "monthly_spend": 12.5, "assistants": None}) == {
        "crons": 3,
        "monthly_spend": 12.5,
        "assistants": None,
    }
    with pytest.raises(ValueError, match="10"):
        check_quotas({"store_bytes": 10**16})


async def test_an_update_records_fields_and_quotas_and_a_revoked_key_is_frozen(
    opened: Opened,
) -> None:
    clock = Clock()
    keys = service(opened, clock)
    made = await keys.create(name="B", role="member", actor=ADMIN)
    key_id = made.record.key_id
    clock.now += timedelta(seconds=5)
    changed = await keys.update(
        key_id,
        {"name": "B team", "quotas": {"runs_per_minute": 10, "monthly_spend": None}},
        actor=ADMIN,
    )
    assert changed.name == "B team" and changed.quotas == {
        "runs_per_minute": 10,
        "monthly_spend": None,
    }
    with pytest.raises(Invalid):
        await keys.update(key_id, {"expires_at": T0}, actor=ADMIN)
    with pytest.raises(NotFound):
        await keys.update("key_" + "0" * 24, {"name": "x"}, actor=ADMIN)

    await keys.revoke(key_id, actor=ADMIN)
    with pytest.raises(Conflict):
        await keys.update(key_id, {"role": "admin"}, actor=ADMIN)
    with pytest.raises(Conflict):
        await keys.revoke(key_id, actor=ADMIN)
    with pytest.raises(Conflict):
        await keys.rotate_webhook_secret(key_id, actor=ADMIN)

    _, audit, _ = repositories(opened)
    entries = [r.entry for r in await AuditService(audit).search(key_id=key_id)]
    assert [e.action for e in entries] == ["key.revoke", "key.quotas", "key.update", "key.create"]
    assert entries[1].details == {
        "before": {},
        "after": {"runs_per_minute": 10, "monthly_spend": None},
    }
    assert entries[2].details == {"changes": {"name": {"from": "B", "to": "B team"}}}
    assert all(e.actor == ADMIN.key_id and e.actor_role == "admin" for e in entries)
    assert made.secret not in str(entries) and made.webhook_secret not in str(entries)


async def test_revoking_pauses_the_keys_crons_and_cancels_its_pending_deliveries(
    opened: Opened,
) -> None:
    keys = service(opened, Clock())
    _, audit, crons = repositories(opened)
    made = await keys.create(name="B", role="member", actor=CLI)
    other = await keys.create(name="A", role="member", actor=CLI)
    b, a = made.record.key_id, other.record.key_id
    await crons.insert(a_cron("b1", b))
    await crons.insert(a_cron("b2", b))
    await crons.insert(a_cron("a1", a))
    events = opened.storage.events
    for run_id, owner in (("rb", b), ("ra", a)):
        events.record(
            WebhookQueued(
                delivery_id=f"d-{run_id}",
                run_id=run_id,
                thread_id="t",
                owner=owner,
                url="https://hooks.example.com/x",
                body="{}",
            )
        )
    await events.flush()

    revoked = await keys.revoke(b, actor=ADMIN)

    assert (revoked.crons_paused, revoked.deliveries_cancelled) == (2, 1)
    assert revoked.record.revoked_at is not None
    assert [c.enabled for c in await crons.search(b)] == [False, False]
    assert [c.enabled for c in await crons.search(a)] == [True]
    deliveries = opened.storage.deliveries
    assert [d["status"] for d in await deliveries.for_run("rb")] == ["cancelled"]
    assert [d["status"] for d in await deliveries.for_run("ra")] == ["pending"]
    claimed = await deliveries.claim("w", 10, 60)
    assert [d.delivery_id for d in claimed] == ["d-ra"]  # a cancelled one is never sent
    entry = (await AuditService(audit).search(action="key.revoke"))[0].entry
    assert entry.details == {"crons_paused": 2, "deliveries_cancelled": 1}
    assert entry.actor == ADMIN.key_id and entry.subject == b


async def test_revoked_and_expired_keys_may_no_longer_act(opened: Opened) -> None:
    clock = Clock()
    keyed = service(opened, clock, bootstrap=["bootstrap-admin-key-0123456789"])
    made = await keyed.create(
        name="temp", role="member", actor=CLI, expires_at=T0 + timedelta(hours=1)
    )
    key_id = made.record.key_id
    assert await keyed.active(key_id)
    assert await keyed.active(owner_id_for("bootstrap-admin-key-0123456789"))
    assert not await keyed.active("anonymous")  # open-mode things stop once keyed
    assert not await keyed.active(owner_id_for("a key no longer in AUTH_API_KEYS"))
    clock.now += timedelta(hours=2)
    assert not await keyed.active(key_id)
    record = await keyed.authenticate(made.secret)
    assert record is not None and record.state(clock.now) == "expired"

    open_mode = service(opened, clock)
    assert await open_mode.active("anonymous") and await open_mode.active("key_" + "1" * 24)
    assert not await open_mode.active(key_id)  # expired: never again, even open


async def test_the_webhook_secret_rotates_with_an_overlap(opened: Opened) -> None:
    clock = Clock()
    keys = service(opened, clock, overlap_hours=2)
    made = await keys.create(name="hooks", role="member", actor=CLI)
    key_id = made.record.key_id
    assert await keys.signing_secrets(key_id) == [made.webhook_secret]
    assert await keys.signing_secrets("key_" + "2" * 24) == []  # no managed key: WEBHOOK_SECRET

    record, rotated = await keys.rotate_webhook_secret(key_id, actor=ADMIN)
    assert rotated.startswith("whsec_") and rotated != made.webhook_secret
    assert record.webhook_secret == "" and record.previous_webhook_secret is None
    assert await keys.signing_secrets(key_id) == [rotated, made.webhook_secret]
    clock.now += timedelta(hours=2)
    assert await keys.signing_secrets(key_id) == [rotated]
    assert await keys.delivers_for(key_id)
    await keys.revoke(key_id, actor=ADMIN)
    assert not await keys.delivers_for(key_id)


async def test_last_used_is_written_at_most_once_a_minute(opened: Opened) -> None:
    clock = Clock()
    keys = service(opened, clock)
    made = await keys.create(name="busy", role="member", actor=CLI)
    await keys.authenticate(made.secret)
    first = (await keys.get(made.record.key_id)).last_used_at
    assert parse_time(first) == T0
    clock.now += timedelta(seconds=30)
    await keys.authenticate(made.secret)
    assert (await keys.get(made.record.key_id)).last_used_at == first
    clock.now += timedelta(seconds=45)
    fresh = service(opened, clock)  # another replica: the database decides
    await fresh.authenticate(made.secret)
    later = (await keys.get(made.record.key_id)).last_used_at
    assert parse_time(later) == T0 + timedelta(seconds=75)


async def test_a_lookup_is_trusted_for_its_ttl_only(opened: Opened) -> None:
    keys_repo, audit, _ = repositories(opened)
    writer = KeysService(keys_repo, audit, cache_seconds=0)
    reader = KeysService(keys_repo, audit, cache_seconds=0.2)  # another replica
    made = await writer.create(name="r", role="member", actor=CLI)
    assert (await reader.authenticate(made.secret)).revoked_at is None  # type: ignore[union-attr]
    await writer.revoke(made.record.key_id, actor=ADMIN)
    cached = await reader.authenticate(made.secret)
    assert cached is not None and cached.revoked_at is None  # within the TTL
    import asyncio

    await asyncio.sleep(0.25)
    fresh = await reader.authenticate(made.secret)
    assert fresh is not None and fresh.revoked_at is not None


async def test_the_audit_log_is_append_only_and_filtered(opened: Opened) -> None:
    _, audit_repo, _ = repositories(opened)
    clock = Clock()
    audit = AuditService(audit_repo, clock=clock)
    for n in range(5):
        clock.now = T0 + timedelta(minutes=n)
        await audit.record(
            Actor(f"key_{n % 2:024d}", "member"),
            "thread.delete" if n % 2 else "assistant.delete",
            subject=f"key_{n % 2:024d}",
            target=f"t{n}",
        )
    newest = await audit.search(limit=2)
    assert [r.entry.target for r in newest] == ["t4", "t3"]
    older = await audit.search(limit=2, before=newest[-1].entry_id)
    assert [r.entry.target for r in older] == ["t2", "t1"]
    assert [r.entry.target for r in await audit.search(action="thread.delete")] == ["t3", "t1"]
    assert [r.entry.target for r in await audit.search(key_id=f"key_{1:024d}")] == ["t3", "t1"]
    window = await audit.search(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3))
    assert [r.entry.target for r in window] == ["t2", "t1"]

    where = opened.where
    if where.startswith("postgresql://"):
        import psycopg

        for statement in ("UPDATE audit_log SET actor = 'x'", "DELETE FROM audit_log"):
            with psycopg.connect(where) as conn, pytest.raises(psycopg.Error, match="append-only"):
                conn.execute(statement)  # type: ignore[arg-type]
    else:
        import sqlite3

        for statement in ("UPDATE audit_log SET actor = 'x'", "DELETE FROM audit_log"):
            with sqlite3.connect(where) as conn, pytest.raises(sqlite3.Error, match="append-only"):
                conn.execute(statement)
    assert len(await audit.search()) == 5


async def test_a_due_cron_of_a_key_that_may_not_run_is_disabled_not_fired(
    opened: Opened,
) -> None:
    keys = service(opened, Clock())
    _, _, crons = repositories(opened)
    made = await keys.create(name="gone", role="member", actor=CLI)
    await crons.insert(a_cron("c1", made.record.key_id))
    await keys.revoke(made.record.key_id, actor=ADMIN)
    # Enabled again behind the service's back (an older replica), it is still caught at
    # fire time: the tick disables it.
    cron = await crons.get(made.record.key_id, "c1")
    cron.enabled = True
    assert await crons.replace(cron, previous_next_run_at=cron.next_run_at)
    due = iso(T0 + timedelta(minutes=5)) or ""
    async with crons.claim_due(due) as tick:
        assert tick is not None and not await keys.active(tick.cron.owner)
        await tick.disable()
    async with crons.claim_due(due) as tick:
        assert tick is None
    stored = await crons.get(made.record.key_id, "c1")
    assert stored is not None and not stored.enabled and stored.next_run_at == cron.next_run_at


def test_an_audit_entry_never_holds_a_secret_field() -> None:
    fields = set(AuditEntry.__dataclass_fields__)
    assert not {"secret", "key", "webhook_secret", "digest"} & fields
