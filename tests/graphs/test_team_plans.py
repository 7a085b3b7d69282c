"""A supervisor that plans ahead and starts agents together (PRODUCT.md §1.2, issue 28).

The decision's optional `plan` and `parallel_agents` on scripted fake models: the
plan runs without asking the supervisor again until it ends, an agent's output
fails its check, the review rejects or a check refuses a step; the agents of a
step start in one superstep; their notes never clobber each other; and the
stuck and failing cases end as on the one-agent path (`test_team.py`, unchanged).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from agentkit.routing import PLAN_NAMES, plan_steps
from agentkit.state import MAX_NOTES, MergedList
from core.agents import AGENTS
from core.settings import Settings
from graphs.team import build_team
from nodes.supervisor import SYSTEM
from providers.llm import OpenAIModelFactory
from tests.app.atelier_llm import (
    NORMAL_PLAN,
    planning_supervisor,
    short_planning_supervisor,
    team_responder,
)
from tests.graphs.team_runs import REQUEST, run_team
from tests.support.fake_models import (
    FakeModels,
    Reply,
    fake_context,
    garbage,
    happy_supervisor,
    happy_team,
    tool_call,
)
from tests.support.scripted_openai import ChatRequest, ScriptedOpenAIServer
from tests.support.scripted_openai import Reply as ScriptedReply

ARTEFACTS = (
    "creative_brief",
    "evidence_pack",
    "body_blocks",
    "reference_analyses",
    "layout_spec",
    "image_plans",
    "generated_content",
    "quality_scores",
)


def first_then_happy(*first: AIMessage) -> Callable[[list[BaseMessage]], Reply]:
    """Return a supervisor that answers `first` in order, then decides the happy way."""
    queue = list(first)

    def respond(messages: list[BaseMessage]) -> Reply:
        return queue.pop(0) if queue else happy_supervisor(messages)

    return respond


def planned(**args: Any) -> AIMessage:
    """Return a supervisor decision with the given fields (plan, parallel_agents …)."""
    return tool_call("SupervisorDecision", **{"guidance": "", "focus_areas": [], **args})


def route_events(events: list[dict[str, Any]]) -> list[tuple[str, list[str], bool]]:
    """Return (next_agent, parallel_agents, planned) of every supervisor.route event."""
    return [
        (e["next_agent"], e["parallel_agents"], e["planned"])
        for e in events
        if e["type"] == "supervisor.route"
    ]


async def test_a_planned_run_asks_the_supervisor_once(tmp_path: Path) -> None:
    models = FakeModels({**happy_team(2), "supervisor": planning_supervisor})
    run = await run_team(models, tmp_path, image_count=2)

    assert models.count("supervisor") == 1
    assert route_events(run.events) == [
        ("brief_compiler_agent", [], False),
        ("research_evidence_agent", ["reference_intelligence_agent", "layout_planner_agent"], True),
        ("image_planner_agent", ["writer_agent"], True),
        ("image_agent", ["review_agent"], True),
    ]
    assert run.of_type("supervisor.route")[0]["plan"] == NORMAL_PLAN
    assert not run.fallbacks
    assert run.state["review_feedback"]["approved"] is True
    assert len(run.state["images"]) == 2
    assert [e.get("group") for e in run.state["team_log"]] == [
        ["brief_compiler_agent"],
        *NORMAL_PLAN,
    ]


async def test_a_planned_run_makes_what_the_one_agent_path_makes(tmp_path: Path) -> None:
    one = await run_team(FakeModels(happy_team(2)), tmp_path / "one", image_count=2)
    models = FakeModels({**happy_team(2), "supervisor": planning_supervisor})
    plan = await run_team(models, tmp_path / "plan", image_count=2)
    for field in ARTEFACTS:
        assert plan.state[field] == one.state[field], field
    assert [i["slot"] for i in plan.state["images"]] == [i["slot"] for i in one.state["images"]]


async def test_the_agents_of_a_step_start_in_one_superstep(tmp_path: Path) -> None:
    models = FakeModels({**happy_team(1), "supervisor": planning_supervisor})
    steps: dict[str, list[int]] = {}
    async for chunk in build_team().astream(
        {"request": REQUEST, "image_count": 1},
        context=fake_context(models, tmp_path),
        stream_mode="debug",
    ):
        if chunk["type"] == "task":
            steps.setdefault(chunk["payload"]["name"], []).append(chunk["step"])
    for group in NORMAL_PLAN:
        assert len({steps[agent][0] for agent in group}) == 1, (group, steps)
    # The supervisor node ran once per step (and once more to end the team after the
    # last step's cards), never while agents were running; its model only the first time.
    assert len(steps["supervisor"]) == 2 + len(NORMAL_PLAN)
    busy = {step for name, runs in steps.items() if name != "supervisor" for step in runs}
    assert not busy & set(steps["supervisor"])
    assert models.count("supervisor") == 1


async def test_an_agent_failing_in_a_plan_hands_back_and_ends_as_without_a_plan(
    tmp_path: Path,
) -> None:
    team = {**happy_team(1), "research_evidence_agent": garbage()}
    models = FakeModels({**team, "supervisor": planning_supervisor})
    run = await run_team(models, tmp_path, image_count=1, limits={"max_team_steps": 12})

    # The first step failed its check: the supervisor is asked again after it.
    assert models.count("supervisor") >= 2
    assert route_events(run.events)[2][0] == "research_evidence_agent"
    # As in test_team's never-delivering agent: given up, and the post still made.
    assert run.state["given_up"] == ["research_evidence_agent"]
    assert run.state["generated_content"]["body"]
    assert run.state["images"] and run.state["review_feedback"] is not None
    assert run.state["team_step"] <= 12


async def test_a_review_rejecting_in_a_plan_hands_back_to_the_quality_fix(
    tmp_path: Path,
) -> None:
    weak = happy_team(1, scores={"platformFit": 0.5})["review_agent"]
    team = happy_team(1)
    models = FakeModels(
        {**team, "review_agent": [weak, team["review_agent"]], "supervisor": planning_supervisor}
    )
    run = await run_team(models, tmp_path, image_count=1)

    assert ("END", "writer_agent", "quality") in run.fallbacks
    assert models.count("writer_agent") == 2 and models.count("review_agent") == 2
    assert run.state["review_feedback"]["approved"] is True


async def test_a_step_whose_input_is_not_ready_is_refused_and_the_supervisor_asked(
    tmp_path: Path,
) -> None:
    first = planned(
        next_agent="brief_compiler_agent", plan=[["writer_agent", "review_agent"], "END"]
    )
    models = FakeModels({**happy_team(1), "supervisor": first_then_happy(first)})
    run = await run_team(models, tmp_path, image_count=1)

    assert run.fallbacks[0] == ("review_agent", "supervisor", "precondition")
    assert models.count("writer_agent") == 1
    assert models.count("supervisor") > 1
    # The model is told why it is asked again.
    second = models.calls_for("supervisor")[1].messages[1].content
    assert "review_agent needs writer_agent first" in second
    assert run.state["review_feedback"]["approved"] is True


async def test_a_parallel_agent_needing_its_neighbour_is_left_out(tmp_path: Path) -> None:
    first = planned(
        next_agent="brief_compiler_agent",
        parallel_agents=["writer_agent", "research_evidence_agent", "poet_agent"],
    )
    models = FakeModels({**happy_team(1), "supervisor": first_then_happy(first)})
    run = await run_team(models, tmp_path, image_count=1)

    assert route_events(run.events)[0] == (
        "brief_compiler_agent",
        ["research_evidence_agent"],
        False,
    )
    assert run.fallbacks[:2] == [
        ("writer_agent", "brief_compiler_agent", "precondition"),
        ("poet_agent", "brief_compiler_agent", "invalid_decision"),
    ]
    # No plan: the supervisor decides again once both have finished.
    assert route_events(run.events)[1][0] == "reference_intelligence_agent"
    assert run.state["review_feedback"]["approved"] is True


async def test_the_step_cap_ends_a_plan(tmp_path: Path) -> None:
    models = FakeModels({**happy_team(1), "supervisor": planning_supervisor})
    run = await run_team(models, tmp_path, image_count=1, limits={"max_team_steps": 4})

    assert run.fallbacks == [("image_agent", "__end__", "cap")]
    assert run.state["team_step"] == 3
    assert models.count("image_agent") == 0


async def test_notes_of_agents_run_together_are_all_kept(tmp_path: Path) -> None:
    team = {
        **happy_team(1),
        "reference_intelligence_agent": garbage(),
        "layout_planner_agent": garbage(),
    }
    models = FakeModels({**team, "supervisor": planning_supervisor})
    steps: list[dict[str, Any]] = []
    async for mode, chunk in build_team().astream(
        {"request": REQUEST, "image_count": 1, "limits": {"max_team_steps": 12}},
        context=fake_context(models, tmp_path),
        stream_mode=["values", "custom"],
    ):
        if mode == "values":
            steps.append(chunk)
    errors = [s.get("agent_errors") or [] for s in steps]
    both = [e for e in errors if len(e) >= 2]
    assert both, errors
    assert any(n.startswith("reference_intelligence_agent: ") for n in both[0])
    assert any(n.startswith("layout_planner_agent: ") for n in both[0])


def test_notes_rewritten_together_keep_every_writers_change() -> None:
    notes = MergedList(list, limit=MAX_NOTES)
    assert notes.update([["a: x", "b: y"]]) and notes.get() == ["a: x", "b: y"]  # one writer
    # Two agents of one step rewrite the list they both read: one clears its note,
    # the other adds one; both changes apply, in either order.
    for writes in (
        [["b: y"], ["a: x", "b: y", "c: z"]],
        [["a: x", "b: y", "c: z"], ["b: y"]],
    ):
        step = notes.copy()
        step.update(writes)
        assert step.get() == ["b: y", "c: z"], writes
    assert not notes.update([None]) and notes.get() == ["a: x", "b: y"]
    many = MergedList(list, limit=MAX_NOTES)
    many.update([[f"n{i}" for i in range(MAX_NOTES + 3)]])
    assert len(many.get()) == MAX_NOTES and many.get()[-1] == f"n{MAX_NOTES + 2}"
    restored = many.from_checkpoint(many.checkpoint())
    assert restored.get() == many.get() and restored == many


async def test_the_supervisor_sees_unchanged_context_once(tmp_path: Path) -> None:
    models = FakeModels(happy_team(1))
    await run_team(models, tmp_path, image_count=1)
    turns = [str(call.messages[1].content) for call in models.calls_for("supervisor")]
    assert REQUEST in turns[0]
    assert all(REQUEST not in turn for turn in turns[1:])
    assert "与之前相同" in turns[1]


async def test_a_supervisor_stuck_on_one_agent_with_a_plan_is_capped_as_without(
    tmp_path: Path,
) -> None:
    stuck = planned(
        next_agent="layout_planner_agent",
        plan=[["layout_planner_agent"], ["layout_planner_agent"], ["layout_planner_agent"]],
    )
    models = FakeModels({**happy_team(1), "supervisor": stuck})
    run = await run_team(models, tmp_path, image_count=1, limits={"max_team_steps": 12})

    # The plan repeats it until the repeat cap refuses the step, the supervisor is asked,
    # and its insistence is corrected as on the one-agent path: the post is still made.
    assert ("layout_planner_agent", "supervisor", "cap") in run.fallbacks
    assert ("layout_planner_agent", "brief_compiler_agent", "cap") in run.fallbacks
    assert run.state["capped"] == ["layout_planner_agent"]
    assert run.state["generated_content"]["body"]
    assert run.state["images"] and run.state["review_feedback"] is not None
    assert run.state["team_step"] <= 12


async def test_a_parallel_agent_left_out_for_repeating_is_recorded_as_capped(
    tmp_path: Path,
) -> None:
    again = planned(next_agent="layout_planner_agent")
    together = planned(
        next_agent="research_evidence_agent", parallel_agents=["layout_planner_agent"]
    )
    models = FakeModels(
        {
            **happy_team(1),
            "supervisor": first_then_happy(
                planned(next_agent="brief_compiler_agent"), again, again, together
            ),
        }
    )
    limits = {"max_team_steps": 16, "max_same_agent_repeats": 1}
    run = await run_team(models, tmp_path, image_count=1, limits=limits)

    # The layout's third turn, after one that changed nothing, is refused next to the
    # research and recorded as a refused plan step is: capped (its output in place, so
    # not given up on).
    assert route_events(run.events)[3] == ("research_evidence_agent", [], False)
    assert run.fallbacks[0] == ("layout_planner_agent", "research_evidence_agent", "cap")
    assert run.state["capped"] == ["layout_planner_agent"]
    assert not run.state.get("given_up")
    assert models.count("layout_planner_agent") == 2
    assert run.state["review_feedback"]["approved"] is True


async def test_a_tool_loop_in_a_parallel_step_runs_within_its_agents_turn(
    tmp_path: Path,
) -> None:
    models = FakeModels({**happy_team(2), "supervisor": planning_supervisor})
    tasks: dict[int, list[str]] = {}
    values: dict[str, Any] = {}
    async for mode, chunk in build_team().astream(
        {"request": REQUEST, "image_count": 2},
        context=fake_context(models, tmp_path),
        stream_mode=["debug", "values"],
    ):
        if mode == "values":
            values = chunk
        elif chunk["type"] == "task":
            tasks.setdefault(chunk["step"], []).append(chunk["payload"]["name"])

    # Research searched and wrote its pack, and the cards were drawn, each within the
    # step it started in: the rounds are its subgraph's supersteps, not the team's, and
    # only the artefacts came back (no transcript in the team's state).
    names = [name for step in tasks.values() for name in step]
    assert "research_evidence_tools" not in names and "image_tools" not in names
    research = [c.forced_tool for c in models.calls_for("research_evidence_agent")]
    assert len(research) == 2 and research[0] == "search_knowledge"
    assert values["evidence_pack"]["summary"] and not values.get("research_messages")
    assert [i["slot"] for i in values["images"]] == [1, 2] and values["images_complete"]
    assert not values.get("image_messages")


@pytest.mark.parametrize("plans", [False, True], ids=["one-agent", "planned"])
async def test_a_tool_loop_runs_in_its_agents_subgraph(tmp_path: Path, plans: bool) -> None:
    team = happy_team(1)
    models = FakeModels(
        {**team, "supervisor": planning_supervisor if plans else team["supervisor"]}
    )
    tasks: list[tuple[str, str]] = []
    async for namespace, chunk in build_team().astream(
        {"request": REQUEST, "image_count": 1},
        context=fake_context(models, tmp_path),
        stream_mode="debug",
        subgraphs=True,
    ):
        if chunk["type"] == "task":
            tasks.append(
                (namespace[0].split(":")[0] if namespace else "", chunk["payload"]["name"])
            )

    assert [name for where, name in tasks if where == "research_evidence_agent"] == [
        "research_evidence_agent",
        "research_evidence_tools",
        "research_evidence_agent",
    ]
    assert [name for where, name in tasks if where == "image_agent"] == [
        "image_agent",
        "image_tools",
        "image_agent",
    ]
    team_nodes = {name for where, name in tasks if not where}
    assert not {"research_evidence_tools", "image_tools"} & team_nodes


async def test_no_agent_of_a_step_waits_on_a_neighbours_supersteps(tmp_path: Path) -> None:
    # Over the real client: the reference analysis answers late, and research runs both of
    # its rounds (search, then the pack) while it is still out.
    late = 1.5
    answer = team_responder({**happy_team(1), "supervisor": planning_supervisor})
    arrived: dict[str, list[float]] = {}

    def respond(req: ChatRequest) -> ScriptedReply:
        role = req.forced_tool or ("research" if "EvidencePack" in req.tools else "other")
        arrived.setdefault(role, []).append(time.monotonic())
        reply = answer(req)
        return ScriptedReply.delay(late, reply) if role == "ReferenceAnalysis" else reply

    with ScriptedOpenAIServer(respond) as server:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_base_url=server.base_url,
            llm_api_key="test-key",  # type: ignore[arg-type]
            llm_max_retries=0,
            llm_timeout=20,
        )
        ctx = fake_context(OpenAIModelFactory(settings), tmp_path)
        run = await run_team(None, tmp_path, ctx=ctx, image_count=1)

    assert run.state["evidence_pack"]["summary"] and run.state["reference_analyses"]
    (reference,) = arrived["ReferenceAnalysis"]
    (search,) = arrived["search_knowledge"]
    (pack,) = arrived["research"]
    assert reference - late / 2 < search < pack < reference + late - 0.3


async def test_a_plan_in_short_names_runs_as_in_full_names(tmp_path: Path) -> None:
    full = await run_team(
        FakeModels({**happy_team(1), "supervisor": planning_supervisor}), tmp_path / "full"
    )
    models = FakeModels({**happy_team(1), "supervisor": short_planning_supervisor})
    short = await run_team(models, tmp_path / "short")

    assert models.count("supervisor") == 1
    assert route_events(short.events) == route_events(full.events)
    # Recorded and reported in full names.
    assert short.of_type("supervisor.route")[0]["plan"] == NORMAL_PLAN
    for field in ARTEFACTS:
        assert short.state[field] == full.state[field], field


def test_short_names_map_to_the_agents_in_the_rosters_order() -> None:
    assert list(PLAN_NAMES.values()) == list(AGENTS)
    assert "、".join(PLAN_NAMES) in SYSTEM
    assert plan_steps(["brief", ["research", "research_evidence_agent", "poet"], "END"]) == [
        ["brief_compiler_agent"],
        ["research_evidence_agent", "poet"],
        ["END"],
    ]


async def test_steps_that_add_nothing_end_the_team_as_capped(tmp_path: Path) -> None:
    stuck = planned(next_agent="brief_compiler_agent", plan=["poet", ["x"], "nonsense"])
    models = FakeModels({**happy_team(1), "supervisor": stuck})
    run = await run_team(models, tmp_path, image_count=1)

    # The brief, a plan step of no agent, the brief again with nothing new, another
    # such plan step: three steps in a row added nothing, and the team stops there,
    # without asking the model a third time.
    assert models.count("supervisor") == 2 and models.count("brief_compiler_agent") == 2
    assert run.fallbacks[-1] == ("poet", "__end__", "cap")
    assert run.state["stalled"] and "3 steps" in run.state["stalled"]
    assert run.state["team_log"][-1]["routed"] == "__end__"
    assert run.state["creative_brief"] and not run.state.get("generated_content")


async def test_junk_in_the_plan_does_not_stop_a_supervisor_that_makes_progress(
    tmp_path: Path,
) -> None:
    def junk_plan(messages: list[BaseMessage]) -> AIMessage:
        args = dict(happy_supervisor(messages).tool_calls[0]["args"])
        return planned(**{**args, "plan": ["poet"], "parallel_agents": ["painter"]})

    models = FakeModels({**happy_team(1), "supervisor": junk_plan})
    run = await run_team(models, tmp_path, image_count=1)

    # Every junk plan step is refused and the model asked again, but each step before it
    # made something: the post is finished and the team was never stopped.
    assert not run.state.get("stalled")
    assert run.state["review_feedback"]["approved"] is True
    assert len(run.state["images"]) == 1
