"""The Store's keyword ranking: a search's items ranked by the vault's Chinese keyword relevance.

`KeywordRanker` is the `engine.QueryRanker` the product gives the engine's opener
(`app.composition`): the Store ranks with it when no EMBEDDINGS_BASE_URL is set.
The engine calls it in its ranking process, never on the event loop, so this module
imports only what ranking needs (the vault's segmentation), not the product. See
docs/store.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from knowledge.retriever import query_words, text_relevance

#: Words of a query the ranking looks for: past ten that match the score is full
#: anyway, and each one is a scan of every candidate's text.
MAX_QUERY_WORDS = 64


class KeywordRanker:
    """Ranks texts by keyword relevance to a query (`knowledge.retriever.text_relevance`).

    Whole query +0.5, each segmented word +0.1 (up to 1.0); a text matching nothing
    is left out. A query's first `MAX_QUERY_WORDS` words count.
    """

    def rank(self, query: str, texts: Sequence[str]) -> list[float | None]:
        """Return each text's score, None for a text that matches nothing."""
        words = _query_words(query)
        scores = (text_relevance(query, text, words) for text in texts)
        return [round(score, 4) if score > 0 else None for score in scores]


@functools.lru_cache(maxsize=64)
def _query_words(query: str) -> list[str]:
    """Return the words of a query the ranking looks for (kept: a search ranks in chunks)."""
    return query_words(query)[:MAX_QUERY_WORDS]


__all__ = ["MAX_QUERY_WORDS", "KeywordRanker"]
