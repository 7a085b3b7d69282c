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
  a `QueryRanker`: by meaning (`SemanticRanker`, cosine similarity of embeddings
  from the OpenAI-compatible `/embeddings` of `EMBEDDINGS_BASE_URL`) when one is
  configured, else by the ranker the engine's opener is given (the product's:
  keyword relevance, `app.composition.KeywordRanker`). Either ranks
  at most `MAX_CANDIDATES` items, the most recently updated first; an item's text
  is the string leaves of its value, in order, its first `MAX_RANKED_CHARS`
  characters. The vectors of texts are computed on first use and kept in memory
  (by the text's hash); a changed item is embedded again. Ranking happens here
  rather than in the store's vector index because the index needs a SQLite that
  loads extensions (`sqlite-vec`) or PostgreSQL's `pgvector`, which neither the
  embedded deployment nor a plain PostgreSQL can count on; ranking the candidates
  keeps both deployments alike.
- A search never blocks the server: the candidates are read `CANDIDATE_PAGE` items
  at a time (each page's JSON is decoded on the event loop, a few milliseconds), and
  ranked in a worker thread of `RANKING_THREADS` (a `QueryRanker` is synchronous and
  is only ever called there), at most `SEARCHES_AT_ONCE` ranked searches of a
  process at once. A query is at most `MAX_QUERY_CHARS` characters (`Invalid`
  beyond, a 422). Each ranked search counts toward its key's
  `store_searches_per_minute`, each put toward its `store_bytes` (`engine.quotas`;
  the bytes of a value are its JSON's, kept per item by the backend).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import orjson
from langchain_core.embeddings import Embeddings
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
from core.settings import Settings
from engine.errors import Invalid
from engine.quotas import UNLIMITED, Limits, LimitsFor, check_store_bytes
from engine.usage import QuotaRepository

#: Items a query ranks at most (the most recently updated under the prefix).
MAX_CANDIDATES = 500
#: Candidates read from the store at a time (their JSON is decoded on the event loop).
CANDIDATE_PAGE = 32
#: Characters of an item's text a query reads (its start).
MAX_RANKED_CHARS = 32_768
#: The longest query, in characters.
MAX_QUERY_CHARS = 2000
#: Worker threads ranking searches, per process (more would contend for the GIL with
#: the event loop; searches beyond them wait their turn).
RANKING_THREADS = 2
#: Ranked searches a process runs at once (their candidates are in memory meanwhile).
SEARCHES_AT_ONCE = 4
#: Item vectors kept in memory per process.
MAX_CACHED_VECTORS = 10_000
#: TTL: reading an item renews it; expired items are swept every few minutes.
STORE_TTL: TTLConfig = {"refresh_on_read": True, "sweep_interval_minutes": 5}


class NoOwnerError(RuntimeError):
    """The store was used in a run that no API key started (it is scoped to one)."""


class EmbeddingsUnavailable(RuntimeError):
    """The embeddings endpoint failed; a search with a `query` cannot be ranked."""


def item_text(value: Mapping[str, Any]) -> str:
    """Return the text of an item's value: its string leaves, in order, one a line."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            parts.append(node)
        elif isinstance(node, Mapping):
            for child in node.values():
                walk(child)
        elif isinstance(node, list | tuple):
            for child in node:
                walk(child)

    walk(value)
    return "\n".join(parts)


class QueryRanker(Protocol):
    """Ranks a search's candidate texts for its query; always called in a worker thread."""

    def rank(self, query: str, texts: Sequence[str]) -> list[float | None]:
        """Return each text's score, in order (None: it does not match the query at all)."""
        ...


class SemanticRanker:
    """Ranks by cosine similarity of embeddings; keeps text vectors in memory (LRU).

    Called in the Store's ranking threads: its calls to the endpoint are synchronous
    there, and its cache is shared under a lock.
    """

    def __init__(self, embeddings: Embeddings, max_cached: int = MAX_CACHED_VECTORS) -> None:
        """Rank with `embeddings`, keeping at most `max_cached` text vectors."""
        self._embeddings = embeddings
        self._max_cached = max_cached
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def rank(self, query: str, texts: Sequence[str]) -> list[float | None]:
        """Return every text's similarity to the query.

        Raises:
            EmbeddingsUnavailable: The endpoint failed.
        """
        if not texts:
            return []
        keys = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
        with self._lock:
            known = {key: self._vectors[key] for key in keys if key in self._vectors}
        missing = [i for i, key in enumerate(keys) if key not in known]
        try:
            wanted = self._embeddings.embed_query(query)
            if missing:
                fresh = self._embeddings.embed_documents([texts[i] for i in missing])
                for i, vector in zip(missing, fresh, strict=True):
                    known[keys[i]] = vector
        except Exception as exc:
            raise EmbeddingsUnavailable("the embeddings endpoint failed") from exc
        with self._lock:
            for key in keys:
                self._vectors[key] = known[key]
                self._vectors.move_to_end(key)
            while len(self._vectors) > self._max_cached:
                self._vectors.popitem(last=False)
        return [round(_cosine(wanted, known[key]), 4) for key in keys]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Return the cosine similarity of two vectors (0 when one is zero or sizes differ)."""
    if len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def query_ranker(settings: Settings, fallback: QueryRanker) -> QueryRanker:
    """Return the ranker `settings` configure: semantic with EMBEDDINGS_BASE_URL, else `fallback`.

    Args:
        settings: The deployment's settings (EMBEDDINGS_*).
        fallback: The ranker without an embeddings endpoint (the engine's opener's).
    """
    if settings.embeddings_base_url is None:
        return fallback
    from langchain_openai import OpenAIEmbeddings

    key = settings.embeddings_api_key
    embeddings = OpenAIEmbeddings(
        model=settings.embeddings_model,
        base_url=settings.embeddings_base_url,
        api_key=key if key is not None else "unused",  # type: ignore[arg-type]
        timeout=settings.embeddings_timeout,
        max_retries=1,
        # Send text, not tiktoken ids: the endpoint need not be OpenAI's, and tiktoken
        # would download its encodings.
        check_embedding_ctx_length=False,
    )
    return SemanticRanker(embeddings)


class _Ranking:
    """A process's ranking threads, and the bound on its ranked searches at once."""

    def __init__(self, threads: int = RANKING_THREADS, at_once: int = SEARCHES_AT_ONCE) -> None:
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="store-ranking")
        self.at_once = asyncio.Semaphore(at_once)


def rank_items(ranker: QueryRanker, query: str, items: Sequence[Item]) -> list[tuple[float, Item]]:
    """Return the items the query matches with their scores, best first (stable for ties).

    CPU work: called in a ranking thread. Each item is ranked by the first
    `MAX_RANKED_CHARS` characters of its text (its key when it has none).
    """
    texts = [(item_text(item.value) or item.key)[:MAX_RANKED_CHARS] for item in items]
    scores = ranker.rank(query, texts)
    scored = [(score, item) for score, item in zip(scores, items, strict=True) if score is not None]
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return scored


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
        ranking: _Ranking | None = None,
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
            ranking: The ranking threads to share (the root store's; None: new ones).
        """
        self._inner = inner
        self._ranker = ranker
        self._owner = owner
        self._quotas = quotas
        self._limits = limits
        self._ranking = ranking or _Ranking()
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
        async with self._ranking.at_once:
            candidates = await self._candidates(owner, op)
            loop = asyncio.get_running_loop()
            scored = await loop.run_in_executor(
                self._ranking.pool, rank_items, self._ranker, query, candidates
            )
        page = scored[op.offset : op.offset + op.limit]
        return [
            SearchItem(
                namespace=item.namespace[1:],
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
