"""Rank vault notes for a query: relevance × note-type weight (PRODUCT.md §3).

How runs, the research agent and the Store use it: docs/knowledge.md, docs/store.md.

Scoring, for a note and a query (both folded with `segment.normalize`, so
matching ignores case and full-width forms):

- relevance = +0.5 if the whole query occurs in the content
            + 0.3 if the whole query occurs in one of the tags
            + 0.1 for each query word of 3+ characters that occurs in the content,
  capped at 1.0; a note with relevance 0 is not a match;
- score = relevance × TYPE_WEIGHTS[type] / 3.0, rounded to 4 decimals.

"Query words" are the query's whitespace/punctuation-separated chunks, the
words jieba finds inside each chunk that contains Chinese (search mode, so long
words also yield their dictionary sub-words), and the compounds of two adjacent
jieba words. Characters are counted, not bytes: "测试" is a 2-character word
and adds nothing. The compounds are a deliberate extension: Chinese dictionary
words are mostly 2 characters, so under the 3+ rule a spaceless query such as
"学生党平价护肤" would otherwise never match word by word; joining neighbours
gives "学生党" and "平价护肤". Each distinct word counts once.

Results are sorted by score (descending, stable: ties keep the input order),
then the per-type limit and the total limit are applied, in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise

from knowledge.notes import KnowledgeNote, NoteLike, NoteStatus, NoteType, as_note
from knowledge.segment import chunks, cut, cut_for_search, has_cjk, normalize

TYPE_WEIGHTS: Mapping[NoteType, float] = {
    NoteType.BLOCKER: 3.0,
    NoteType.NEXT_ACTION: 2.0,
    NoteType.CONCLUSION: 1.0,
    NoteType.PROGRESS: 0.8,
    NoteType.REFERENCE: 0.5,
}
WEIGHT_NORMALISER = 3.0  # the largest weight, so a perfect blocker scores 1.0
CONTENT_MATCH = 0.5
TAG_MATCH = 0.3
WORD_MATCH = 0.1
MIN_WORD_CHARS = 3
SCORE_DECIMALS = 4

LimitPerType = int | Mapping[NoteType | str, int]
"""One limit for every type, or a limit per type (types not listed are unlimited)."""


@dataclass(frozen=True)
class RetrievalResult:
    """What `VaultRetriever.fetch` found."""

    notes: list[KnowledgeNote] = field(default_factory=list)  # best first, limits applied
    scores: dict[str, float] = field(default_factory=dict)  # id → score, returned notes only
    total_found: int = 0  # notes with a non-zero score, before any limit

    @property
    def ids(self) -> list[str]:
        """Return the ids of the returned notes, in order."""
        return [note.id for note in self.notes]


def query_words(query: str) -> list[str]:
    """Return the distinct words of a query that can earn the per-word bonus.

    Only words of at least `MIN_WORD_CHARS` characters are returned; see the
    module docstring for how a Chinese query is segmented.
    """
    words: list[str] = []
    for chunk in chunks(normalize(query)):
        words.append(chunk)
        if has_cjk(chunk):
            words.extend(cut_for_search(chunk))
            words.extend(a + b for a, b in pairwise(cut(chunk)))
    return [w for w in dict.fromkeys(words) if len(w) >= MIN_WORD_CHARS]


def text_relevance(query: str, text: str, words: list[str] | None = None) -> float:
    """Return how well plain text matches a query, in [0, 1]: a note's relevance without tags.

    +0.5 when the whole query occurs in the text, +0.1 for each query word (see
    `query_words`) that does, capped at 1.0. The Store ranks its items' text with it
    when no embeddings endpoint is configured (`engine.store`).

    Args:
        query: The search text.
        text: The text to score.
        words: `query_words(query)`, when the caller already computed them.
    """
    needle = normalize(query).strip()
    if not needle:
        return 0.0
    haystack = normalize(text)
    score = CONTENT_MATCH if needle in haystack else 0.0
    for word in query_words(query) if words is None else words:
        if word in haystack:
            score += WORD_MATCH
    return min(score, 1.0)


class VaultRetriever:
    """Rank notes by relevance × type weight; pure and synchronous."""

    def __init__(self, default_max_total: int = 6) -> None:
        """Create a retriever.

        Args:
            default_max_total: How many notes `fetch` returns when no `max_total` is given.
        """
        if default_max_total < 0:
            raise ValueError("default_max_total must be >= 0")
        self.default_max_total = default_max_total

    def relevance(self, query: str, note: KnowledgeNote, words: list[str] | None = None) -> float:
        """Return the note's relevance to the query, in [0, 1] (before type weighting).

        Args:
            query: The search text.
            note: The note to score.
            words: `query_words(query)`, when the caller already computed them.
        """
        needle = normalize(query).strip()
        if not needle:
            return 0.0
        content = normalize(note.content)
        score = 0.0
        if needle in content:
            score += CONTENT_MATCH
        if any(needle in normalize(tag) for tag in note.tags):
            score += TAG_MATCH
        for word in query_words(query) if words is None else words:
            if word in content:
                score += WORD_MATCH
        return min(score, 1.0)

    def score(self, query: str, note: KnowledgeNote, words: list[str] | None = None) -> float:
        """Return the note's ranking score: relevance × type weight / 3, rounded."""
        weighted = self.relevance(query, note, words) * TYPE_WEIGHTS[note.type] / WEIGHT_NORMALISER
        return round(weighted, SCORE_DECIMALS)

    def fetch(
        self,
        query: str,
        notes: Iterable[NoteLike],
        limit_per_type: LimitPerType | None = None,
        max_total: int | None = None,
        only_approved: bool = False,
    ) -> RetrievalResult:
        """Return the notes that match the query, best first.

        Archived notes are never returned. When several notes share an id only
        the first is considered.

        Args:
            query: The search text (any language; Chinese is segmented).
            notes: Candidate notes, as models or dicts of note fields.
            limit_per_type: At most this many notes of each type (or a per-type mapping).
            max_total: At most this many notes overall; `default_max_total` when None.
            only_approved: Consider approved notes only.

        Returns:
            The ranked notes, their scores and how many matched before limits.

        Raises:
            ValueError: When a limit is negative.
        """
        total_cap = self.default_max_total if max_total is None else max_total
        if total_cap < 0:
            raise ValueError("max_total must be >= 0")
        type_caps = _type_caps(limit_per_type)

        words = query_words(query)
        scored: list[tuple[float, KnowledgeNote]] = []
        seen_ids: set[str] = set()
        for raw in notes:
            note = as_note(raw)
            if note.id in seen_ids:
                continue
            seen_ids.add(note.id)
            if note.status is NoteStatus.ARCHIVED:
                continue
            if only_approved and note.status is not NoteStatus.APPROVED:
                continue
            note_score = self.score(query, note, words)
            if note_score > 0:
                scored.append((note_score, note))

        # sorted() is stable, so equal (rounded) scores keep the caller's order.
        scored.sort(key=lambda pair: pair[0], reverse=True)
        taken: list[tuple[float, KnowledgeNote]] = []
        per_type: dict[NoteType, int] = {}
        for note_score, note in scored:
            if len(taken) >= total_cap:
                break
            cap = type_caps.get(note.type)
            if cap is not None and per_type.get(note.type, 0) >= cap:
                continue
            per_type[note.type] = per_type.get(note.type, 0) + 1
            taken.append((note_score, note))

        return RetrievalResult(
            notes=[note for _, note in taken],
            scores={note.id: note_score for note_score, note in taken},
            total_found=len(scored),
        )


def _type_caps(limit_per_type: LimitPerType | None) -> dict[NoteType, int]:
    """Expand a per-type limit into one cap per note type."""
    if limit_per_type is None:
        return {}
    if isinstance(limit_per_type, int):
        caps = dict.fromkeys(NoteType, limit_per_type)
    else:
        caps = {NoteType(key): value for key, value in limit_per_type.items()}
    if any(cap < 0 for cap in caps.values()):
        raise ValueError("limit_per_type must be >= 0")
    return caps
