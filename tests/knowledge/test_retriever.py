"""VaultRetriever beyond the acceptance cases: Chinese queries, limits, statuses."""

from __future__ import annotations

import pytest

from knowledge.notes import KnowledgeNote, NoteStatus, NoteType
from knowledge.retriever import VaultRetriever, query_words


def note(note_id: str, type_: str, content: str, tags: list[str] | None = None, **extra: str):
    """Build a note from the few fields a test cares about."""
    return KnowledgeNote.model_validate(
        {"id": note_id, "type": type_, "content": content, "tags": tags or [], **extra}
    )


def test_spaceless_chinese_query_is_segmented_into_words() -> None:
    words = query_words("学生党平价护肤")
    assert "学生党" in words
    assert "平价护肤" in words
    assert all(len(w) >= 3 for w in words)


def test_spaceless_chinese_query_matches_notes_word_by_word() -> None:
    notes = [
        note("price", "conclusion", "平价护肤品清单：百元内的保湿面霜"),
        note("student", "blocker", "学生党预算有限，单品不超过100元"),
        note("other", "blocker", "图片比例统一为3:4"),
    ]
    result = VaultRetriever().fetch("学生党平价护肤", notes)
    assert result.ids == ["student", "price"]
    assert result.scores == {
        "student": pytest.approx(0.1),
        "price": pytest.approx(0.0333, abs=1e-3),
    }
    assert result.total_found == 2


def test_chinese_query_with_spaces_matches_each_chunk() -> None:
    notes = [
        note("a", "next_action", "写平价护肤主题时先讲成分"),
        note("b", "progress", "学生党选题已完成"),
    ]
    result = VaultRetriever().fetch("平价护肤 学生党", notes)
    assert set(result.ids) == {"a", "b"}


def test_two_character_chinese_words_do_not_earn_the_word_bonus() -> None:
    # "测试" is in the content (+0.5) but is only 2 characters: no +0.1.
    result = VaultRetriever().fetch("测试", [note("b", "blocker", "测试内容")])
    assert result.scores["b"] == pytest.approx(0.5)


def test_matching_ignores_case_and_full_width_forms() -> None:
    result = VaultRetriever().fetch("API", [note("b", "blocker", "ａｐｉ 限流问题", ["Api"])])
    # query in content 0.5 + in tag 0.3 + word "api" in content 0.1
    assert result.scores["b"] == pytest.approx(0.9)


def test_relevance_is_capped_at_one() -> None:
    content = "alpha beta gamma delta epsilon zeta theta"
    result = VaultRetriever().fetch(content, [note("b", "blocker", content, [content])])
    assert result.scores["b"] == pytest.approx(1.0)


def test_archived_notes_are_never_returned() -> None:
    notes = [
        note("live", "blocker", "database down", status="approved"),
        note("old", "blocker", "database down", status="archived"),
    ]
    for only_approved in (False, True):
        result = VaultRetriever().fetch("database", notes, only_approved=only_approved)
        assert result.ids == ["live"]
        assert result.total_found == 1


def test_limit_per_type_applies_to_each_type_then_max_total() -> None:
    notes = [note(f"b{i}", "blocker", f"cache rule {i}") for i in range(4)]
    notes += [note(f"n{i}", "next_action", f"cache todo {i}") for i in range(4)]
    result = VaultRetriever().fetch("cache", notes, limit_per_type=2)
    assert result.ids == ["b0", "b1", "n0", "n1"]
    assert result.total_found == 8
    result = VaultRetriever().fetch("cache", notes, limit_per_type=2, max_total=3)
    assert result.ids == ["b0", "b1", "n0"]


def test_limit_per_type_mapping_limits_only_listed_types() -> None:
    notes = [note(f"b{i}", "blocker", f"cache rule {i}") for i in range(3)]
    notes += [note(f"n{i}", "next_action", f"cache todo {i}") for i in range(3)]
    result = VaultRetriever().fetch("cache", notes, limit_per_type={"blocker": 1})
    assert result.ids == ["b0", "n0", "n1", "n2"]


def test_ties_keep_input_order_and_default_max_total_is_configurable() -> None:
    notes = [note(f"c{i}", "conclusion", "same text") for i in range(5)]
    result = VaultRetriever(default_max_total=3).fetch("same", notes)
    assert result.ids == ["c0", "c1", "c2"]
    assert result.total_found == 5


def test_no_match_and_blank_query_return_nothing() -> None:
    notes = [note("a", "blocker", "something")]
    assert VaultRetriever().fetch("unrelated", notes).notes == []
    assert VaultRetriever().fetch("   ", notes).total_found == 0


def test_dict_notes_are_accepted_and_duplicates_ignored() -> None:
    raw = [
        {"id": "x", "type": "blocker", "content": "database down"},
        {"id": "x", "type": "reference", "content": "database docs"},
    ]
    result = VaultRetriever().fetch("database", raw)
    assert result.ids == ["x"]
    assert result.notes[0].type is NoteType.BLOCKER
    assert result.notes[0].status is NoteStatus.DRAFT


def test_negative_limits_are_rejected() -> None:
    with pytest.raises(ValueError):
        VaultRetriever().fetch("x", [], max_total=-1)
    with pytest.raises(ValueError):
        VaultRetriever().fetch("x", [], limit_per_type=-1)
