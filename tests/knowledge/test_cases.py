"""Acceptance cases of the knowledge vault, loaded from ../shared/cases/knowledge.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from knowledge.coordinator import KnowledgeCoordinator
from knowledge.deviation import DeviationDetector
from knowledge.notes import KnowledgeNote
from knowledge.retriever import VaultRetriever

CASES_FILE = Path(__file__).resolve().parents[2].parent / "shared" / "cases" / "knowledge.json"
CASES: dict[str, list[dict[str, Any]]] = json.loads(CASES_FILE.read_text(encoding="utf-8"))


def _params(section: str) -> list[Any]:
    """Return one pytest param per case of a section, named after the case."""
    return [pytest.param(case, id=case["name"]) for case in CASES[section]]


def _notes(case: dict[str, Any]) -> list[KnowledgeNote]:
    """Build a case's notes, from `notes` or from a `notes_generated` recipe."""
    if "notes_generated" in case:
        spec = case["notes_generated"]
        return [
            KnowledgeNote.model_validate(
                {
                    "id": f"gen{i}",
                    "type": spec["type"],
                    "content": f"{spec['content_prefix']}{i}",
                    "tags": spec.get("tags", []),
                }
            )
            for i in range(spec["count"])
        ]
    return [KnowledgeNote.model_validate(n) for n in case["notes"]]


def test_every_section_has_cases() -> None:
    assert {"retrieval", "deviation", "coordinator"} <= CASES.keys()
    assert all(CASES[section] for section in ("retrieval", "deviation", "coordinator"))


@pytest.mark.parametrize("case", _params("retrieval"))
def test_retrieval_case(case: dict[str, Any]) -> None:
    kwargs = {k: case[k] for k in ("limit_per_type", "max_total", "only_approved") if k in case}
    result = VaultRetriever().fetch(case["query"], _notes(case), **kwargs)
    expect = case["expect"]
    ids = [note.id for note in result.notes]

    if "non_empty" in expect:
        assert bool(ids) is expect["non_empty"]
    if "order" in expect:
        assert ids == expect["order"]
    if "ids" in expect:
        assert ids == expect["ids"]
    if "first" in expect:
        assert ids and ids[0] == expect["first"]
    if "max_returned" in expect:
        assert 0 < len(ids) <= expect["max_returned"]
    if "scores" in expect:
        for note_id, score in expect["scores"].items():
            assert result.scores[note_id] == pytest.approx(score, abs=1e-3), note_id
    assert result.total_found >= len(ids)


@pytest.mark.parametrize("case", _params("deviation"))
def test_deviation_case(case: dict[str, Any]) -> None:
    injected = [KnowledgeNote.model_validate(n) for n in case["injected"]]
    alert = DeviationDetector().detect_deviation(injected, case["actions"])
    expect = case["expect"]

    if expect is None:
        assert alert is None
        return
    assert alert is not None
    if "alert_type" in expect:
        assert alert.alert_type == expect["alert_type"]
    if "severity" in expect:
        assert alert.severity == expect["severity"]
    if "ignored" in expect:
        assert alert.ignored_ids == expect["ignored"]


@pytest.mark.parametrize("case", _params("coordinator"))
def test_coordinator_case(case: dict[str, Any]) -> None:
    coordinator = KnowledgeCoordinator()
    session = case["session"]
    injected = coordinator.inject_notes(session, case["query"], _notes(case))
    alert = coordinator.check_deviation(session, case["actions"])
    expect = case["expect"]

    assert injected, "the query should inject at least one note"
    if "alert_type" in expect:
        if expect["alert_type"] is None:
            assert alert is None
        else:
            assert alert is not None and alert.alert_type == expect["alert_type"]
    if "injection_history" in expect:
        assert len(coordinator.get_injection_history(session)) == expect["injection_history"]
    if "deviation_history" in expect:
        assert len(coordinator.get_deviation_history(session)) == expect["deviation_history"]
    if "summary" in expect:
        summary = coordinator.get_session_summary(session)
        for key, value in expect["summary"].items():
            assert summary[key] == pytest.approx(value), key  # type: ignore[literal-required]
