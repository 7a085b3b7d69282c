"""A scripted LLM for the real `atelier` pipeline, served over the OpenAI wire.

`atelier_responder()` answers every role of the pipeline on the normal path — the
planner's intent, the eight agents and the supervisor of the team (the happy
team of `tests.support.fake_models`), and a passing judge — telling roles apart
by the tool a request forces or binds, as the real model factory sends them. The
writer's answer streams in chunks, so `messages-tuple` carries tokens.

`writer_delay` and `writer_chunk_delay` make the writer take its time (the console tests).
`team_responder()` answers the team alone (the team-over-the-wire test).
`planning_supervisor` plans the whole normal path in its first decision, with the
agents whose inputs are ready started together (`atelier_responder(plans=True)`,
the time-to-post bench); `short_planning_supervisor` writes that plan in the
agents' short names (`short_names=True`, the bench's side of today's code).
`drifting_supervisor(shape)` answers like a model that drifts from the format in one
of the `DRIFT_SHAPES` (the drifting-supervisor tests, issue 32).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from tests.graphs.pipeline_runs import judge_reply, planner_reply
from tests.support.fake_models import happy_supervisor, happy_team, tool_call
from tests.support.scripted_openai import ChatRequest, Reply

#: The steps after the brief on the normal path, each the agents that only need what the
#: steps before made: research, references and layout read the brief; the image planner
#: reads the layout and the writer the evidence; the cards are drawn while the review
#: reads the text.
NORMAL_PLAN: list[list[str]] = [
    ["research_evidence_agent", "reference_intelligence_agent", "layout_planner_agent"],
    ["image_planner_agent", "writer_agent"],
    ["image_agent", "review_agent"],
]


def planning_supervisor(messages: list[BaseMessage]) -> AIMessage:
    """Decide as `happy_supervisor`, planning the rest of the normal path at the first step.

    When the brief is the stage missing (nothing made yet), the decision names it
    and the plan `NORMAL_PLAN`; every later decision (a plan stopped by a check, a
    failure or a rejecting review) is the happy one: the first missing stage.
    """
    reply = happy_supervisor(messages)
    args = dict(reply.tool_calls[0]["args"])
    if args["next_agent"] == "brief_compiler_agent":
        return tool_call("SupervisorDecision", **args, plan=NORMAL_PLAN)
    return reply


#: `NORMAL_PLAN` in the short names the supervisor's prompt offers (`agentkit.routing.PLAN_NAMES`).
SHORT_PLAN: list[list[str]] = [
    ["research", "reference", "layout"],
    ["image_planner", "writer"],
    ["image", "review"],
]


def short_planning_supervisor(messages: list[BaseMessage]) -> AIMessage:
    """Decide as `planning_supervisor`, writing the plan in short names (`SHORT_PLAN`)."""
    reply = planning_supervisor(messages)
    args = dict(reply.tool_calls[0]["args"])
    if "plan" in args:
        return tool_call("SupervisorDecision", **{**args, "plan": SHORT_PLAN})
    return reply


#: The agent a drifting supervisor keeps naming.
REPEATED = "brief_compiler_agent"
_JUNK_PLAN: list[Any] = ["poet", ["x", "y"], "nonsense"]

#: How a drifting supervisor answers every decision: the shape's name → the decision's
#: fields (`next_agent` the repeated agent unless the shape says otherwise).
DRIFT_SHAPES: dict[str, dict[str, Any]] = {
    # the same agent again and again, nothing else
    "repeating": {},
    # a plan of names that are no agents
    "junk_plan": {"plan": _JUNK_PLAN},
    # parallel agents that are no agents
    "junk_parallel": {"parallel_agents": ["poet", "painter"]},
    # junk in every optional field
    "junk_everywhere": {
        "guidance": "}}{{ ~~ " * 40,
        "context_from_previous": "垃圾" * 300,
        "focus_areas": ["~~"] * 8,
        "parallel_agents": ["poet", "zz"],
        "plan": ["??", ["END", "x"], "poet"],
    },
    # the same agent with a real one alongside it every time
    "repeating_with_a_neighbour": {"parallel_agents": ["layout_planner_agent"]},
    # the 276-call post: a real neighbour, a junk one, a junk plan
    "mixed": {"parallel_agents": ["layout_planner_agent", "poet"], "plan": ["junk"]},
    # two agents in turn, neither adding anything after its first turn
    "alternating": {"alternate": ["brief_compiler_agent", "layout_planner_agent"]},
    # fields beyond their bounds: no decision parses at all
    "beyond_bounds": {"plan": ["poet"] * 30, "guidance": "长" * 5000},
}


def drifting_supervisor(shape: str) -> Callable[[list[BaseMessage]], AIMessage]:
    """Return a supervisor that answers every decision in the drift `shape` (`DRIFT_SHAPES`)."""
    fields = dict(DRIFT_SHAPES[shape])
    turns = fields.pop("alternate", None)
    count = 0

    def respond(_messages: list[BaseMessage]) -> AIMessage:
        nonlocal count
        agent = turns[count % len(turns)] if turns else REPEATED
        count += 1
        args = {"guidance": "", "focus_areas": [], "next_agent": agent, **fields}
        return tool_call("SupervisorDecision", **args)

    return respond


def _as_messages(req: ChatRequest) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for item in req.messages:
        content = item.get("content") or ""
        text = content if isinstance(content, str) else str(content)
        role = item.get("role")
        if role in ("system", "developer"):
            messages.append(SystemMessage(text))
        elif role == "user":
            messages.append(HumanMessage(text))
        elif role == "tool":
            messages.append(ToolMessage(text, tool_call_id=item.get("tool_call_id", "")))
        else:
            messages.append(AIMessage(text))
    return messages


def _bridge(responder: Any, *, chunk_chars: int = 8) -> Callable[[ChatRequest], Reply]:
    def respond(req: ChatRequest) -> Reply:
        reply = responder(_as_messages(req)) if callable(responder) else responder
        if isinstance(reply, str):
            return Reply.text(reply, chunk_chars=chunk_chars)
        if reply.tool_calls:
            return Reply.tool_calls([(c["name"], c["args"]) for c in reply.tool_calls])
        return Reply.text(str(reply.content), chunk_chars=chunk_chars)

    return respond


def team_responder(
    team: dict[str, Any],
    *,
    writer_chunk_chars: int = 8,
    forced: dict[str, Callable[[ChatRequest], Reply]] | None = None,
    writer_wrap: Callable[[Reply], Reply] | None = None,
) -> Callable[[ChatRequest], Reply]:
    """Answer each request as the team's role that sent it (a fake-model team script).

    Roles are told apart by the tool a request forces or binds, as the real model
    factory sends them; `forced` adds answers for more forced tools (the planner's,
    the judge's), and `writer_wrap` may change the writer's reply (delays).
    """
    research = _bridge(team["research_evidence_agent"])
    by_forced = {
        "CreativeBrief": _bridge(team["brief_compiler_agent"]),
        "ReferenceAnalysis": _bridge(team["reference_intelligence_agent"]),
        "LayoutSpec": _bridge(team["layout_planner_agent"]),
        "ImagePlans": _bridge(team["image_planner_agent"]),
        "ReviewResult": _bridge(team["review_agent"]),
        "search_knowledge": research,
        "EvidencePack": research,
        **(forced or {}),
    }
    supervisor = _bridge(team["supervisor"])
    images_agent = _bridge(team["image_agent"])
    writer = _bridge(team["writer_agent"], chunk_chars=writer_chunk_chars)

    def respond(req: ChatRequest) -> Reply:
        if req.forced_tool in by_forced:
            return by_forced[req.forced_tool](req)
        if "SupervisorDecision" in req.tools:
            return supervisor(req)
        if "EvidencePack" in req.tools:
            return research(req)
        if "generate_image" in req.tools:
            return images_agent(req)
        if not req.tools:
            reply = writer(req)
            return writer_wrap(reply) if writer_wrap is not None else reply
        return Reply.error(500, f"unscripted request with tools {req.tools}", retry=False)

    return respond


def atelier_responder(
    *,
    images: int = 1,
    writer_delay: float = 0.0,
    writer_chunk_delay: float = 0.0,
    plans: bool = False,
    short_names: bool = False,
    supervisor: Any = None,
    judge: Any = None,
) -> Callable[[ChatRequest], Reply]:
    """Return a responder for the whole pipeline's normal path.

    Args:
        images: Images the image planner plans (and the image agent draws).
        writer_delay: Seconds the writer waits before answering.
        writer_chunk_delay: Seconds between the writer's streamed chunks.
        plans: The supervisor plans ahead with steps run together (`planning_supervisor`).
        short_names: Its plan names the agents by their short names
            (`short_planning_supervisor`), as today's supervisor prompt asks.
        supervisor: Another supervisor (e.g. `drifting_supervisor(shape)`).
        judge: Another judge's answer (default: a passing `judge_reply()`).
    """

    def delayed(reply: Reply) -> Reply:
        return Reply.delay(writer_delay, reply, per_chunk=writer_chunk_delay)

    team = happy_team(images)
    if plans:
        team["supervisor"] = short_planning_supervisor if short_names else planning_supervisor
    if supervisor is not None:
        team["supervisor"] = supervisor
    return team_responder(
        team,
        writer_chunk_chars=4,
        forced={
            "PlannerIntent": _bridge(planner_reply()),
            "JudgeVerdict": _bridge(judge if judge is not None else judge_reply()),
        },
        writer_wrap=delayed if writer_delay or writer_chunk_delay else None,
    )
