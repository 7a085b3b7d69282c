"""Retrieval: approved notes only, capped, keyed by thread, feedback in the retry query."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from knowledge.notes import KnowledgeNote
from knowledge.repository import InMemoryNoteRepository
from nodes.rag import rag, retrieval_query
from tests.support.fake_models import FakeModels, fake_context


def note(note_id: str, type_: str, content: str, status: str = "approved") -> KnowledgeNote:
    return KnowledgeNote.model_validate(
        {"id": note_id, "type": type_, "content": content, "status": status, "tags": []}
    )


VAULT = [
    note("b1", "blocker", "平价护肤文案禁止使用绝对化用语"),
    note("n1", "next_action", "平价护肤要写清楚价格区间"),
    note("c1", "conclusion", "平价护肤读者最关心成分"),
    note("d1", "blocker", "平价护肤草稿规则", status="draft"),
    note("a1", "blocker", "平价护肤旧规则", status="archived"),
    note("r1", "reference", "平价护肤参考：短段落、三步结构、结尾提问"),
    note("r2", "reference", "平价护肤参考：封面大字标题"),
    note("x1", "conclusion", "数据库连接池的大小"),
]


def state(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "request": "写一篇平价护肤笔记",
        "session_id": "thread-rag",
        "attempt": 0,
        "intent": {"action": "create_post", "topic": "平价护肤"},
    }
    base.update(overrides)
    return base


async def run_rag(ctx: Any, st: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    update = await rag(st, Runtime(context=ctx, stream_writer=events.append))
    return update, events


async def test_injects_approved_matching_notes_best_first(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels(), tmp_path, notes=InMemoryNoteRepository(VAULT))
    update, events = await run_rag(ctx, state())
    ids = [n["id"] for n in update["knowledge_notes"]]
    assert ids[:3] == ["b1", "n1", "c1"]  # type weight orders equally relevant notes
    assert "d1" not in ids and "a1" not in ids and "x1" not in ids
    assert set(update["knowledge_notes"][0]) == {"id", "type", "content", "tags", "score"}

    (injected,) = [e for e in events if e["type"] == "knowledge.injected"]
    assert injected["query"] == "平价护肤"
    assert [n["id"] for n in injected["notes"]] == ids
    assert [e["type"] for e in events] == ["stage.started", "knowledge.injected", "stage.completed"]
    assert events[0]["attempt"] == 1
    # Recorded under the thread, so the critic checks the same notes later.
    history = ctx.coordinator.get_injection_history("thread-rag")
    assert [r.note_ids for r in history] == [ids]


async def test_notes_are_capped_and_references_become_style_texts(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels(), tmp_path, notes=InMemoryNoteRepository(VAULT), max_notes=2)
    update, _ = await run_rag(ctx, state())
    assert [n["id"] for n in update["knowledge_notes"]] == ["b1", "n1"]
    assert update["style_references"] == [VAULT[5].content, VAULT[6].content]


async def test_a_retry_query_carries_the_critics_feedback(tmp_path: Path) -> None:
    retry = {"review_feedback": "缺少价格区间", "review_reason": "judge score 0.5 < 0.7"}
    assert retry_query_parts(retrieval_query(state(retry_context=retry))) == [
        "平价护肤",
        "缺少价格区间",
    ]
    # No topic: the request is the query.
    assert retrieval_query(state(intent={"action": "create_post"})) == "写一篇平价护肤笔记"

    ctx = fake_context(FakeModels(), tmp_path, notes=InMemoryNoteRepository(VAULT))
    update, _ = await run_rag(ctx, state(retry_context=retry))
    assert "缺少价格区间" in update["knowledge_query"]


def retry_query_parts(query: str) -> list[str]:
    return query.split("\n")


async def test_an_empty_vault_injects_nothing(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels(), tmp_path)
    update, events = await run_rag(ctx, state())
    assert update["knowledge_notes"] == [] and update["style_references"] == []
    assert next(e for e in events if e["type"] == "knowledge.injected")["notes"] == []
