"""The Store's ranked search: a query's candidates read and ranked off the event loop.

A search with a `query` (`engine.store.ScopedStore`) reads the most recently updated
items under its prefix (after its filter), at most `MAX_CANDIDATES`, ranks them by
the first `MAX_RANKED_CHARS` characters of each one's text with a `QueryRanker`,
and answers a page. Reading and decoding hundreds of items of a few hundred KB, and
scanning their text for a long query, is seconds of CPU: none of it may happen on
the event loop, and not in a thread of its process either, where it would hold the
GIL the loop needs (a CPU-bound thread made `GET /ok` wait 40-130 ms on a busy
machine, against 10-16 ms for the same work in another process). So `Ranking` runs
it in a child process of its own (started on the first search from a clean fork
server, at a lower CPU priority; `RANKING_PROCESSES` of them), which reads the
candidates with the backend's `StoreReader` (its own connection, synchronous),
ranks them, renews the TTLs of the page's items and sends back that page only. A
ranker or reader that cannot be sent to a process (a test's) ranks in a thread
instead. At most `SEARCHES_AT_ONCE` searches of a process are
under way at once; a query is at most `MAX_QUERY_CHARS` characters.

The rankers: by meaning (`SemanticRanker`, cosine similarity of embeddings from the
OpenAI-compatible `/embeddings` of `EMBEDDINGS_BASE_URL`) when one is configured,
else the one the engine's opener is given (the product's keyword relevance,
`knowledge.store_ranking.KeywordRanker`). See docs/keys.md ("The Store's search").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import math
import multiprocessing
import multiprocessing.context
import os
import pickle
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from langchain_core.embeddings import Embeddings
from langgraph.store.base import Item

from core.settings import Settings

log = logging.getLogger(__name__)

#: Items a query ranks at most (the most recently updated under the prefix).
MAX_CANDIDATES = 500
#: Characters of an item's text a query reads (its start).
MAX_RANKED_CHARS = 32_768
#: The longest query, in characters.
MAX_QUERY_CHARS = 2000
#: Child processes ranking a server process's searches (one keeps the embeddings'
#: cache in one place; searches beyond it wait their turn).
RANKING_PROCESSES = 1
#: Ranked searches a process has under way at once (the rest wait for a turn).
SEARCHES_AT_ONCE = 4
#: How much lower the ranking process's CPU priority is (`nice`).
RANKING_NICENESS = 10
#: Items ranked in one call of the ranker: between two, a ranking thread hands the GIL
#: to the event loop's thread if it waits for it (the thread fallback).
RANK_CHUNK = 4
#: Text vectors kept in memory per ranking process.
MAX_CACHED_VECTORS = 10_000
#: Query vectors kept in memory (the latest queries').
MAX_CACHED_QUERIES = 64


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
    """Ranks a search's candidate texts for its query; never called on the event loop.

    It is sent to the ranking process (pickled), so it holds no open resource.
    """

    def rank(self, query: str, texts: Sequence[str]) -> list[float | None]:
        """Return each text's score, in order (None: it does not match the query at all)."""
        ...


class StoreReader(Protocol):
    """Reads a backend's store off the event loop (its own connection, synchronous).

    It is sent to the ranking process (pickled: it opens its connection where it is used).
    """

    def search(
        self, prefix: tuple[str, ...], filter: dict[str, Any] | None, limit: int
    ) -> list[Item]:
        """Return up to `limit` items under `prefix` matching `filter`, newest first.

        Reads only: no TTL is renewed.
        """
        ...

    def refresh(self, keys: Sequence[tuple[str, str]]) -> None:
        """Renew the TTL of the items named (namespace joined by ".", key) that have one."""
        ...

    def close(self) -> None:
        """Close the connections it opened in this process."""
        ...


class SemanticRanker:
    """Ranks by cosine similarity of embeddings; keeps text vectors in memory (LRU).

    Its calls to the endpoint are synchronous (it never runs on the event loop). One
    built by `query_ranker` is sent to the ranking process as its settings, and builds
    its client there.
    """

    def __init__(
        self,
        embeddings: Embeddings,
        max_cached: int = MAX_CACHED_VECTORS,
        *,
        rebuild: tuple[Any, ...] | None = None,
    ) -> None:
        """Rank with `embeddings`, keeping at most `max_cached` text vectors.

        Args:
            embeddings: The embeddings client.
            max_cached: Text vectors kept.
            rebuild: The arguments of `_openai_ranker` that build the same ranker in
                another process (None: it stays in this one).
        """
        self._embeddings = embeddings
        self._max_cached = max_cached
        self._rebuild = rebuild
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._queries: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        if self._rebuild is None:
            raise pickle.PicklingError("this SemanticRanker cannot be sent to another process")
        return (_openai_ranker, self._rebuild)

    def _query_vector(self, query: str) -> list[float]:
        """Return the query's vector (the latest queries' are kept)."""
        with self._lock:
            known = self._queries.get(query)
        if known is None:
            known = self._embeddings.embed_query(query)
            with self._lock:
                self._queries[query] = known
                while len(self._queries) > MAX_CACHED_QUERIES:
                    self._queries.popitem(last=False)
        return known

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
            wanted = self._query_vector(query)
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


def _openai_ranker(
    model: str, base_url: str, api_key: str | None, timeout: float
) -> SemanticRanker:
    """Return a semantic ranker over an OpenAI-compatible `/embeddings`."""
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model=model,
        base_url=base_url,
        api_key=api_key if api_key is not None else "unused",  # type: ignore[arg-type]
        timeout=timeout,
        max_retries=1,
        # Send text, not tiktoken ids: the endpoint need not be OpenAI's, and tiktoken
        # would download its encodings.
        check_embedding_ctx_length=False,
    )
    return SemanticRanker(embeddings, rebuild=(model, base_url, api_key, timeout))


def query_ranker(settings: Settings, fallback: QueryRanker) -> QueryRanker:
    """Return the ranker `settings` configure: semantic with EMBEDDINGS_BASE_URL, else `fallback`.

    Args:
        settings: The deployment's settings (EMBEDDINGS_*).
        fallback: The ranker without an embeddings endpoint (the engine's opener's).
    """
    if settings.embeddings_base_url is None:
        return fallback
    key = settings.embeddings_api_key
    return _openai_ranker(
        settings.embeddings_model,
        settings.embeddings_base_url,
        key.get_secret_value() if key is not None else None,
        settings.embeddings_timeout,
    )


def rank_items(ranker: QueryRanker, query: str, items: Sequence[Item]) -> list[tuple[float, Item]]:
    """Return the items the query matches with their scores, best first (stable for ties).

    CPU work, never on the event loop. Each item is ranked by the first
    `MAX_RANKED_CHARS` characters of its text (its key when it has none).
    """
    scores: list[float | None] = []
    for start in range(0, len(items), RANK_CHUNK):
        chunk = items[start : start + RANK_CHUNK]
        texts = [(item_text(item.value) or item.key)[:MAX_RANKED_CHARS] for item in chunk]
        scores += ranker.rank(query, texts)
        time.sleep(0)  # in a thread: let the event loop's thread take the GIL between chunks
    scored = [(score, item) for score, item in zip(scores, items, strict=True) if score is not None]
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return scored


@dataclass(frozen=True)
class RankedSearch:
    """One ranked search, as sent to the ranking process."""

    #: The namespace prefix, the owner's label first.
    prefix: tuple[str, ...]
    filter: dict[str, Any] | None
    query: str
    offset: int
    limit: int
    #: Renew the TTL of the items answered.
    refresh: bool


def search_and_rank(
    reader: StoreReader, ranker: QueryRanker, search: RankedSearch
) -> list[tuple[float, Item]]:
    """Read a search's candidates, rank them, renew the page's TTLs; return the page."""
    candidates = reader.search(search.prefix, search.filter, MAX_CANDIDATES)
    scored = rank_items(ranker, search.query, candidates)
    page = scored[search.offset : search.offset + search.limit]
    if search.refresh:
        reader.refresh([(".".join(item.namespace), item.key) for _, item in page])
    return page


#: The ranking process's ranker and reader (`_install`).
_INSTALLED: tuple[QueryRanker, StoreReader] | None = None


def _install(ranker: QueryRanker, reader: StoreReader) -> None:
    """Set the ranking process up: its ranker and reader, a lower CPU priority, no Ctrl-C.

    Ranking is background work: at a lower priority the machine's cores go to the
    server's event loop first. Ctrl-C is for the parent, which stops this process.
    """
    global _INSTALLED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(RANKING_NICENESS)
    _INSTALLED = (ranker, reader)


def _search_installed(search: RankedSearch) -> list[tuple[float, Item]]:
    """Run a search in the ranking process."""
    assert _INSTALLED is not None
    ranker, reader = _INSTALLED
    return search_and_rank(reader, ranker, search)


def _context() -> multiprocessing.context.BaseContext:
    """Return how ranking processes start: forked from a clean server process.

    Never a fork of the server (a threaded event loop). The fork server is started
    once per process with this module imported, not the server's `__main__`, so a
    ranking process starts in milliseconds (spawn would import the whole service
    again); where there is no fork server, spawn.
    """
    try:
        context = multiprocessing.get_context("forkserver")
    except ValueError:
        return multiprocessing.get_context("spawn")
    context.set_forkserver_preload([__name__])
    return context


def _sendable(*parts: object) -> bool:
    """Return whether every part can be sent to another process."""
    try:
        pickle.dumps(parts)
    except Exception:  # a ranker holding a client, a test's closure
        return False
    return True


class Ranking:
    """Where a server process ranks its searches (see the module docstring)."""

    def __init__(self, ranker: QueryRanker, reader: StoreReader | None) -> None:
        """Rank with `ranker`, reading with `reader` (None: the caller reads the candidates)."""
        self.ranker = ranker
        self.reader = reader
        self._at_once = asyncio.Semaphore(SEARCHES_AT_ONCE)
        self._separate = reader is not None and _sendable(ranker, reader)
        self._processes: ProcessPoolExecutor | None = None
        self._threads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-ranking")

    def _pool(self) -> ProcessPoolExecutor:
        if self._processes is None:
            assert self.reader is not None
            self._processes = ProcessPoolExecutor(
                max_workers=RANKING_PROCESSES,
                mp_context=_context(),
                initializer=functools.partial(_install, self.ranker, self.reader),
            )
        return self._processes

    async def search(self, search: RankedSearch) -> list[tuple[float, Item]]:
        """Read, rank and page a search off the event loop (needs a reader)."""
        assert self.reader is not None
        reader = self.reader
        loop = asyncio.get_running_loop()
        async with self._at_once:
            if not self._separate:
                return await loop.run_in_executor(
                    self._threads, search_and_rank, reader, self.ranker, search
                )
            try:
                return await loop.run_in_executor(self._pool(), _search_installed, search)
            except BrokenProcessPool:  # the ranking process died (killed): a new one
                log.warning("the Store's ranking process stopped; starting another")
                self._processes = None
                return await loop.run_in_executor(self._pool(), _search_installed, search)

    async def rank(self, query: str, items: Sequence[Item]) -> list[tuple[float, Item]]:
        """Rank items read by the caller, in a thread (no reader)."""
        loop = asyncio.get_running_loop()
        async with self._at_once:
            return await loop.run_in_executor(self._threads, rank_items, self.ranker, query, items)

    def close(self) -> None:
        """Stop the ranking process and thread (a search under way ends first)."""
        if self._processes is not None:
            self._processes.shutdown(wait=True, cancel_futures=True)
            self._processes = None
        self._threads.shutdown(wait=True, cancel_futures=True)
        if self.reader is not None:
            self.reader.close()


__all__ = [
    "MAX_CANDIDATES",
    "MAX_QUERY_CHARS",
    "MAX_RANKED_CHARS",
    "EmbeddingsUnavailable",
    "QueryRanker",
    "RankedSearch",
    "Ranking",
    "SemanticRanker",
    "StoreReader",
    "item_text",
    "query_ranker",
    "rank_items",
    "search_and_rank",
]
