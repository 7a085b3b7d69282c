"""KnowledgeCoordinator: histories, summaries, defaults and bounds."""

from __future__ import annotations

import asyncio

import pytest

from knowledge.coordinator import KnowledgeCoordinator
from knowledge.deviation import AlertType
from knowledge.notes import KnowledgeNote

NOTES = [
    KnowledgeNote.model_validate(
        {"id": "b", "type": "blocker", "content": "数据库连接失败", "tags": ["database"]}
    ),
    KnowledgeNote.model_validate(
        {"id": "n", "type": "next_action", "content": "database 实现缓存机制", "tags": ["cache"]}
    ),
]


def test_check_defaults_to_the_latest_injection() -> None:
    coordinator = KnowledgeCoordinator()
    first = coordinator.inject_notes("t1", "database", NOTES)
    assert [n.id for n in first] == ["n", "b"]  # content match (0.4) beats tag match (0.3)
    coordinator.inject_notes("t1", "cache", NOTES)  # tag match on "n" only
    assert coordinator.check_deviation("t1", [{"type": "d", "content": "实现缓存机制"}]) is None
    alert = coordinator.check_deviation("t1", [{"type": "d", "content": "实现缓存机制"}], NOTES)
    assert alert is not None and alert.alert_type is AlertType.REPLAN_REQUIRED
    assert coordinator.get_session_summary("t1") == {
        "total_injections": 2,
        "total_notes_injected": 3,
        "total_deviations": 1,
        "deviation_rate": 0.5,
    }
    history = coordinator.get_injection_history("t1")
    assert [record.note_ids for record in history] == [["n", "b"], ["n"]]
    assert history[0].scores == {"n": pytest.approx(0.4), "b": pytest.approx(0.3)}
    assert coordinator.get_deviation_history("t1")[0].alert.ignored_ids == ["b"]


def test_max_injection_caps_each_injection() -> None:
    notes = [
        KnowledgeNote.model_validate({"id": f"n{i}", "type": "progress", "content": f"cache {i}"})
        for i in range(9)
    ]
    coordinator = KnowledgeCoordinator(max_injection=2)
    assert len(coordinator.inject_notes("s", "cache", notes)) == 2
    assert coordinator.inject("s", "cache", notes).total_found == 9


def test_sessions_are_independent_and_can_be_cleared() -> None:
    coordinator = KnowledgeCoordinator()
    coordinator.inject_notes("a", "database", NOTES)
    assert coordinator.get_injection_history("b") == []
    assert coordinator.check_deviation("b", []) is None  # nothing injected for "b"
    assert coordinator.get_session_summary("b")["deviation_rate"] == 0.0
    assert coordinator.clear_session("a") is True
    assert coordinator.clear_session("a") is False
    assert coordinator.get_session_summary("a")["total_injections"] == 0


def test_sessions_are_bounded_least_recently_used_first() -> None:
    coordinator = KnowledgeCoordinator(max_sessions=2, max_history=3)
    coordinator.inject_notes("old", "database", NOTES)
    coordinator.inject_notes("mid", "database", NOTES)
    coordinator.get_injection_history("old")  # touching keeps "old" alive
    coordinator.inject_notes("new", "database", NOTES)
    assert coordinator.get_injection_history("mid") == []
    assert len(coordinator.get_injection_history("old")) == 1
    for _ in range(5):
        coordinator.inject_notes("new", "database", NOTES)
    assert len(coordinator.get_injection_history("new")) == 3
    assert coordinator.get_session_summary("new")["total_injections"] == 6


async def test_concurrent_tasks_keep_counts_consistent() -> None:
    coordinator = KnowledgeCoordinator()

    async def worker(i: int) -> None:
        await asyncio.sleep(0)
        coordinator.inject_notes(f"s{i % 3}", "database", NOTES)
        await asyncio.sleep(0)
        coordinator.check_deviation(f"s{i % 3}", [])

    await asyncio.gather(*(worker(i) for i in range(30)))
    totals = [coordinator.get_session_summary(f"s{i}") for i in range(3)]
    assert sum(t["total_injections"] for t in totals) == 30
    assert all(t["deviation_rate"] == 1.0 for t in totals)


def test_empty_session_id_is_rejected() -> None:
    with pytest.raises(ValueError):
        KnowledgeCoordinator().inject_notes("", "database", NOTES)
