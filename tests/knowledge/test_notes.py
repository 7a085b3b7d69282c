"""KnowledgeNote: construction, defaults and bounds."""

from __future__ import annotations

from datetime import datetime

import pytest
from pydantic import ValidationError

from knowledge.notes import MAX_CONTENT_CHARS, MAX_TAGS, KnowledgeNote, NoteStatus, NoteType


def test_create_generates_id_and_defaults_to_draft() -> None:
    note = KnowledgeNote.create(NoteType.BLOCKER, "  禁止夸大功效  ", "editor", ["合规", "合规"])
    assert note.id.startswith("note_")
    assert note.status is NoteStatus.DRAFT
    assert note.content == "禁止夸大功效"
    assert note.tags == ["合规"]
    assert note.version == 1
    assert note.created_at.tzinfo is not None
    assert KnowledgeNote.create("reference", "x", "bot").id != note.id


def test_create_accepts_status_and_plain_strings() -> None:
    note = KnowledgeNote.create("next_action", "补充成分表", "editor", status="approved")
    assert note.type is NoteType.NEXT_ACTION and note.status is NoteStatus.APPROVED


def test_dicts_validate_with_defaults_and_extra_keys_ignored() -> None:
    note = KnowledgeNote.model_validate(
        {
            "id": "n1",
            "type": "blocker",
            "content": "c",
            "score": 3,
            "created_at": "2025-01-01T00:00:00",
        }
    )
    assert note.owner == "system"
    assert note.created_at == datetime.fromisoformat("2025-01-01T00:00:00+00:00")


@pytest.mark.parametrize(
    "changes",
    [
        {"content": ""},
        {"content": "   "},
        {"content": "x" * (MAX_CONTENT_CHARS + 1)},
        {"tags": [f"t{i}" for i in range(MAX_TAGS + 1)]},
        {"tags": ["x" * 51]},
        {"id": "has space"},
        {"id": "a/b"},
        {"type": "opinion"},
        {"status": "deleted"},
        {"version": 0},
    ],
)
def test_bounds_are_enforced(changes: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        KnowledgeNote.model_validate({"type": "blocker", "content": "ok", **changes})


def test_notes_are_immutable_and_round_trip_through_json() -> None:
    note = KnowledgeNote.create("conclusion", "使用 PostgreSQL", "editor", ["database"])
    with pytest.raises(ValidationError):
        note.content = "changed"
    assert KnowledgeNote.model_validate_json(note.model_dump_json()) == note


def test_an_exported_note_keeps_the_key_that_wrote_it() -> None:
    owned = KnowledgeNote.create("blocker", "品牌甲的规则", namespace="brand-a", principal="key_a")
    everyones = KnowledgeNote.create("reference", "通用参考")

    assert KnowledgeNote.model_validate_json(owned.export_json()) == owned
    assert KnowledgeNote.model_validate_json(everyones.export_json()) == everyones
    assert "principal" not in everyones.export_json()
