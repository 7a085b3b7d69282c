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


# --- steps that add nothing (issue 32: a drifting supervisor stays cheap) --------------


def _entry(step: int, routed: str, digest: str, **extra: Any) -> dict[str, Any]:
    return {"step": step, "requested": routed, "routed": routed, "digest": digest, **extra}


def _refused_plan_step(step: int, name: str, digest: str) -> dict[str, Any]:
    return {
        "step": step,
        "requested": name,
        "routed": "supervisor",
        "reason": "invalid_decision",
        "digest": digest,
        "planned": True,
    }


def test_stalled_steps_count_steps_in_a_row_that_changed_nothing() -> None:
    from agentkit.routing import stall_limit, stalled_steps

    empty: dict[str, Any] = {}
    brief: dict[str, Any] = {"creative_brief": {"topic": "平价护肤"}}
    before, after = artefact_digest(empty), artefact_digest(brief)
    # The brief was made (progress), then chosen twice more with nothing new.
    log = [_entry(1, "brief_compiler_agent", before)]
    log += [_entry(s, "brief_compiler_agent", after) for s in (2, 3)]
    state = {**brief, "team_log": log, "team_step": 4}
    assert stalled_steps(state) == 2
    # A plan step naming no agent added nothing either; a re-ask is passed over.
    reask = {**_entry(3, "supervisor", after), "reason": "invalid_decision"}
    state["team_log"] = [*log, reask, _refused_plan_step(3, "poet", after)]
    assert stalled_steps(state) == 3 == stall_limit({"max_same_agent_repeats": 2})
    # The turn being decided is not counted (its agents have not run yet).
    state["team_log"] = [*log, _entry(4, "brief_compiler_agent", after)]
    assert stalled_steps(state) == 2
    # A step that changed an artefact ends the count.
    assert stalled_steps({**brief, "team_log": log[:1], "team_step": 2}) == 0
    # An agent's first try that failed is passed over: it was not chosen again.
    first_try = _entry(4, "layout_planner_agent", after)
    assert stalled_steps({**state, "team_log": [*log, first_try], "team_step": 5}) == 2


def test_three_steps_without_progress_end_the_team_as_capped() -> None:
    brief: dict[str, Any] = {"creative_brief": {"topic": "平价护肤"}}
    before, after = artefact_digest({}), artefact_digest(brief)
    state = {
        **brief,
        "supervisor_decision": {"next_agent": "layout_planner_agent"},
        "team_step": 4,
        "team_log": [
            _entry(1, "brief_compiler_agent", before),
            _refused_plan_step(1, "poet", after),
            _entry(2, "brief_compiler_agent", after, group=["brief_compiler_agent"]),
            _refused_plan_step(2, "poet", after),
        ],
    }
    route = resolve_route(state)
    assert (route.target, route.reason) == ("__end__", "cap")
    assert "added nothing" in route.detail
    # A valid decision is followed while the count is below the limit.
    state["team_log"] = state["team_log"][:3]
    assert resolve_route(state).target == "layout_planner_agent"


def test_an_agent_repeated_in_parallel_steps_is_capped_like_a_decisions_agent() -> None:
    from agentkit.routing import admit

    layout: dict[str, Any] = {
        "creative_brief": {"topic": "平价护肤"},
        "layout_spec": {"blocks": [], "total_images": 1},
    }
    digest = artefact_digest(layout)
    group = ["research_evidence_agent", "layout_planner_agent"]
    state = {
        **layout,
        "team_step": 3,
        "team_log": [
            _entry(1, "research_evidence_agent", digest, group=group),
            _refused_plan_step(1, "poet", digest),  # in between: neither counts nor breaks
            _entry(2, "research_evidence_agent", digest, group=group),
        ],
    }
    route = admit("layout_planner_agent", state, ("research_evidence_agent",))
    assert (route.reason, route.caps) == ("cap", "layout_planner_agent")


# --- a supervisor that drifted: later attempts follow the stage order ------------------

_DRIFTED = "brief_compiler_agent chosen repeatedly without progress"
_POST: dict[str, Any] = {
    "creative_brief": {"topic": "平价护肤"},
    "evidence_pack": {"summary": "s", "items": []},
    "reference_analyses": {"style": "清新"},
    "layout_spec": {"blocks": [], "total_images": 1},
    "image_plans": [{"slot": 1}],
    "generated_content": {"title": "t", "body": "正文", "tags": []},
    "images_complete": True,
}


def _autopilot_entry(step: int, routed: str, **extra: Any) -> dict[str, Any]:
    return {"step": step, "routed": routed, "reason": "cap", "autopilot": True, **extra}


def _reviewed(state: dict[str, Any], approved: bool, low: str | None = None) -> dict[str, Any]:
    from agentkit.routing import draft_digest

    scores = dict.fromkeys(("infoDensity", "readability", "platformFit"), 0.85)
    if low:
        scores[low] = 0.3
    return {
        **state,
        "review_feedback": {"approved": approved},
        "quality_scores": scores,
        "reviewed_digest": draft_digest(state),
    }


def test_only_routing_taking_a_turn_over_for_lack_of_progress_counts_as_drift() -> None:
    from dataclasses import replace

    from agentkit.routing import Route, drift_detail

    capped = Route("research_evidence_agent", "brief_compiler_agent", "cap", _DRIFTED)
    assert drift_detail(replace(capped, caps="brief_compiler_agent")) == _DRIFTED
    assert drift_detail(replace(capped, gives_up="brief_compiler_agent")) == _DRIFTED
    # Unparsable decisions past the re-ask limit: routing walks the stages itself.
    unparsable = Route("brief_compiler_agent", "", "invalid_decision", "re-ask limit reached")
    assert drift_detail(unparsable) == "re-ask limit reached"
    # A sound choice corrected, a re-ask, the step cap or a followed choice: no drift.
    for route in (
        Route("supervisor", "poet", "invalid_decision", "unknown agent 'poet'; asking again"),
        Route("brief_compiler_agent", "writer_agent", "precondition", "needs the brief"),
        Route("writer_agent", "END", "quality", "END refused"),
        Route("__end__", "writer_agent", "cap", "max_team_steps (24) reached"),
        Route("writer_agent", "writer_agent"),
    ):
        assert drift_detail(route) is None, route


def test_a_drifted_run_walks_the_stages_in_order_without_its_supervisor() -> None:
    from agentkit.routing import AUTOPILOT, autopilot_route

    state: dict[str, Any] = {"supervisor_drifted": _DRIFTED, "team_step": 0}
    route = autopilot_route(state)
    assert (route.target, route.requested, route.reason) == (
        "brief_compiler_agent",
        AUTOPILOT,
        "cap",
    )
    assert _DRIFTED in route.detail and "first stage missing" in route.detail
    # Whatever the supervisor would have said (it is not read), the next missing stage.
    state.update(creative_brief={"topic": "平价护肤"}, supervisor_decision={"next_agent": "END"})
    assert autopilot_route(state).target == "research_evidence_agent"
    # Preconditions hold: the image agent's plans come first.
    done = {k: v for k, v in _POST.items() if k not in ("image_plans", "images_complete")}
    assert autopilot_route({**state, **done}).target == "image_planner_agent"
    # With the post made and no review yet, the review; a passing one ends the team.
    assert autopilot_route({**state, **_POST}).target == "review_agent"
    end = autopilot_route(_reviewed({**state, **_POST}, approved=True))
    assert (end.target, end.reason) == ("__end__", "cap") and "every stage is done" in end.detail


def test_a_drifted_run_gives_each_agent_one_try_and_passes_over_what_needs_it() -> None:
    from agentkit.routing import autopilot_route

    brief = {"creative_brief": {"topic": "平价护肤"}}
    state: dict[str, Any] = {
        **brief,
        "supervisor_drifted": _DRIFTED,
        "team_step": 2,
        "team_log": [
            _autopilot_entry(1, "brief_compiler_agent"),
            _autopilot_entry(2, "research_evidence_agent"),  # left no evidence pack
        ],
    }
    assert autopilot_route(state).target == "reference_intelligence_agent"
    # A writer tried in vain leaves nothing to review: the team ends, the critic judges.
    tried = _autopilot_entry(3, "writer_agent")
    rest = {k: v for k, v in _POST.items() if k != "generated_content"}
    route = autopilot_route({**state, **rest, "team_log": [*state["team_log"], tried]})
    assert (route.target, route.reason) == ("__end__", "cap")
    assert "nothing left" in route.detail
    # An agent given up on earlier (`given_up`) is passed over too.
    assert autopilot_route({**state, "given_up": ["reference_intelligence_agent"]}).target == (
        "layout_planner_agent"
    )


def test_a_drifted_run_sends_a_rejecting_review_to_its_quality_fix_once() -> None:
    from agentkit.routing import autopilot_route

    rejected = _reviewed(
        {**_POST, "supervisor_drifted": _DRIFTED, "team_step": 9}, False, "infoDensity"
    )
    route = autopilot_route(rejected)
    assert (route.target, route.reason) == ("research_evidence_agent", "quality")
    # After the fix the review runs again on the new draft (made stale by the fix) ...
    stale = {**rejected, "body_blocks": [{"heading": "新", "text": "新的要点"}]}
    stale["team_log"] = [_autopilot_entry(10, "research_evidence_agent", reason="quality")]
    assert autopilot_route(stale).target == "review_agent"
    # ... and a review still rejecting ends the team: one fix per team run.
    again = _reviewed(stale, False, "readability")
    route = autopilot_route(again)
    assert (route.target, route.reason) == ("__end__", "cap")


def test_a_drifted_run_keeps_the_step_cap() -> None:
    from agentkit.routing import autopilot_route

    state = {"supervisor_drifted": _DRIFTED, "team_step": 24}
    route = autopilot_route(state)
    assert (route.target, route.reason) == ("__end__", "cap")
    assert "max_team_steps (24)" in route.detail
