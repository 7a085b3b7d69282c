"""A drifting supervisor stays cheap and ends honestly, whatever the judge says (issue 32).

The real pipeline over the real OpenAI client against the scripted model of
`tests.app.atelier_llm`, its supervisor drifting in one of `DRIFT_SHAPES`: naming the
same agent again and again, with junk in its plan, its parallel agents or every
optional field, or a mix (the 276-call post of the last round). Calls are counted at
the scripted model. Each shape runs with a judge that passes and with one that never
does (every attempt retried): a normal-mode run calls the repeated agent at most 10
times, makes fewer than 60 LLM calls, and ends with a verdict that says what happened —
a post that the judge passed, or exhausted / failed with the reason, never a pass it
did not give. A team stopped for lack of progress is not retried; a run whose
supervisor drifted does not ask it again in its later attempts (the stage order makes
them), while a healthy supervisor is asked in every attempt.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from core.agents import AGENTS
from core.settings import Settings
from graphs.pipeline import build_pipeline
from nodes.finalize import DRIFTED_LATER, DRIFTED_NOTE, STALLED_MESSAGE
from providers.llm import OpenAIModelFactory
from tests.app.atelier_llm import DRIFT_SHAPES, REPEATED, atelier_responder, drifting_supervisor
from tests.graphs.pipeline_runs import (
    REQUEST,
    PipelineRun,
    context_for,
    judge_reply,
    models_for,
    run_pipeline,
)
from tests.graphs.team_runs import run_team
from tests.graphs.test_pipeline_drift import by_attempt
from tests.support.fake_models import FakeModels, decision, garbage, happy_team, tool_call
from tests.support.scripted_openai import ChatRequest, ScriptedOpenAIServer

pytestmark = pytest.mark.timeout(180)

#: The most calls of the repeated agent, and (exclusive) of all roles, a run may make.
MAX_REPEATED_CALLS = 10
MAX_CALLS = 60

#: Shapes whose steps keep adding nothing: the team stops early and the run fails.
STALLING = {"junk_plan", "junk_everywhere", "mixed", "alternating"}

#: The judges each shape runs with: one that passes the post, one that never does.
JUDGES: dict[str, AIMessage | None] = {
    "passing": None,
    "never_passing": judge_reply("needs_improvement", 0.5),
}

_FORCED_ROLES = {
    "PlannerIntent": "planner",
    "JudgeVerdict": "critic",
    "SupervisorDecision": "supervisor",
    "CreativeBrief": "brief_compiler_agent",
    "EvidencePack": "research_evidence_agent",
    "search_knowledge": "research_evidence_agent",
    "ReferenceAnalysis": "reference_intelligence_agent",
    "LayoutSpec": "layout_planner_agent",
    "ImagePlans": "image_planner_agent",
    "ReviewResult": "review_agent",
}


def role_of(req: ChatRequest) -> str:
    """Name the role that sent a request, by the tool it forces or binds."""
    if req.forced_tool:
        return _FORCED_ROLES.get(req.forced_tool, req.forced_tool)
    if "SupervisorDecision" in req.tools:
        return "supervisor"
    if "EvidencePack" in req.tools:
        return "research_evidence_agent"
    if "generate_image" in req.tools:
        return "image_agent"
    return "writer_agent" if not req.tools else "other"


async def run_drifting(
    shape: str | None, root: Path, judge: Any = None
) -> tuple[PipelineRun, list[str]]:
    """Run the README's request in normal mode, the supervisor drifting in `shape`.

    `shape` None keeps the healthy supervisor. Returns the run and the roles of the
    requests the scripted model answered, in order.
    """
    supervisor = drifting_supervisor(shape) if shape else None
    responder = atelier_responder(supervisor=supervisor, judge=judge)
    with ScriptedOpenAIServer(responder) as server:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_base_url=server.base_url,
            llm_api_key="test-key",  # type: ignore[arg-type]
            llm_max_retries=0,
            llm_timeout=20,
        )
        ctx = context_for(OpenAIModelFactory(settings), root)
        run = await run_pipeline(None, root, ctx=ctx, auto_confirm=True)
        roles = [role_of(req) for req in server.requests]
    return run, roles


def stops(run: PipelineRun) -> list[dict[str, Any]]:
    """Return the fallbacks that ended the team because its steps added nothing."""
    return [
        e
        for _, e in run.events
        if e["type"] == "agent.fallback" and e["to"] == "__end__" and "added nothing" in e["detail"]
    ]


def verdicts(run: PipelineRun) -> list[dict[str, Any]]:
    """Return the critic's verdicts, one per attempt."""
    return [e for _, e in run.events if e["type"] == "critic.verdict"]


@pytest.mark.parametrize("judge", list(JUDGES))
@pytest.mark.parametrize("shape", list(DRIFT_SHAPES))
async def test_a_drifting_supervisor_stays_cheap_and_ends_honestly(
    tmp_path: Path, shape: str, judge: str
) -> None:
    run, roles = await run_drifting(shape, tmp_path, JUDGES[judge])
    calls = Counter(roles)
    result = run.result
    print(f"{shape}, {judge} judge: {len(roles)} calls, {calls[REPEATED]} {REPEATED}; {calls}")

    assert calls[REPEATED] <= MAX_REPEATED_CALLS, calls
    assert len(roles) < MAX_CALLS, calls
    assert calls["planner"] == 1
    # Routing had to take the team over from its supervisor, and the run kept that.
    assert run.state["drifted"], run.state.get("team_log")
    judged = verdicts(run)
    assert all(v["passed"] == (v["verdict"] == "passed") for v in judged)
    if shape in STALLING:
        # The team stopped as capped, said so on the stream, and the attempt was not
        # retried, whatever the judge would say of another.
        assert stops(run) and all(e["reason"] == "cap" for e in stops(run))
        assert len(judged) == 1 and judged[0]["next"] == "finalize"
        assert not judged[0]["passed"]
        assert result["outcome"] in ("exhausted", "failed"), result
        assert result["message"].startswith(STALLED_MESSAGE)
    elif judge == "passing":
        # Routing took the stuck turns over and the team made the whole post, which the
        # judge then passed: the pass is the judge's, on a real post.
        assert not stops(run) and len(judged) == 1
        assert result["outcome"] == "completed", result["message"]
        assert result["quality"]["verdict"] == "passed" and result["quality"]["judge"] == "ok"
        assert result["post"]["blocks"] and len(result["images"]) == 1
        assert result["message"].endswith(DRIFTED_NOTE.format(later=""))
    else:
        # Every attempt ran and none passed: exhausted with the best post, and the
        # message says the judge never passed it and who routed the team.
        assert len(judged) == 4 and not any(v["passed"] for v in judged)
        assert [v["next"] for v in judged] == ["rag", "rag", "rag", "finalize"]
        assert result["outcome"] == "exhausted" and result["quality"]["exhausted"] is True
        assert result["quality"]["verdict"] == "needs_improvement"
        assert result["message"].startswith("尝试了 4 次")
        assert result["message"].endswith(DRIFTED_NOTE.format(later=DRIFTED_LATER))
        # The later attempts did not ask the supervisor: the stage order made each post,
        # every turn an agent.fallback that says why.
        assert "supervisor" not in roles[roles.index("critic") :]
        _first, *later = by_attempt(run)
        assert len(later) == 3
        for events in later:
            assert not [e for e in events if e["type"] == "supervisor.route"]
            turns = [e for e in events if e["type"] == "agent.fallback"]
            assert [t["to"] for t in turns] == list(AGENTS)
            assert all(t["from"] == "supervisor" for t in turns)
            assert all(run.state["drifted"] in t["detail"] for t in turns)


async def test_a_healthy_supervisor_is_asked_in_every_attempt(tmp_path: Path) -> None:
    # "Never good enough" (cases/cycles.md 3): 1 + MAX_RETRY_COUNT attempts, each routed
    # by the supervisor as usual: nothing it did was drift.
    run, roles = await run_drifting(None, tmp_path, judge_reply("needs_improvement", 0.5))

    assert len(verdicts(run)) == 4 and run.result["outcome"] == "exhausted"
    assert not run.state.get("drifted")
    assert "调度模型" not in run.result["message"]
    attempts = " ".join(roles).split("critic")[:4]
    asked = [part.split().count("supervisor") for part in attempts]
    assert asked[0] >= len(AGENTS) and len(set(asked)) == 1, asked
    assert not [e for _, e in run.events if e["type"] == "agent.fallback"]


async def test_a_new_run_on_the_thread_asks_its_supervisor_again(tmp_path: Path) -> None:
    # The first run's supervisor drifts; the thread's next run starts trusting its own.
    models = models_for(judge_reply("needs_improvement", 0.5))
    models.script("supervisor", decision("layout_planner_agent"))
    graph = build_pipeline(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "drift"}}
    first = await run_pipeline(models, tmp_path, graph=graph, config=config)
    assert first.state["drifted"] and len(verdicts(first)) == 4
    asked = models.count("supervisor")

    healthy = models_for(judge_reply())
    payload = {"request": REQUEST, "image_count": 1}
    second = await run_pipeline(healthy, tmp_path, graph=graph, config=config, payload=payload)
    assert second.result["outcome"] == "completed"
    assert second.state["drifted"] is None
    assert healthy.count("supervisor") >= len(AGENTS) and models.count("supervisor") == asked


# --- the team on its own, told that the run's supervisor drifted ----------------------------

DRIFTED = "brief_compiler_agent chosen repeatedly without progress"


def no_supervisor(team: dict[str, Any]) -> FakeModels:
    """Return the fake team without a supervisor script: asking it fails the test."""
    return FakeModels({role: reply for role, reply in team.items() if role != "supervisor"})


def review(low: str | None) -> AIMessage:
    """Return a review approving the draft, or rejecting it for `low` scoring 0.3."""
    dims = dict.fromkeys(
        ("infoDensity", "textImageAlignment", "styleConsistency", "readability", "platformFit"),
        0.85,
    )
    if low:
        dims[low] = 0.3
    return tool_call(
        "ReviewResult",
        approved=low is None,
        score=0.5 if low else 0.9,
        issues=[f"{low} 太低"] if low else [],
        suggestions=[],
        dimensions=dims,
    )


async def test_a_drifted_team_makes_the_post_in_stage_order_without_asking(
    tmp_path: Path,
) -> None:
    models = no_supervisor(happy_team(1))
    run = await run_team(models, tmp_path, image_count=1, supervisor_drifted=DRIFTED)

    assert models.count("supervisor") == 0
    assert run.fallbacks == [("supervisor", agent, "cap") for agent in AGENTS]
    assert all(DRIFTED in e["detail"] for e in run.of_type("agent.fallback"))
    assert not run.of_type("supervisor.route")
    # The review passed and ended the team; the team reports the drift it was given.
    assert run.state["generated_content"]["body"] and len(run.state["images"]) == 1
    assert run.state["drifted"] == DRIFTED and not run.state.get("stalled")
    assert run.state["team_step"] == len(AGENTS)
    assert all(entry["autopilot"] for entry in run.state["team_log"])


async def test_a_drifted_team_fixes_a_rejecting_review_once_then_ends(tmp_path: Path) -> None:
    # The review rejects for platform fit twice: the writer revises once, the review
    # judges the new draft, and the team ends for the critic to judge.
    team = happy_team(1)
    drafts = iter([str(team["writer_agent"]), str(team["writer_agent"]) + " #修订版"])
    models = no_supervisor(
        {
            **team,
            "writer_agent": lambda _m: next(drafts),
            "review_agent": [review("platformFit")] * 2,
        }
    )
    run = await run_team(models, tmp_path, image_count=1, supervisor_drifted=DRIFTED)

    assert models.count("supervisor") == 0 and models.count("review_agent") == 2
    assert run.fallbacks == [
        *[("supervisor", agent, "cap") for agent in AGENTS],
        ("supervisor", "writer_agent", "quality"),
        ("supervisor", "review_agent", "cap"),
        ("supervisor", "__end__", "cap"),
    ]
    assert run.state["review_feedback"]["approved"] is False
    assert "修订版" in str(run.state["generated_content"])


async def test_a_drifted_team_gives_each_agent_one_try(tmp_path: Path) -> None:
    # A research model that never fills the pack is tried once; the rest of the post is
    # still made, and the review judges it.
    models = no_supervisor({**happy_team(1), "research_evidence_agent": garbage()})
    run = await run_team(models, tmp_path, image_count=1, supervisor_drifted=DRIFTED)

    tried = [to for _, to, _ in run.fallbacks]
    assert tried.count("research_evidence_agent") == 1
    assert tried == [*AGENTS]
    assert run.state["generated_content"]["body"] and run.state["review_feedback"]
