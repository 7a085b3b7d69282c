"""DeviationDetector beyond the acceptance cases: the addressed-note rule in product use."""

from __future__ import annotations

from knowledge.deviation import (
    AlertSeverity,
    AlertType,
    DeviationDetector,
    action_text,
    note_keywords,
)
from knowledge.notes import KnowledgeNote

ABSOLUTE_TERMS = KnowledgeNote.model_validate(
    {
        "id": "abs",
        "type": "blocker",
        "content": "禁止使用绝对化用语（最、第一、顶级）",
        "tags": ["合规"],
    }
)


def detect(notes: list[KnowledgeNote], *contents: object):
    """Run the detector on actions with the given contents."""
    return DeviationDetector().detect_deviation(
        notes, [{"type": "decision", "content": c} for c in contents]
    )


def test_keywords_come_from_the_core_without_directives_or_examples() -> None:
    assert note_keywords("禁止使用绝对化用语（最、第一、顶级）") == ["绝对化", "用语"]
    assert note_keywords("数据库连接失败") == ["数据库", "连接", "失败"]


def test_absolute_terms_blocker_is_addressed_by_a_rephrased_constraint() -> None:
    assert detect([ABSOLUTE_TERMS], "避免绝对化用语") is None
    assert detect([ABSOLUTE_TERMS], "不使用绝对化用语（最、第一、顶级）") is None


def test_absolute_terms_blocker_is_addressed_inside_a_structured_brief() -> None:
    brief = {
        "topic": "平价护肤",
        "constraints": {"must_avoid": ["最"], "notes": ["避免绝对化用语"]},
    }
    assert detect([ABSOLUTE_TERMS], brief) is None


def test_absolute_terms_blocker_is_not_addressed_by_an_unrelated_post() -> None:
    post = "学生党平价护肤清单：这款面霜是第一选择，顶级保湿，成分讲清楚"
    alert = detect([ABSOLUTE_TERMS], post)
    assert alert is not None
    assert alert.alert_type is AlertType.REPLAN_REQUIRED
    assert alert.severity is AlertSeverity.HIGH
    assert alert.ignored_ids == ["abs"]
    assert "绝对化用语" in alert.message


def test_partial_overlap_below_threshold_is_ignored() -> None:
    note = KnowledgeNote.model_validate(
        {"id": "n", "type": "next_action", "content": "优化数据库查询性能"}
    )
    assert detect([note], "实现数据库备份") is not None  # 1 of 4 keywords
    assert detect([note], "优化查询性能") is None  # 3 of 4 keywords


def test_english_notes_and_case_insensitive_matching() -> None:
    note = KnowledgeNote.model_validate(
        {"id": "e", "type": "blocker", "content": "Database connection failed"}
    )
    assert detect([note], "Fix the DATABASE connection first") is None
    assert detect([note], "Write the landing page") is not None


def test_all_ignored_notes_are_listed_and_the_worst_type_sets_severity() -> None:
    notes = [
        KnowledgeNote.model_validate({"id": "c", "type": "conclusion", "content": "采用Redis缓存"}),
        KnowledgeNote.model_validate({"id": "n", "type": "next_action", "content": "补充成分表"}),
    ]
    alert = detect(notes, "写标题")
    assert alert is not None
    assert alert.alert_type is AlertType.WARNING
    assert alert.severity is AlertSeverity.MEDIUM
    assert alert.ignored_ids == ["c", "n"]


def test_empty_actions_ignore_every_note_and_no_notes_means_no_alert() -> None:
    alert = DeviationDetector().detect_deviation([ABSOLUTE_TERMS], [])
    assert alert is not None and alert.ignored_ids == ["abs"]
    assert DeviationDetector().detect_deviation([], [{"type": "x", "content": "y"}]) is None


def test_action_text_flattens_strings_mappings_and_missing_content() -> None:
    text = action_text(["Plain", {"type": "t", "detail": "Nested"}, {"content": ["A", {"k": 1}]}])
    assert "plain" in text and "nested" in text and "a" in text and "1" in text
    assert action_text([{"type": "decision"}]) == ""  # the type is a label, not text
