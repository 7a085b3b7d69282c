"""The Store: LangGraph's namespaced key–value memory, scoped to one API key, with search.

Each backend keeps the items in LangGraph's own store implementation
(`engine.sqlite.store`: `AsyncSqliteStore`; `engine.postgres.store`:
`AsyncPostgresStore`); this module is what every caller sees of it, the
`/store/*` routes and the graphs' runtime store alike:

- `ScopedStore` puts the owner id of the API key (`key_<hex>`, or `anonymous`) in
  front of every namespace, a first label the client never sees and cannot name:
  a client's namespace `["brand-a", "voice"]` is `(owner, "brand-a", "voice")` in
  the database, and every answer drops that label again. Listing namespaces and
  searching match under the owner's label only, so no crafted prefix, suffix or
  wildcard reaches another key's items. The routes bind it to the caller
  (`for_owner`); the graphs get one bound to no one, which scopes each call to the
  run's owner (`core.run_config.run_owner`, read from the run's config), and fails in
  a run that has none.
- A search with a `query` ranks the items under the prefix (after the `filter`) by
  a `QueryRanker` (by meaning with EMBEDDINGS_BASE_URL, else the product's keyword
  relevance), off the event loop, in a process of its own (`engine.ranking`: what
  it reads and ranks, and its bounds). Ranking the candidates here rather than in
  the store's vector index keeps both deployments alike: the index needs a SQLite
  that loads extensions (`sqlite-vec`) or PostgreSQL's `pgvector`.
- Quotas (`engine.quotas`): each ranked search counts toward its key's
  `store_searches_per_minute`, each put toward its `store_bytes` (the bytes of a
  value are its JSON's, kept per item by the backend's `QuotaRepository`; a put
  over the quota writes nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from core.run_config import run_owner
from engine.errors import Invalid
from engine.quotas import UNLIMITED, Limits, LimitsFor, check_store_bytes
from engine.ranking import (
    MAX_CANDIDATES,
    MAX_QUERY_CHARS,
    MAX_RANKED_CHARS,
    EmbeddingsUnavailable,
    QueryRanker,
    RankedSearch,
    Ranking,
    SemanticRanker,
    StoreReader,
    item_text,
    query_ranker,
)
from engine.usage import QuotaRepository

#: Candidates read from the store at a time when no reader reads them off the loop.
CANDIDATE_PAGE = 32
#: TTL: reading an item renews it; expired items are swept every few minutes.
STORE_TTL: TTLConfig = {"refresh_on_read": True, "sweep_interval_minutes": 5}


class NoOwnerError(RuntimeError):
    """The store was used in a run that no API key started (it is scoped to one)."""


class ScopedStore(BaseStore):
    """A store whose every namespace lives under one API key's owner id (module docstring)."""

    supports_ttl = True

    def __init__(
        self,
        inner: BaseStore,
        ranker: QueryRanker,
        owner: str | None = None,
        *,
        quotas: QuotaRepository | None = None,
        limits: LimitsFor | None = None,
        reader: StoreReader | None = None,
        ranking: Ranking | None = None,
    ) -> None:
        """Scope `inner` to `owner`, or, when None, to the owner of the run calling it.

        Args:
            inner: LangGraph's store of the backend.
            ranker: How a search's `query` ranks items.
            owner: The API key's owner id; None: read each call's from the run's config.
            quotas: The backend's byte accounting and search counts (None: nothing
                is counted, nothing limited).
            limits: Each owner's limits (`store_bytes`, `store_searches_per_minute`);
                None: unlimited.
            reader: Reads the candidates of a ranked search off the event loop (the
                backend's); None: they are read here, a page at a time.
            ranking: Where searches are ranked, to share (the root store's; None: new).
        """
        self._inner = inner
        self._ranker = ranker
        self._owner = owner
        self._quotas = quotas
        self._limits = limits
        self._ranking = ranking or Ranking(ranker, reader)
        # The loop the backend's store lives on (both LangGraph stores keep it as `loop`).
        self._loop: asyncio.AbstractEventLoop | None = getattr(inner, "loop", None)
        # Both backends' stores keep TTLs (AsyncSqliteStore's class says otherwise only
        # through its base classes' order); their configuration decides read renewals.
        self.ttl_config = getattr(inner, "ttl_config", None)

    def for_owner(self, owner: str) -> ScopedStore:
        """Return this store scoped to the key whose owner id is `owner`."""
        return ScopedStore(
            self._inner,
            self._ranker,
            owner,
            quotas=self._quotas,
            limits=self._limits,
            ranking=self._ranking,
        )

    async def close(self) -> None:
        """Stop ranking (a search under way ends first) and close the reader."""
        await asyncio.to_thread(self._ranking.close)

    def _scope(self) -> str:
        owner = self._owner or run_owner()
        if owner is None:
            raise NoOwnerError("the store is scoped to the run's API key, and this run has none")
        return owner

    async def _limits_of(self, owner: str) -> Limits:
        return await self._limits(owner) if self._limits is not None else UNLIMITED

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations under the owner's namespace."""
        return await self._run(self._scope(), list(ops))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations from a synchronous node (a worker thread) on the store's loop.

        Raises:
            RuntimeError: Called on the store's own loop (async code uses `aget`, `aput`, …).
        """
        owner = self._scope()  # in the caller's thread: the run's config is there
        loop = self._loop
        if loop is None or _running_loop() is loop:
            raise RuntimeError("on the event loop, call the store's a-methods (aget, aput, …)")
        future = asyncio.run_coroutine_threadsafe(self._run(owner, list(ops)), loop)
        return future.result()

    async def _run(self, owner: str, ops: list[Op]) -> list[Result]:
        """Run the operations; puts are accounted for (and limited) as one."""
        puts = [op for op in ops if isinstance(op, PutOp)]
        if not puts or self._quotas is None:
            return await self._answer(owner, ops)
        writes = [(_prefix(owner, op.namespace), op.key, _value_bytes(op.value)) for op in puts]
        limit = (await self._limits_of(owner)).store_bytes
        adding = sum(size or 0 for _, _, size in writes)
        if limit is None or not adding:
            results = await self._answer(owner, ops)
            await self._quotas.store_written(owner, writes)
            return results
        async with self._quotas.hold(owner):  # every process's puts of the owner in turn
            used = await self._quotas.store_bytes(owner, [(p, k) for p, k, _ in writes])
            check_store_bytes(limit, used, adding)
            results = await self._answer(owner, ops)
            await self._quotas.store_written(owner, writes)
        return results

    async def _answer(self, owner: str, ops: list[Op]) -> list[Result]:
        results: list[Result] = [None] * len(ops)
        plain: list[tuple[int, Op]] = []
        ranked: list[tuple[int, SearchOp]] = []
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp) and op.query:
                ranked.append((i, op))
            else:
                plain.append((i, _scoped(owner, op)))
        if plain:
            answers = await self._inner.abatch([op for _, op in plain])
            for (i, _), answer in zip(plain, answers, strict=True):
                results[i] = _unscoped(answer)
        for i, search in ranked:
            results[i] = await self._ranked_search(owner, search)
        return results

    async def _ranked_search(self, owner: str, op: SearchOp) -> list[SearchItem]:
        """Rank the items under the prefix (after the filter) for the query; return a page.

        With the backend's reader, everything but the quota check happens off the event
        loop (`engine.ranking`): reading and decoding the candidates, ranking them,
        renewing the TTLs of the items answered. Without one, the candidates are read
        here a page at a time and ranked in a thread.

        Raises:
            Invalid: The query is longer than `MAX_QUERY_CHARS`.
            QuotaExceeded: The owner's searches of this minute are used up.
        """
        query = op.query or ""
        if len(query) > MAX_QUERY_CHARS:
            raise Invalid(f"query must be at most {MAX_QUERY_CHARS} characters", field="query")
        if self._quotas is not None:
            limit = (await self._limits_of(owner)).store_searches_per_minute
            await self._quotas.admit_search(owner, limit)
        if self._ranking.reader is not None:
            refresh = op.refresh_ttl is not False and bool(
                (self.ttl_config or {}).get("refresh_on_read")
            )
            search = RankedSearch(
                prefix=(owner, *op.namespace_prefix),
                filter=op.filter,
                query=query,
                offset=op.offset,
                limit=op.limit,
                refresh=refresh,
            )
            page = await self._ranking.search(search)
        else:
            scored = await self._ranking.rank(query, await self._candidates(owner, op))
            page = scored[op.offset : op.offset + op.limit]
        return [
            SearchItem(
                namespace=tuple(item.namespace[1:]),
                key=item.key,
                value=item.value,
                created_at=item.created_at,
                updated_at=item.updated_at,
                score=score,
            )
            for score, item in page
        ]

    async def _candidates(self, owner: str, op: SearchOp) -> list[Item]:
        """Return the items a query ranks: the most recently updated, a page at a time."""
        found: list[Item] = []
        while len(found) < MAX_CANDIDATES:
            page = await self._inner.asearch(
                (owner, *op.namespace_prefix),
                filter=op.filter,
                limit=min(CANDIDATE_PAGE, MAX_CANDIDATES - len(found)),
                offset=len(found),
                refresh_ttl=op.refresh_ttl,
            )
            found += page
            if len(page) < CANDIDATE_PAGE:
                break
        return found


def _prefix(owner: str, namespace: tuple[str, ...]) -> str:
    """Return the text both LangGraph stores key an owner's namespace by (labels and dots)."""
    return ".".join((owner, *namespace))


def _value_bytes(value: Mapping[str, Any] | None) -> int | None:
    """Return the bytes of a put's value as JSON (None: the put deletes the item)."""
    return None if value is None else len(orjson.dumps(dict(value)))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _scoped(owner: str, op: Op) -> Op:
    """Return the operation with the owner's label in front of its namespaces."""
    if isinstance(op, GetOp | PutOp):
        return op._replace(namespace=(owner, *op.namespace))
    if isinstance(op, SearchOp):
        return op._replace(namespace_prefix=(owner, *op.namespace_prefix))
    if isinstance(op, ListNamespacesOp):
        conditions = [
            MatchCondition("prefix", (owner, *c.path)) if c.match_type == "prefix" else c
            for c in op.match_conditions or ()
        ]
        conditions.append(MatchCondition("prefix", (owner,)))
        depth = op.max_depth + 1 if op.max_depth is not None else None
        return op._replace(match_conditions=tuple(conditions), max_depth=depth)
    raise TypeError(f"unknown store operation {type(op).__name__}")


def _unscoped_item(item: Item) -> Item:
    """Return the item with the owner's label dropped from its namespace."""
    if isinstance(item, SearchItem):
        return SearchItem(
            namespace=item.namespace[1:],
            key=item.key,
            value=item.value,
            created_at=item.created_at,
            updated_at=item.updated_at,
            score=item.score,
        )
    return Item(
        namespace=item.namespace[1:],
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _unscoped(result: Result) -> Result:
    """Return a result with the owner's label dropped from its namespaces."""
    if isinstance(result, Item):
        return _unscoped_item(result)
    if isinstance(result, list):
        unscoped: list[Any] = []
        for entry in result:
            if isinstance(entry, Item):
                unscoped.append(_unscoped_item(entry))
            elif len(entry) > 1:  # a namespace; the owner's label alone holds no item
                unscoped.append(entry[1:])
        return unscoped
    return result


__all__ = [
    "CANDIDATE_PAGE",
    "MAX_CANDIDATES",
    "MAX_QUERY_CHARS",
    "MAX_RANKED_CHARS",
    "STORE_TTL",
    "EmbeddingsUnavailable",
    "NoOwnerError",
    "QueryRanker",
    "ScopedStore",
    "SemanticRanker",
    "StoreReader",
    "item_text",
    "query_ranker",
]
