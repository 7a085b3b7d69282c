"""Retrieval: put the vault's notes for this attempt into the team's context (PRODUCT.md §1.1).

Each attempt retrieves again, through `KnowledgeCoordinator.inject` under the
run's `session_id` (the thread id), so the coordinator's history shows every
injection and the critic can check the same notes afterwards:

- candidates: the vault's approved notes of the run's scope (`agentkit.run_owner`): in
  its brand's `knowledge_namespace` and the shared namespace, written by the run's
  API key or by no key; never another brand's or another key's (drafts, notes
  pending the user and archived notes are never injected);
- query: the planner's topic (else the request); on a retry, plus the critic's
  feedback (`retry_context.review_feedback`), so notes about what went wrong
  rank higher;
- at most `ctx.max_notes` notes, ranked by relevance × note-type weight;
- style references: the best-matching approved `reference` notes that were not
  injected already (at most `MAX_STYLE_REFERENCES`), handed to the team as
  reference texts for the reference agent.

Emits `knowledge.injected` with the query and each note's id, type and score.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agentkit.context import AtelierContext, context_of
from agentkit.post import effective_request
from agentkit.run_owner import knowledge_namespaces, note_principal
from agentkit.state import PipelineState
from core.events import InjectedNote, KnowledgeInjected, emit, stage_events
from knowledge.notes import KnowledgeNote, NoteStatus, NoteType
from knowledge.repository import MAX_PAGE

MAX_STYLE_REFERENCES = 2
#: Feedback added to the query is cut to this many characters: retrieval wants keywords.
MAX_FEEDBACK_QUERY_CHARS = 300


def retrieval_query(state: PipelineState) -> str:
    """Build the retrieval query: the topic (else the request), plus feedback on a retry."""
    intent = state.get("intent") or {}
    base = str(intent.get("topic") or "").strip() or effective_request(state)
    retry = state.get("retry_context") or {}
    feedback = str(retry.get("review_feedback") or "").strip()
    if feedback:
        return f"{base}\n{feedback[:MAX_FEEDBACK_QUERY_CHARS]}"
    return base


async def _approved_notes(ctx: AtelierContext, state: PipelineState) -> list[KnowledgeNote]:
    """Return every approved note of the run's scope (the vault holds rules, not a corpus)."""
    notes: list[KnowledgeNote] = []
    offset = 0
    namespaces = knowledge_namespaces(state)
    principal = note_principal()
    while True:
        page = await ctx.notes.list(
            status=NoteStatus.APPROVED,
            limit=MAX_PAGE,
            offset=offset,
            namespaces=namespaces,
            principal=principal,
        )
        notes.extend(page)
        if len(page) < MAX_PAGE:
            return notes
        offset += MAX_PAGE


def note_for_state(note: KnowledgeNote, score: float) -> dict[str, Any]:
    """Return the plain-dict form of an injected note kept in state and shown to agents."""
    return {
        "id": note.id,
        "type": note.type.value,
        "content": note.content,
        "tags": list(note.tags),
        "score": score,
    }


async def rag(state: PipelineState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Inject the notes and style references for the next attempt."""
    ctx = context_of(runtime)
    attempt = int(state.get("attempt") or 0) + 1
    with stage_events(runtime.stream_writer, "rag", attempt):
        session_id = str(state.get("session_id") or "run")
        query = retrieval_query(state)
        candidates = await _approved_notes(ctx, state)
        result = ctx.coordinator.inject(session_id, query, candidates, only_approved=True)
        injected = result.notes[: ctx.max_notes]
        notes = [note_for_state(n, result.scores.get(n.id, 0.0)) for n in injected]

        taken = {n.id for n in injected}
        references = ctx.coordinator.retriever.fetch(
            query,
            [n for n in candidates if n.type is NoteType.REFERENCE and n.id not in taken],
            max_total=MAX_STYLE_REFERENCES,
            only_approved=True,
        )
        emit(
            runtime.stream_writer,
            KnowledgeInjected(
                query=query,
                notes=[
                    InjectedNote(id=n["id"], type=n["type"], score=min(1.0, n["score"]))
                    for n in notes
                ],
            ),
        )
        return {
            "knowledge_query": query,
            "knowledge_notes": notes,
            "style_references": [n.content for n in references.notes],
        }
