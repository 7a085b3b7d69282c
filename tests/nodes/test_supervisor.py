"""The supervisor's prompt: stage status, the suggested next step, notices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from agentkit.routing import draft_digest
from nodes.supervisor import stage_status, suggested_next, supervisor
from tests.support.fake_models import FakeModels, decision, fake_context

DONE: dict[str, Any] = {
    "creative_brief": {"topic": "t"},
    "evidence_pack": {"summary": "s"},
    "reference_analyses": {"style": "x"},
    "layout_spec": {"blocks": []},
    "image_plans": [{"slot": 1}],
    "generated_content": {"title": "t", "body": "b", "tags": []},
    "images_complete": True,
}


def _reviewed(state: dict[str, Any], approved: bool, scores: dict[str, float]) -> dict[str, Any]:
    reviewed = {**state, "review_feedback": {"approved": approved}, "quality_scores": scores}
    return {**reviewed, "reviewed_digest": draft_digest(reviewed)}


@pytest.mark.parametrize(
    ("state", "expect"),
    [
        ({}, "brief_compiler_agent"),
        ({"creative_brief": {"topic": "t"}}, "research_evidence_agent"),
        ({k: v for k, v in DONE.items() if k != "creative_brief"}, "brief_compiler_agent"),
        (DONE, "review_agent"),
        (_reviewed(DONE, True, {"platformFit": 0.9}), "END"),
        (_reviewed(DONE, False, {"readability": 0.2}), "image_planner_agent"),
        (_reviewed(DONE, False, {}), "writer_agent"),
    ],
)
def test_suggested_next(state: dict[str, Any], expect: str) -> None:
    assert suggested_next(state, 0.6) == expect  # type: ignore[arg-type]


def test_stage_status_marks_each_stage() -> None:
    status = stage_status({"creative_brief": {"topic": "t"}})  # type: ignore[typeddict-item]
    assert status.splitlines()[0] == "✅ creative_brief（brief_compiler_agent）"
    assert "❌ evidence_pack（research_evidence_agent）" in status


def test_stage_status_tells_the_supervisor_not_to_re_pick_a_capped_agent() -> None:
    state: Any = {"layout_spec": {"blocks": []}, "capped": ["layout_planner_agent"]}
    (line,) = [x for x in stage_status(state).splitlines() if "layout_planner_agent" in x]
    assert line.startswith("✅") and "不要再选" in line


async def test_prompt_shows_status_suggestion_errors_and_last_correction(tmp_path: Path) -> None:
    models = FakeModels({"supervisor": decision("research_evidence_agent")})
    state: Any = {
        "request": "写护肤笔记",
        "creative_brief": {"topic": "护肤"},
        "agent_errors": ["layout_planner_agent: no LayoutSpec"],
        "team_step": 1,
        "team_log": [
            {
                "step": 1,
                "requested": "",
                "routed": "supervisor",
                "reason": "invalid_decision",
                "detail": "no parsable decision; asking again",
                "guidance": "",
                "focus_areas": [],
                "digest": "",
            }
        ],
    }
    events: list[Any] = []
    update = await supervisor(
        state, Runtime(context=fake_context(models, tmp_path), stream_writer=events.append)
    )
    prompt = models.calls[0].prompt
    assert "下一步建议：research_evidence_agent" in prompt
    assert "layout_planner_agent: no LayoutSpec" in prompt
    assert "上一次的决定没有被执行（no parsable decision" in prompt
    assert update["team_step"] == 2 and update["invalid_decisions"] == 0
    assert events[0]["type"] == "supervisor.route" and events[0]["step"] == 2
