"""Durable storage of vault notes behind one async interface.

The vault as users see it (notes, namespaces, the HTTP routes): docs/knowledge.md.

`NoteRepository` is what the rest of Atelier depends on; `InMemoryNoteRepository`
serves tests and the embedded default, `SqliteNoteRepository` the durable
store. Both behave identically (one test suite runs against both):

- `list` returns notes in insertion order; an update keeps a note's place.
- `update` bumps `version` and `updated_at`; with `expected_version` it is an
  optimistic-lock write that fails with `VersionConflictError` when someone
  else updated first.
- `archive` is an update to status archived; archived notes stay readable
  through `get`/`list` but `search` never returns them.
- `search` ranks the non-archived notes with `VaultRetriever`. It scans every
  candidate: the vault holds house rules and references (hundreds of notes),
  not a corpus, and scoring needs the segmented query anyway.

Every note lives in a namespace (`KnowledgeNote.namespace`, "shared" by default)
and may belong to the API key that wrote it (`principal`). Reads take two
optional keywords: `namespaces` (only notes in these) and `principal` (only the
notes that key may see: its own and those no key wrote; None: every note, for
the server itself). A note another key wrote is, to a caller, a note that does
not exist: `get` returns None, `update` raises `NoteNotFoundError`.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import sqlite3
from collections.abc import Collection, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

import aiosqlite

from knowledge.notes import KnowledgeNote, NoteStatus, NoteType, utcnow, visible_to
from knowledge.retriever import RetrievalResult, VaultRetriever

MUTABLE_FIELDS = frozenset({"type", "status", "content", "tags", "owner", "namespace"})
MAX_PAGE = 1000
TABLE = "knowledge_notes"


class NoteNotFoundError(LookupError):
    """No note has the given id."""


class DuplicateNoteError(ValueError):
    """A note with the same id already exists."""


class VersionConflictError(RuntimeError):
    """The note changed since the caller read it (optimistic locking)."""

    def __init__(self, note_id: str, expected: int, actual: int) -> None:
        """Record which note conflicted and which versions were seen."""
        super().__init__(f"note {note_id!r} is at version {actual}, not {expected}")
        self.note_id = note_id
        self.expected = expected
        self.actual = actual


@runtime_checkable
class NoteRepository(Protocol):
    """Async store of knowledge notes."""

    async def add(self, note: KnowledgeNote) -> KnowledgeNote:
        """Store a new note; raise `DuplicateNoteError` when its id is taken."""
        ...

    async def add_many(self, notes: Iterable[KnowledgeNote]) -> builtins.list[KnowledgeNote]:
        """Store new notes all at once, or none of them when any id is taken."""
        ...

    async def get(self, note_id: str, *, principal: str | None = None) -> KnowledgeNote | None:
        """Return the note with this id, or None (also when `principal` may not see it)."""
        ...

    async def update(
        self,
        note_id: str,
        *,
        expected_version: int | None = None,
        principal: str | None = None,
        **changes: Any,
    ) -> KnowledgeNote:
        """Change fields of a note (type, status, content, tags, owner, namespace)."""
        ...

    async def archive(
        self, note_id: str, *, expected_version: int | None = None, principal: str | None = None
    ) -> KnowledgeNote:
        """Set a note's status to archived: an update, the same in every repository.

        The repositories subclass this protocol and inherit it.
        """
        return await self.update(
            note_id,
            expected_version=expected_version,
            principal=principal,
            status=NoteStatus.ARCHIVED,
        )

    async def list(
        self,
        type: NoteType | str | None = None,
        status: NoteStatus | str | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> builtins.list[KnowledgeNote]:
        """Return a page of notes in insertion order, optionally filtered."""
        ...

    async def search(
        self,
        query: str,
        limit: int = 6,
        only_approved: bool = False,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> RetrievalResult:
        """Rank the non-archived notes for a query with `VaultRetriever`."""
        ...

    async def count(
        self,
        type: NoteType | str | None = None,
        status: NoteStatus | str | None = None,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> int:
        """Return how many notes match the filters (archived ones included)."""
        ...


def _revise(note: KnowledgeNote, changes: dict[str, Any]) -> KnowledgeNote:
    """Return the next version of a note with changes applied and validated."""
    unknown = set(changes) - MUTABLE_FIELDS
    if unknown:
        raise ValueError(f"cannot change field(s): {', '.join(sorted(unknown))}")
    data = note.model_dump()
    data.update(changes)
    data["principal"] = note.principal  # not serialized, never changed
    data["version"] = note.version + 1
    data["updated_at"] = utcnow()
    return KnowledgeNote.model_validate(data)


def _check_page(limit: int, offset: int) -> None:
    """Reject page arguments out of bounds."""
    if not 0 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 0 and {MAX_PAGE}")
    if offset < 0:
        raise ValueError("offset must be >= 0")


def in_scope(
    note: KnowledgeNote, namespaces: Collection[str] | None, principal: str | None
) -> bool:
    """Return whether a note is in one of `namespaces` and visible to `principal` (None: any)."""
    return (namespaces is None or note.namespace in namespaces) and visible_to(note, principal)


def _search(
    retriever: VaultRetriever,
    query: str,
    candidates: Iterable[KnowledgeNote],
    limit: int,
    only_approved: bool,
) -> RetrievalResult:
    """Rank candidates; shared so both repositories search the same way."""
    if limit < 0:
        raise ValueError("limit must be >= 0")
    return retriever.fetch(query, candidates, max_total=limit, only_approved=only_approved)


class InMemoryNoteRepository(NoteRepository):
    """Notes in a dict; for tests and the embedded default (lost on restart).

    Every method runs to completion without awaiting, so each call is atomic
    for asyncio tasks sharing the repository.
    """

    def __init__(
        self, notes: Iterable[KnowledgeNote] = (), retriever: VaultRetriever | None = None
    ) -> None:
        """Create a repository, optionally seeded with notes (ids must be unique)."""
        self._notes: dict[str, KnowledgeNote] = {}  # insertion order is list order
        self._retriever = retriever or VaultRetriever()
        for note in notes:
            self._insert(note)

    def _insert(self, note: KnowledgeNote) -> None:
        """Store a new note or raise `DuplicateNoteError`."""
        if note.id in self._notes:
            raise DuplicateNoteError(f"note {note.id!r} already exists")
        self._notes[note.id] = note

    async def add(self, note: KnowledgeNote) -> KnowledgeNote:
        """Store a new note; raise `DuplicateNoteError` when its id is taken."""
        self._insert(note)
        return note

    async def add_many(self, notes: Iterable[KnowledgeNote]) -> builtins.list[KnowledgeNote]:
        """Store new notes all at once, or none of them when any id is taken (bulk import)."""
        batch = builtins.list(notes)
        ids = [note.id for note in batch]
        taken = [i for i in ids if i in self._notes] or [i for i in ids if ids.count(i) > 1]
        if taken:
            raise DuplicateNoteError(f"note {taken[0]!r} already exists")
        for note in batch:
            self._insert(note)
        return batch

    async def get(self, note_id: str, *, principal: str | None = None) -> KnowledgeNote | None:
        """Return the note with this id, or None (also when `principal` may not see it)."""
        note = self._notes.get(note_id)
        return note if note is not None and visible_to(note, principal) else None

    async def update(
        self,
        note_id: str,
        *,
        expected_version: int | None = None,
        principal: str | None = None,
        **changes: Any,
    ) -> KnowledgeNote:
        """Change fields of a note and bump its version.

        Raises:
            NoteNotFoundError: No such note (or `principal` may not see it).
            VersionConflictError: `expected_version` is not the stored version.
            ValueError: A field that cannot change (id, version, timestamps) was given.
            pydantic.ValidationError: A new value breaks the note's bounds.
        """
        current = self._notes.get(note_id)
        if current is None or not visible_to(current, principal):
            raise NoteNotFoundError(note_id)
        if expected_version is not None and expected_version != current.version:
            raise VersionConflictError(note_id, expected_version, current.version)
        revised = _revise(current, changes)
        self._notes[note_id] = revised  # reassigning keeps the dict position
        return revised

    async def list(
        self,
        type: NoteType | str | None = None,
        status: NoteStatus | str | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> builtins.list[KnowledgeNote]:
        """Return a page of notes in insertion order, optionally filtered."""
        _check_page(limit, offset)
        matching = self._filtered(type, status, namespaces, principal)
        return matching[offset : offset + limit]

    async def search(
        self,
        query: str,
        limit: int = 6,
        only_approved: bool = False,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> RetrievalResult:
        """Rank the non-archived notes for a query."""
        candidates = [
            n
            for n in self._filtered(None, None, namespaces, principal)
            if n.status is not NoteStatus.ARCHIVED
        ]
        return _search(self._retriever, query, candidates, limit, only_approved)

    async def count(
        self,
        type: NoteType | str | None = None,
        status: NoteStatus | str | None = None,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> int:
        """Return how many notes match the filters."""
        return len(self._filtered(type, status, namespaces, principal))

    def _filtered(
        self,
        type: NoteType | str | None,
        status: NoteStatus | str | None,
        namespaces: Collection[str] | None,
        principal: str | None,
    ) -> builtins.list[KnowledgeNote]:
        """Return the notes matching the filters (None: any), in insertion order."""
        want_type = NoteType(type) if type is not None else None
        want_status = NoteStatus(status) if status is not None else None
        return [
            note
            for note in self._notes.values()
            if (want_type is None or note.type is want_type)
            and (want_status is None or note.status is want_status)
            and in_scope(note, namespaces, principal)
        ]


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order
    id         TEXT NOT NULL UNIQUE,
    type       TEXT NOT NULL,
    status     TEXT NOT NULL,
    content    TEXT NOT NULL,
    tags       TEXT NOT NULL DEFAULT '[]',         -- JSON array of strings
    owner      TEXT NOT NULL,
    namespace  TEXT NOT NULL DEFAULT 'shared',
    principal  TEXT,                               -- the writing key's owner id; NULL: every key's
    version    INTEGER NOT NULL,
    created_at TEXT NOT NULL,                      -- ISO 8601, UTC
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS {TABLE}_status ON {TABLE} (status);
CREATE INDEX IF NOT EXISTS {TABLE}_type ON {TABLE} (type);
"""
# A table made before namespaces gains its two columns: its notes become shared notes
# that every key sees, as they were.
_NAMESPACE_COLUMNS = {
    "namespace": f"ALTER TABLE {TABLE} ADD COLUMN namespace TEXT NOT NULL DEFAULT 'shared'",
    "principal": f"ALTER TABLE {TABLE} ADD COLUMN principal TEXT",
}
_NAMESPACE_INDEX = f"CREATE INDEX IF NOT EXISTS {TABLE}_namespace ON {TABLE} (namespace, principal)"
_COLUMNS = (
    "id, type, status, content, tags, owner, namespace, principal, version, created_at, updated_at"
)
_INSERT = f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


class SqliteNoteRepository(NoteRepository):
    """Notes in a SQLite table (WAL mode), through aiosqlite.

    Nothing connects at construction: call `await repo.open()` (and `close()`),
    or use `async with SqliteNoteRepository(path) as repo:`. The table lives
    happily in the service's shared database file.

    The file has other writers (the run store, the checkpointer), so this
    connection keeps SQLite's rule for waiting its turn: one operation at a time
    (an asyncio lock: no task's read is still in flight when another task's write
    begins) and every write transaction begins `IMMEDIATE`, with the write lock,
    never as a read that upgrades — an upgrade skips the busy timeout and fails
    with "database is locked" at once while another connection writes.
    """

    def __init__(self, path: str | Path, retriever: VaultRetriever | None = None) -> None:
        """Create a repository for the database at path (":memory:" for a private one)."""
        self.path = str(path)
        self._retriever = retriever or VaultRetriever()
        self._conn: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> Self:
        """Connect, switch to WAL and create the table if needed; idempotent."""
        if self._conn is not None:
            return self
        if self.path != ":memory:":  # a blocking call: in a worker thread, off the event loop
            await asyncio.to_thread(Path(self.path).parent.mkdir, parents=True, exist_ok=True)
        # IMMEDIATE: the implicit BEGIN before a write takes the write lock up front.
        conn = await aiosqlite.connect(self.path, isolation_level="IMMEDIATE", timeout=5.0)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA busy_timeout=5000")
            await conn.executescript(_SCHEMA)
            async with conn.execute(f"PRAGMA table_info({TABLE})") as cursor:
                present = {row["name"] for row in await cursor.fetchall()}
            for column, alter in _NAMESPACE_COLUMNS.items():
                if column not in present:
                    await conn.execute(alter)
            await conn.execute(_NAMESPACE_INDEX)
            await conn.commit()
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return self

    async def close(self) -> None:
        """Close the connection; idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def __aenter__(self) -> Self:
        """Open the repository."""
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the repository."""
        await self.close()

    @property
    def _db(self) -> aiosqlite.Connection:
        """Return the open connection, or fail with a hint."""
        if self._conn is None:
            raise RuntimeError("SqliteNoteRepository is not open; call `await repo.open()`")
        return self._conn

    async def add(self, note: KnowledgeNote) -> KnowledgeNote:
        """Store a new note; raise `DuplicateNoteError` when its id is taken."""
        async with self._lock:
            try:
                await self._db.execute(_INSERT, _to_row(note))
            except sqlite3.IntegrityError:
                await self._db.rollback()
                raise DuplicateNoteError(f"note {note.id!r} already exists") from None
            except BaseException:
                await self._db.rollback()
                raise
            await self._db.commit()
            return note

    async def add_many(self, notes: Iterable[KnowledgeNote]) -> builtins.list[KnowledgeNote]:
        """Store new notes in one transaction, or none of them when any id is taken."""
        async with self._lock:
            batch = builtins.list(notes)
            try:
                await self._db.executemany(_INSERT, [_to_row(note) for note in batch])
            except sqlite3.IntegrityError:
                await self._db.rollback()
                raise DuplicateNoteError("a note id of the batch already exists") from None
            except BaseException:
                await self._db.rollback()
                raise
            await self._db.commit()
            return batch

    async def get(self, note_id: str, *, principal: str | None = None) -> KnowledgeNote | None:
        """Return the note with this id, or None (also when `principal` may not see it)."""
        async with self._lock:
            note = await self._get(note_id)
        return note if note is not None and visible_to(note, principal) else None

    async def _get(self, note_id: str) -> KnowledgeNote | None:
        async with self._db.execute(
            f"SELECT {_COLUMNS} FROM {TABLE} WHERE id = ?", (note_id,)
        ) as cursor:
            row = await cursor.fetchone()
        return _from_row(row) if row is not None else None

    async def update(
        self,
        note_id: str,
        *,
        expected_version: int | None = None,
        principal: str | None = None,
        **changes: Any,
    ) -> KnowledgeNote:
        """Change fields of a note and bump its version (see `InMemoryNoteRepository.update`).

        The write is conditional on the version read, so a concurrent writer
        (another task or process) surfaces as `VersionConflictError`, never as a
        lost update.
        """
        async with self._lock:
            current = await self._get(note_id)
            if current is None or not visible_to(current, principal):
                raise NoteNotFoundError(note_id)
            if expected_version is not None and expected_version != current.version:
                raise VersionConflictError(note_id, expected_version, current.version)
            revised = _revise(current, changes)
            cursor = await self._db.execute(
                f"UPDATE {TABLE} SET type = ?, status = ?, content = ?, tags = ?, owner = ?,"
                " namespace = ?, version = ?, updated_at = ? WHERE id = ? AND version = ?",
                (
                    revised.type.value,
                    revised.status.value,
                    revised.content,
                    json.dumps(revised.tags, ensure_ascii=False),
                    revised.owner,
                    revised.namespace,
                    revised.version,
                    revised.updated_at.isoformat(),
                    note_id,
                    current.version,
                ),
            )
            await self._db.commit()
            if cursor.rowcount == 0:
                latest = await self._get(note_id)
                if latest is None:
                    raise NoteNotFoundError(note_id)
                raise VersionConflictError(note_id, current.version, latest.version)
            return revised

    async def list(
        self,
        type: NoteType | str | None = None,
        status: NoteStatus | str | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> builtins.list[KnowledgeNote]:
        """Return a page of notes in insertion order, optionally filtered."""
        async with self._lock:
            _check_page(limit, offset)
            where, params = _where(type, status, namespaces, principal)
            async with self._db.execute(
                f"SELECT {_COLUMNS} FROM {TABLE}{where} ORDER BY seq LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ) as cursor:
                rows = await cursor.fetchall()
            return [_from_row(row) for row in rows]

    async def search(
        self,
        query: str,
        limit: int = 6,
        only_approved: bool = False,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> RetrievalResult:
        """Rank the non-archived notes for a query."""
        where, params = _where(None, None, namespaces, principal)
        where = f"{where} AND status != ?" if where else " WHERE status != ?"
        async with (
            self._lock,
            self._db.execute(
                f"SELECT {_COLUMNS} FROM {TABLE}{where} ORDER BY seq",
                (*params, NoteStatus.ARCHIVED.value),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        candidates = [_from_row(row) for row in rows]
        return _search(self._retriever, query, candidates, limit, only_approved)

    async def count(
        self,
        type: NoteType | str | None = None,
        status: NoteStatus | str | None = None,
        *,
        namespaces: Collection[str] | None = None,
        principal: str | None = None,
    ) -> int:
        """Return how many notes match the filters."""
        async with self._lock:
            where, params = _where(type, status, namespaces, principal)
            async with self._db.execute(f"SELECT COUNT(*) FROM {TABLE}{where}", params) as cursor:
                row = await cursor.fetchone()
            return int(row[0]) if row is not None else 0


def where_clause(
    type: NoteType | str | None,
    status: NoteStatus | str | None,
    namespaces: Collection[str] | None,
    principal: str | None,
    mark: str,
) -> tuple[str, tuple[str, ...]]:
    """Build a WHERE clause for the optional filters, with `mark` as the placeholder.

    Type and status are validated as enums; `namespaces` keeps the notes in those,
    `principal` the notes that key may see (its own and those no key wrote).
    """
    clauses: builtins.list[str] = []
    params: builtins.list[str] = []
    if type is not None:
        clauses.append(f"type = {mark}")
        params.append(NoteType(type).value)
    if status is not None:
        clauses.append(f"status = {mark}")
        params.append(NoteStatus(status).value)
    if namespaces is not None:
        wanted = sorted(set(namespaces))
        if wanted:
            clauses.append(f"namespace IN ({', '.join([mark] * len(wanted))})")
            params.extend(wanted)
        else:
            clauses.append("1 = 0")
    if principal is not None:
        clauses.append(f"(principal IS NULL OR principal = {mark})")
        params.append(principal)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _where(
    type: NoteType | str | None,
    status: NoteStatus | str | None,
    namespaces: Collection[str] | None = None,
    principal: str | None = None,
) -> tuple[str, tuple[str, ...]]:
    """Build SQLite's WHERE clause for the optional filters (see `where_clause`)."""
    return where_clause(type, status, namespaces, principal, "?")


def _to_row(note: KnowledgeNote) -> tuple[Any, ...]:
    """Return the column values of a note, in `_COLUMNS` order."""
    return (
        note.id,
        note.type.value,
        note.status.value,
        note.content,
        json.dumps(note.tags, ensure_ascii=False),
        note.owner,
        note.namespace,
        note.principal,
        note.version,
        note.created_at.isoformat(),
        note.updated_at.isoformat(),
    )


def _from_row(row: Any) -> KnowledgeNote:
    """Rebuild a note from a row selected with `_COLUMNS`."""
    data = dict(row)
    data["tags"] = json.loads(data["tags"])
    return KnowledgeNote.model_validate(data)
