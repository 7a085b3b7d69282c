"""The asset store of the scale-out deployment: PostgreSQL holds every image.

The deployment it serves: docs/scale-out.md.

Choice: the images live in the service's PostgreSQL database (table `assets`: the
metadata in columns, the bytes in a `bytea` column keyed by the content hash), not in a
shared volume or an object store. Every replica and worker then reaches every asset with
nothing more to run or configure than the database it already needs, a backup of the
database is a backup of the assets, and an asset is never half-visible: its row commits
whole. Images are small (a card is a few hundred KB, an upload at most `MAX_UPLOAD_BYTES`),
which PostgreSQL stores out of line (TOAST) without trouble.

`PostgresAssetStore` has `AssetStore`'s interface, so nodes and routes do not change:
`root` is a local directory used as this process's cache of the files. Assets are
immutable (the id is the hash of the bytes), so a cached file is never stale; a lookup
that misses the cache reads the row once and writes the file (bytes first, then the
sidecar, each atomically), and from then on it is served from disk like the embedded
store's. `put` commits the row before it writes the cache, so an id handed out is
readable on every replica. The interface is synchronous (callers run it in worker
threads), hence a synchronous psycopg pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from providers.assets import AssetKind, AssetRecord, AssetStore, new_record

_METADATA = "asset_id, content_type, width, height, bytes, kind, slot, prompt, created_at, extra"


class PostgresAssetStore(AssetStore):
    """Images in PostgreSQL, cached as files under `root` (see the module docstring).

    The table (`assets`) is created by the service's migrations (`engine.postgres.migrations`);
    the pool is opened and closed by its owner.
    """

    def __init__(self, pool: ConnectionPool[Any], cache_dir: Path) -> None:
        """Bind the store to an open synchronous pool and a local cache directory."""
        super().__init__(cache_dir)
        self._pool = pool

    def put(
        self,
        data: bytes,
        content_type: str | None = None,
        *,
        kind: AssetKind = "generated",
        meta: Mapping[str, Any] | None = None,
    ) -> AssetRecord:
        """Store image bytes and return their record; the same bytes again are a no-op.

        See `AssetStore.put`. The first metadata stored for some bytes wins, across
        replicas too: a racing insert of the same bytes keeps the row that committed first.
        """
        del content_type  # detected from the bytes, as in AssetStore.put
        record = new_record(data, kind, meta)
        existing = self.get(record.asset_id)
        if existing is not None:
            return existing
        with self._pool.connection() as conn, conn.transaction():
            inserted = conn.execute(
                f"INSERT INTO assets ({_METADATA}, data)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (asset_id) DO NOTHING",
                (
                    record.asset_id,
                    record.content_type,
                    record.width,
                    record.height,
                    record.bytes,
                    record.kind,
                    record.slot,
                    record.prompt,
                    record.created_at,
                    Jsonb(record.extra),
                    data,
                ),
            ).rowcount
        if inserted == 0:  # another process stored the same bytes first: its record wins
            stored = self.get(record.asset_id)
            if stored is not None:
                return stored
        return self._write_files(record, data)

    def path(self, asset_id: str) -> Path | None:
        """Return the cached file of an asset, fetching it from the database on a miss.

        Raises:
            ValueError: `asset_id` is not a well-formed asset id.
        """
        cached = super().path(asset_id)  # validates the id
        # Complete only with its sidecar: a crash between the two writes leaves the bytes alone.
        if cached is not None and (self.root / f"{asset_id}.json").is_file():
            return cached
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(f"SELECT {_METADATA}, data FROM assets WHERE asset_id = %s", (asset_id,))
            row = cur.fetchone()
        if row is None:
            return None
        data = bytes(row.pop("data"))
        return self._write_files(AssetRecord.model_validate(row), data).path
