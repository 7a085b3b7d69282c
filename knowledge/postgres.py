"""Knowledge notes in PostgreSQL: the `NoteRepository` of the scale-out deployment.

Behaves like `SqliteNoteRepository` (the same suite, tests/knowledge/test_repository.py,
runs against both): insertion order is the table's identity column `seq`, `update` is a
write conditional on the version read, so a concurrent writer in any process surfaces as
`VersionConflictError`, and `search` ranks the non-archived notes with `VaultRetriever`.

The table (`knowledge_notes`) belongs to the service's schema, created by its migrations
(`engine.postgres.migrations`), not here: this package must not import `app`, so it takes an open
psycopg connection pool and never creates or alters tables.

One difference: PostgreSQL text cannot hold a NUL character, so a note whose id,
content, tags or owner contain one is refused with `ValueError` (SQLite would store it).
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from knowledge.notes import KnowledgeNote, NoteStatus, NoteType, visible_to
from knowledge.repository import (
    TABLE,
    DuplicateNoteError,
    NoteNotFoundError,
    NoteRepository,
    VersionConflictError,
    _check_page,
    _revise,
    _search,
    where_clause,
)
from knowledge.retriever import RetrievalResult, VaultRetriever

_COLUMNS = (
    "id, type, status, content, tags, owner, namespace, principal, version, created_at, updated_at"
)
_INSERT = f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES ({', '.join(['%s'] * 11)})"


class PostgresNoteRepository(NoteRepository):
    """Notes in the service's PostgreSQL database, over a psycopg async pool.

    The pool is opened and closed by its owner (the application's lifespan); this
    repository only borrows connections, one per call, and works whether or not they
    are in autocommit mode (every write is an explicit transaction).
    """

    def __init__(self, pool: AsyncConnectionPool[Any], retriever: VaultRetriever | None = None):
        """Bind the repository to an open pool on a migrated database."""
        self._pool = pool
        self._retriever = retriever or VaultRetriever()

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> builtins.list[dict[str, Any]]:
        async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def add(self, note: KnowledgeNote) -> KnowledgeNote:
        """Store a new note; raise `DuplicateNoteError` when its id is taken."""
        await self.add_many([note])
        return note

    async def add_many(self, notes: Iterable[KnowledgeNote]) -> builtins.list[KnowledgeNote]:
        """Store new notes in one transaction, or none of them when any id is taken."""
        batch = builtins.list(notes)
        if not batch:
            return batch
        try:
            async with (
                self._pool.connection() as conn,
                conn.transaction(),
                conn.cursor() as cur,
            ):
                await cur.executemany(_INSERT, [_to_row(note) for note in batch])
        except psycopg.errors.UniqueViolation:
            which = repr(batch[0].id) if len(batch) == 1 else "of the batch"
            raise DuplicateNoteError(f"note {which} already exists") from None
        return batch

    async def get(self, note_id: str, *, principal: str | None = None) -> KnowledgeNote | None:
        """Return the note with this id, or None (also when `principal` may not see it)."""
        rows = await self._fetch(f"SELECT {_COLUMNS} FROM {TABLE} WHERE id = %s", (note_id,))
        note = _from_row(rows[0]) if rows else None
        return note if note is not None and visible_to(note, principal) else None

    async def update(
        self,
        note_id: str,
        *,
        expected_version: int | None = None,
        principal: str | None = None,
        **changes: Any,
    ) -> KnowledgeNote:
        """Change fields of a note and bump its version (see `InMemoryNoteRepository.update`).

        The write is conditional on the version read, so a concurrent writer surfaces
        as `VersionConflictError`, never as a lost update.
        """
        current = await self.get(note_id, principal=principal)
        if current is None:
            raise NoteNotFoundError(note_id)
        if expected_version is not None and expected_version != current.version:
            raise VersionConflictError(note_id, expected_version, current.version)
        revised = _revise(current, changes)
        _check_text(revised)
        async with self._pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"UPDATE {TABLE} SET type = %s, status = %s, content = %s, tags = %s,"
                " owner = %s, namespace = %s, version = %s, updated_at = %s"
                " WHERE id = %s AND version = %s",
                (
                    revised.type.value,
                    revised.status.value,
                    revised.content,
                    revised.tags,
                    revised.owner,
                    revised.namespace,
                    revised.version,
                    revised.updated_at,
                    note_id,
                    current.version,
                ),
            )
            updated = cursor.rowcount
        if updated == 0:
            latest = await self.get(note_id)
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
        _check_page(limit, offset)
        where, params = _where(type, status, namespaces, principal)
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM {TABLE}{where} ORDER BY seq LIMIT %s OFFSET %s",
            (*params, limit, offset),
        )
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
        where = f"{where} AND status <> %s" if where else " WHERE status <> %s"
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM {TABLE}{where} ORDER BY seq",
            (*params, NoteStatus.ARCHIVED.value),
        )
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
        where, params = _where(type, status, namespaces, principal)
        rows = await self._fetch(f"SELECT count(*) AS n FROM {TABLE}{where}", params)
        return int(rows[0]["n"])


def _where(
    type: NoteType | str | None,
    status: NoteStatus | str | None,
    namespaces: Collection[str] | None = None,
    principal: str | None = None,
) -> tuple[str, tuple[str, ...]]:
    """Build PostgreSQL's WHERE clause for the optional filters (`where_clause`)."""
    return where_clause(type, status, namespaces, principal, "%s")


def _check_text(note: KnowledgeNote) -> None:
    """Refuse a note PostgreSQL cannot store as given (a NUL character in its text)."""
    texts = (note.id, note.content, note.owner, note.principal or "", *note.tags)
    if any("\x00" in text for text in texts):
        raise ValueError(f"note {note.id!r}: text must not contain NUL characters")


def _to_row(note: KnowledgeNote) -> tuple[Any, ...]:
    """Return the column values of a note, in `_COLUMNS` order."""
    _check_text(note)
    return (
        note.id,
        note.type.value,
        note.status.value,
        note.content,
        note.tags,
        note.owner,
        note.namespace,
        note.principal,
        note.version,
        note.created_at,
        note.updated_at,
    )


def _from_row(row: dict[str, Any]) -> KnowledgeNote:
    """Rebuild a note from a row selected with `_COLUMNS`."""
    return KnowledgeNote.model_validate(row)
