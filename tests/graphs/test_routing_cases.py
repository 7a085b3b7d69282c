"""The routing cases of ../shared/cases/routing.json (one test each), and the loop caps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from agentkit.routing import artefact_digest, resolve_route

# The cases use the public names of PRODUCT.md §6 (graphs.routing); the internals
# the cap tests read come from where they live.
from graphs.routing import (
    quality_fallback,
    route_from_supervisor,
    should_continue_image,
    should_continue_research,
    should_continue_review,
    should_continue_supervisor,
)

CASES_FILE = Path(__file__).resolve().parents[2] / ".." / "shared" / "cases" / "routing.json"
CASES: dict[str, Any] = json.loads(CASES_FILE.read_text(encoding="utf-8"))


def _cases(group: str) -> list[Any]:
    return [pytest.param(case, id=case["name"]) for case in CASES[group]]


@pytest.mark.parametrize("case", _cases("route_from_supervisor"))
def test_route_from_supervisor(case: dict[str, Any]) -> None:
    assert route_from_supervisor(case["state"]) == case["expect"]


@pytest.mark.parametrize("case", _cases("should_continue_review"))
def test_should_continue_review(case: dict[str, Any]) -> None:
    assert should_continue_review(case["state"]) == case["expect"]


@pytest.mark.parametrize("case", _cases("should_continue_image"))
def test_should_continue_image(case: dict[str, Any]) -> None:
    assert should_continue_image(case["state"]) == case["expect"]


@pytest.mark.parametrize("case", _cases("quality_fallback"))
def test_quality_fallback(case: dict[str, Any]) -> None:
    assert quality_fallback(case["scores"]) == case["expect"]


def test_every_case_group_is_tested() -> None:
    tested = {
        "route_from_supervisor",
        "should_continue_review",
        "should_continue_image",
        "quality_fallback",
    }
    assert {k for k in CASES if not k.startswith("_")} == tested


# --- the rest of the routing table ------------------------------------------------

_ASKS = AIMessage(content="", tool_calls=[{"name": "t", "args": {}, "id": "c1"}])
_DONE = AIMessage(content="done")


@pytest.mark.parametrize(
    ("rounds", "last", "expect"),
    [
        (1, _ASKS, "research_evidence_tools"),
        (3, _ASKS, "research_evidence_tools"),  # the third round still runs
        (4, _ASKS, "supervisor"),  # a fourth is refused
        (1, _DONE, "supervisor"),
    ],
)
def test_research_tool_rounds_are_capped_at_three(
    rounds: int, last: AIMessage, expect: str
) -> None:
    state = {"research_tool_rounds": rounds, "research_messages": [last]}
    assert should_continue_research(state) == expect


@pytest.mark.parametrize(
    ("rounds", "complete", "expect"),
    [
        (1, False, "image_tools"),
        (9, False, "image_tools"),  # the ninth round runs
        (10, False, "supervisor"),  # a tenth never does
        (1, True, "supervisor"),
    ],
)
def test_image_tool_rounds_stay_below_ten(rounds: int, complete: bool, expect: str) -> None:
    state = {"image_tool_rounds": rounds, "image_messages": [_ASKS], "images_complete": complete}
    assert should_continue_image(state) == expect


def test_supervisor_look_ups_are_capped() -> None:
    assert should_continue_supervisor({"supervisor_messages": [_ASKS]}) == "supervisor_tools"
    capped = {"supervisor_messages": [_ASKS], "supervisor_tool_rounds": 3}
    assert should_continue_supervisor(capped) == "route"
    assert should_continue_supervisor({"supervisor_messages": [_DONE]}) == "route"


_LOW = {"infoDensity": 0.8, "textImageAlignment": 0.8, "styleConsistency": 0.8}


@pytest.mark.parametrize(
    ("dimension", "agent"),
    [
        ("infoDensity", "research_evidence_agent"),
        ("textImageAlignment", "layout_planner_agent"),
        ("styleConsistency", "reference_intelligence_agent"),
        ("readability", "image_planner_agent"),
        ("platformFit", "writer_agent"),
    ],
)
def test_each_failing_dimension_has_its_agent(dimension: str, agent: str) -> None:
    scores = dict.fromkeys(
        ("infoDensity", "textImageAlignment", "styleConsistency", "readability", "platformFit"),
        0.9,
    )
    scores[dimension] = 0.59
    assert quality_fallback(scores) == agent


def test_first_failing_dimension_wins() -> None:
    scores = {"infoDensity": 0.9, "textImageAlignment": 0.1, "platformFit": 0.1}
    assert quality_fallback(scores) == "layout_planner_agent"
    assert quality_fallback(scores, threshold=0.05) is None


def test_invalid_decisions_are_re_asked_then_routed_to_a_missing_stage() -> None:
    state: dict[str, Any] = {"supervisor_decision": {"next_agent": "poet"}, "invalid_decisions": 1}
    first = resolve_route(state)
    assert (first.target, first.reason) == ("supervisor", "invalid_decision")
    state["invalid_decisions"] = 3  # past max_invalid_decisions (2)
    past = resolve_route(state)
    assert (past.target, past.reason) == ("brief_compiler_agent", "invalid_decision")


def test_step_cap_ends_the_team() -> None:
    state = {"supervisor_decision": {"next_agent": "writer_agent"}, "team_step": 24}
    route = resolve_route(state)
    assert (route.target, route.reason) == ("__end__", "cap")


def test_same_agent_without_progress_is_capped() -> None:
    log = [{"step": s, "routed": "research_evidence_agent", "digest": None} for s in (1, 2)]
    state: dict[str, Any] = {
        "supervisor_decision": {"next_agent": "research_evidence_agent"},
        "team_step": 3,
        "creative_brief": {"topic": "t"},
    }
    for entry in log:
        entry["digest"] = artefact_digest(state)
    state["team_log"] = log
    route = resolve_route(state)
    assert route.reason == "cap"
    assert route.target == "reference_intelligence_agent"


def test_an_agent_given_up_on_is_passed_over_and_corrected_at_once() -> None:
    from agentkit.routing import first_missing_stage, resolve_route

    state = {
        "creative_brief": {"topic": "平价护肤"},
        "given_up": ["research_evidence_agent"],
        "supervisor_decision": {"next_agent": "research_evidence_agent"},
        "team_step": 5,
    }
    assert first_missing_stage(state) == "reference_intelligence_agent"
    route = resolve_route(state)
    assert (route.target, route.reason) == ("reference_intelligence_agent", "cap")
    assert route.gives_up is None  # already given up on: nothing new to record


def test_a_capped_agent_is_redirected_at_once_while_its_output_is_in_place() -> None:
    # The layout delivered, was capped for being re-picked without progress, and the
    # supervisor picks it again after another stage ran: redirected at once (issue 10).
    state: dict[str, Any] = {
        "creative_brief": {"topic": "平价护肤"},
        "layout_spec": {"blocks": [], "total_images": 1},
        "capped": ["layout_planner_agent"],
        "supervisor_decision": {"next_agent": "layout_planner_agent"},
        "team_step": 6,
    }
    route = resolve_route(state)
    assert (route.target, route.reason) == ("research_evidence_agent", "cap")
    assert route.caps is None and route.gives_up is None
    # Without its output (never produced, or gone) the pick is the supervisor's to make.
    assert resolve_route({**state, "layout_spec": None}).target == "layout_planner_agent"


def test_the_first_cap_records_the_capped_agent() -> None:
    state: dict[str, Any] = {
        "supervisor_decision": {"next_agent": "layout_planner_agent"},
        "layout_spec": {"blocks": [], "total_images": 1},
        "team_step": 3,
    }
    digest = artefact_digest(state)
    state["team_log"] = [
        {"step": s, "routed": "layout_planner_agent", "digest": digest} for s in (1, 2)
    ]
    route = resolve_route(state)
    assert (route.target, route.reason) == ("brief_compiler_agent", "cap")
    assert route.caps == "layout_planner_agent" and route.gives_up is None
