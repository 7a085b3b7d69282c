"""The supervisor: decides which agent of the team works next, and may plan the steps after.

A decision (PRODUCT.md §1.2) names `next_agent`; optionally `parallel_agents` to
start alongside it and a `plan`, the steps that follow (each one agent or several
started together). The team runs the plan without asking again until it ends, an
agent's output fails its check, the review rejects, or a check refuses a step
(`agentkit.routing.next_plan_step`). A decision with `next_agent` alone routes one
agent, exactly as before the two fields existed.

A run whose supervisor drifted in an earlier attempt (`supervisor_drifted`) does
not ask it again: each turn follows the stage order (`agentkit.routing.autopilot_route`),
an `agent.fallback` on the stream. The first turn routing has to take over for lack of
progress records why (`drifted`).

The prompt shows a compact status: the stage table (what exists, what was given
up), the agents whose output failed, the last guidance, and of the run's context
(request, constraints, notes, retry, brief) only what this team run has not shown
the supervisor yet or what changed since (`supervisor_seen`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, cast

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.graph import END
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.common import (
    from_transcript,
    ignores_optional_tools,
    mark_ignores_optional_tools,
    parse_tool_call,
    render_context,
    to_transcript,
    tool_spec,
)
from agentkit.context import AtelierContext, context_of
from agentkit.limits import limits_of
from agentkit.routing import (
    PLAN_NAMES,
    PlanStep,
    Route,
    SupervisorTarget,
    admit,
    artefact_digest,
    autopilot_route,
    capped,
    check_basic_preconditions,
    drift_detail,
    end_allowed,
    first_missing_stage,
    given_up,
    next_plan_step,
    plan_name,
    plan_steps,
    quality_fallback,
    resolve_route,
    stage_done,
    stall_detail,
    stall_limit,
    stalled_steps,
)
from agentkit.state import TeamLogEntry, TeamState
from agentkit.tools import search_knowledge
from core.agents import AGENT_TABLE, AGENTS
from core.events import AgentFallback, SupervisorRoute, emit
from prompts import supervisor as prompt
from prompts.common import system_prompt

#: The supervisor's role text, with the short names its plans use (in the roster's order).
SYSTEM = prompt.SYSTEM.format(short_names="、".join(PLAN_NAMES))


class SupervisorDecision(BaseModel):
    """Choose which agent of the team works next, or END when the post is done."""

    # A plain str (with the allowed names as a JSON-schema enum, so grammar-constrained
    # servers emit only those) lets an unknown name be recorded and reported as such
    # instead of vanishing in a validation error.
    next_agent: str = Field(
        description="Next agent name, or END.",
        json_schema_extra={"enum": [*AGENTS, "END"]},
        max_length=64,
    )
    guidance: str = Field(default="", max_length=2000, description="Instructions for that agent.")
    context_from_previous: str = Field(
        default="", max_length=2000, description="What it needs to know from earlier steps."
    )
    focus_areas: list[str] = Field(
        default_factory=list, max_length=8, description="Aspects to focus on."
    )
    parallel_agents: list[str] = Field(
        default_factory=list,
        max_length=len(AGENTS) - 1,
        description=(
            "Further agents to start together with next_agent (their inputs ready); "
            "short names allowed."
        ),
        json_schema_extra={"items": {"type": "string", "enum": [*AGENTS, *PLAN_NAMES]}},
    )
    plan: list[str | list[str]] = Field(
        default_factory=list,
        max_length=len(AGENTS) + 1,
        description=(
            "The steps after this one, in order: an agent's short name, a list of them "
            "to run together, or END last."
        ),
    )


def stage_status(state: TeamState) -> str:
    """Render ✅/❌ per produced field, the table the supervisor decides from."""
    lines = []
    skipped, stuck = given_up(state), capped(state)
    for agent in AGENTS:
        done = stage_done(agent, state)
        mark = "✅" if done else "❌"
        note = "，已放弃：多次没有可用产出，不要再选" if agent in skipped and not done else ""
        if agent in stuck and done:
            note = "，已完成：重复选择没有新进展，不要再选"
        lines.append(f"{mark} {AGENT_TABLE[agent].output}（{agent}{note}）")
    review = state.get("review_feedback")
    if review and not review.get("approved"):
        scores = state.get("quality_scores") or {}
        lines.append(f"审核未通过：问题 {review.get('issues', [])[:5]}；维度分数 {scores}")
    return "\n".join(lines)


def suggested_next(state: TeamState, threshold: float) -> str:
    """Suggest the normal next step: the first missing stage, a quality fix, or END.

    Only a hint in the prompt — the supervisor decides — but it keeps a small model
    that cannot weigh the dependency rules on the usual path.
    """
    missing = first_missing_stage(state)
    if missing is not None:
        return check_basic_preconditions(missing, state)
    if end_allowed(state):
        return "END"
    return quality_fallback(state.get("quality_scores"), threshold) or "writer_agent"


def _notice(state: TeamState) -> str:
    """Explain why the supervisor is asked again, if the last turn was corrected."""
    log = state.get("team_log") or []
    if not log or log[-1]["routed"] != "supervisor":
        return ""
    last = log[-1]
    return f"注意：上一次的决定没有被执行（{last['detail']}）。请给出有效的决定。"


#: The context sections the supervisor is shown (each once per team run unless it changes).
CONTEXT_SECTIONS = ("request", "constraints", "notes", "retry", "brief")


def compact_context(state: TeamState) -> tuple[str, dict[str, str]]:
    """Render the context sections the supervisor has not seen unchanged in this team run.

    Returns the text and the fingerprints of every section shown so far: a
    section seen with the same content is named in one line instead of repeated.
    """
    seen = dict(state.get("supervisor_seen") or {})
    shown, kept = [], []
    for name in CONTEXT_SECTIONS:
        text = render_context(state, (name,))
        if not text:
            continue
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]
        if seen.get(name) == digest:
            kept.append(name)
        else:
            shown.append(text)
            seen[name] = digest
    if kept:
        shown.append(prompt.UNCHANGED.format(sections="、".join(kept)))
    return "\n\n".join(shown), seen


def _errors(state: TeamState) -> str:
    """List the agents whose last output could not be used, if any."""
    errors = state.get("agent_errors") or []
    return prompt.ERRORS.format(errors="；".join(errors[-4:])) if errors else ""


async def supervisor(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Take the plan's next step, or ask the supervisor LLM; record where routing sends the run.

    After a parallel or planned step (`team_group`; the node runs once, after every
    agent of the step, each one superstep of the team) the plan goes on without a
    model call while `agentkit.routing.next_plan_step` allows; otherwise the plan is
    dropped and the model decides (a refusal that stopped the plan is reported as a
    fallback and shown to the model as the notice on why it is asked). Once
    `stall_limit` steps in a row added nothing (`stalled_steps`) the team stops
    without asking the model again. When the run's supervisor drifted in an
    earlier attempt, every turn follows the stage order instead (`_autopilot`).
    """
    writer = runtime.stream_writer
    if state.get("supervisor_drifted"):
        return _autopilot(state, writer)
    stalled = _stalled(state)
    if stalled:
        return _stop(state, stalled, writer)
    if not state.get("team_group") or state.get("supervisor_messages"):
        return await _decide(state, runtime)
    planned = next_plan_step(state)
    if planned.targets[0] != "supervisor":
        return _take_step(state, planned, writer)
    reset: dict[str, Any] = {"team_group": None, "team_plan": [], "team_route": None}
    refused = planned.refused
    if refused is not None:
        _fallback(writer, refused.requested, "supervisor", refused)
        entry: TeamLogEntry = {
            "step": int(state.get("team_step") or 0),
            "requested": refused.requested,
            "routed": "supervisor",
            "reason": refused.reason,
            "detail": refused.detail,
            "guidance": "",
            "focus_areas": [],
            "digest": artefact_digest(state),
            "planned": True,
        }
        reset["team_log"] = [*(state.get("team_log") or []), entry]
        reset.update(_caps(state, refused))
    merged = cast(TeamState, {**state, **reset})
    stalled = _stalled(merged)
    if stalled:
        return {**reset, **_stop(merged, stalled, writer)}
    return {**reset, **await _decide(merged, runtime)}


def _stalled(state: TeamState) -> int:
    """Return how many steps in a row added nothing, once that reaches `stall_limit` (else 0)."""
    turn = {**state, "team_step": int(state.get("team_step") or 0) + 1}  # the turn to decide
    stalled = stalled_steps(turn)
    return stalled if stalled >= stall_limit(limits_of(state)) else 0


def _stop(state: TeamState, stalled: int, writer: Any) -> dict[str, Any]:
    """End the team's loop as capped: its steps keep adding nothing (no model call)."""
    log = state.get("team_log") or []
    requested = log[-1]["requested"] if log else ""
    detail = stall_detail(stalled)
    route = Route(cast(SupervisorTarget, END), requested, "cap", detail)
    _fallback(writer, requested or "(invalid)", END, route)
    entry: TeamLogEntry = {
        "step": int(state.get("team_step") or 0),
        "requested": requested,
        "routed": END,
        "reason": "cap",
        "detail": detail,
        "guidance": "",
        "focus_areas": [],
        "digest": artefact_digest(state),
    }
    return {
        "team_group": None,
        "team_plan": [],
        "team_route": [END],
        "team_log": [*log, entry],
        "supervisor_messages": None,
        "supervisor_tool_rounds": 0,
        "stalled": detail,
        "drifted": state.get("drifted") or detail,
    }


def _autopilot(state: TeamState, writer: Any) -> dict[str, Any]:
    """Take the next turn by the stage order, the run's supervisor having drifted (no model call).

    The turn is an `agent.fallback` from `supervisor` saying why; it counts as a
    team step and is logged as one (`autopilot`).
    """
    route = autopilot_route(state)
    _fallback(writer, route.requested, route.target, route)
    step = int(state.get("team_step") or 0) + (route.target in AGENTS)
    entry: TeamLogEntry = {
        "step": step,
        "requested": "",
        "routed": route.target,
        "reason": route.reason,
        "detail": route.detail,
        "guidance": "",
        "focus_areas": [],
        "digest": artefact_digest(state),
        "autopilot": True,
    }
    return {
        "team_step": step,
        "team_group": None,
        "team_plan": [],
        "team_route": [route.target],
        "team_log": [*(state.get("team_log") or []), entry],
        "supervisor_messages": None,
        "supervisor_tool_rounds": 0,
        "drifted": state.get("supervisor_drifted"),
    }


def _take_step(state: TeamState, planned: PlanStep, writer: Any) -> dict[str, Any]:
    """Start the plan's next step (or end the team) without asking the model."""
    targets = list(planned.targets)
    if planned.refused is not None:  # the step cap
        _fallback(writer, planned.refused.requested, targets[0], planned.refused)
    if targets[0] not in AGENTS:
        return {"team_group": None, "team_plan": [], "team_route": targets}
    step = int(state.get("team_step") or 0) + 1
    plan = plan_steps(state.get("team_plan"))[1:]
    emit(
        writer,
        SupervisorRoute(
            next_agent=targets[0],
            step=step,
            parallel_agents=targets[1:],
            plan=plan,
            planned=True,
        ),
    )
    entry: TeamLogEntry = {
        "step": step,
        "requested": targets[0],
        "routed": targets[0],
        "reason": None,
        "detail": "",
        "guidance": "",
        "focus_areas": [],
        "digest": artefact_digest(state),
        "group": targets,
        "planned": True,
    }
    return {
        "team_step": step,
        "team_group": targets,
        "team_plan": plan,
        "team_route": targets,
        "team_log": [*(state.get("team_log") or []), entry],
    }


def _caps(state: Mapping[str, Any], route: Route) -> dict[str, Any]:
    """Return the update recording the agent a route caps or gives up on, and drift (if any).

    The first route in this team run that shows the supervisor drifting
    (`agentkit.routing.drift_detail`) records why as `drifted`.
    """
    update: dict[str, Any] = {}
    if route.gives_up is not None and route.gives_up not in (state.get("given_up") or []):
        update["given_up"] = [*(state.get("given_up") or []), route.gives_up]
    if route.caps is not None and route.caps not in (state.get("capped") or []):
        update["capped"] = [*(state.get("capped") or []), route.caps]
    drift = drift_detail(route)
    if drift is not None and not state.get("drifted"):
        update["drifted"] = drift
    return update


def _fallback(writer: Any, requested: str, target: str, route: Route) -> None:
    emit(
        writer,
        AgentFallback.model_validate(
            {"from": requested, "to": target, "reason": route.reason, "detail": route.detail}
        ),
    )


async def _decide(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Ask the supervisor LLM for the next agent and record where routing sends the run."""
    ctx = context_of(runtime)
    limits = limits_of(state)
    step = int(state.get("team_step") or 0) + 1
    tool_rounds = int(state.get("supervisor_tool_rounds") or 0)
    log = state.get("team_log") or []
    context, seen = compact_context(state)

    turn = prompt.TURN.format(
        step=step,
        max_steps=limits["max_team_steps"],
        stage_status=stage_status(state),
        suggested=suggested_next(state, limits["quality_threshold"]),
        last_guidance=(log[-1]["guidance"] if log else "") or "（无）",
        notice=_notice(state),
        errors=_errors(state),
        context=context,
    )
    messages = [
        SystemMessage(system_prompt(SYSTEM)),
        HumanMessage(turn),
        *from_transcript(state.get("supervisor_messages")),
    ]
    # Look-ups are offered as optional tools. After an unparsable answer, once look-ups
    # are used up, or when this model answers optional offers in prose, the decision
    # tool is forced; a prose answer to the offer is re-asked at once (not an invalid
    # decision: the model was allowed not to call a tool).
    may_look_up = (
        tool_rounds < limits["max_supervisor_tool_rounds"]
        and not state.get("invalid_decisions")
        and not ignores_optional_tools(state, "supervisor")
    )
    model = ctx.models("supervisor")
    decision_tool = tool_spec(SupervisorDecision)
    forced = model.bind_tools([decision_tool], tool_choice="SupervisorDecision")
    shy: dict[str, Any] = {}
    if may_look_up:
        tools = [decision_tool, tool_spec(search_knowledge)]
        reply = await model.bind_tools(tools).ainvoke(messages)
        if not getattr(reply, "tool_calls", None):
            shy = mark_ignores_optional_tools(state, "supervisor")
            may_look_up = False
            reply = await forced.ainvoke(messages)
    else:
        reply = await forced.ainvoke(messages)
    calls = getattr(reply, "tool_calls", None) or []

    decision = parse_tool_call(calls, SupervisorDecision)
    lookups = [c for c in calls if c.get("name") == search_knowledge.name]
    if decision is None and lookups and may_look_up:
        message = AIMessage(content=reply.content or "", tool_calls=lookups, id=reply.id)
        return {
            "supervisor_messages": to_transcript([message]),
            "supervisor_tool_rounds": tool_rounds + 1,
            "team_route": None,
        }

    valid = decision is not None and decision.next_agent in (*AGENTS, "END")
    update: dict[str, Any] = {
        "supervisor_decision": decision.model_dump() if decision else None,
        "team_step": step,
        "invalid_decisions": 0 if valid else int(state.get("invalid_decisions") or 0) + 1,
        "supervisor_messages": None,
        "supervisor_tool_rounds": 0,
        "supervisor_seen": seen,
        "team_group": None,
        "team_plan": [],
        "team_route": None,
        **shy,
    }
    merged = {**state, **update}
    route = resolve_route(merged)
    update.update(_caps(state, route))

    writer = runtime.stream_writer
    requested = decision.next_agent if decision else ""
    group: list[str] = []
    if decision is not None and route.reason is None and route.target in AGENTS:
        group, refused = _group(route.target, decision, merged, writer)
        for left_out in refused:  # recorded as a refused plan step is (`_caps`)
            update.update(_caps({**state, **update}, left_out))
        if len(group) > 1 or decision.plan:
            update["team_group"] = group
            update["team_plan"] = plan_steps(decision.plan)
            update["team_route"] = group
    emit(
        writer,
        SupervisorRoute(
            next_agent=requested or "(invalid)",
            guidance=decision.guidance if decision else "",
            focus_areas=decision.focus_areas if decision else [],
            step=step,
            parallel_agents=group[1:],
            plan=update.get("team_plan") or [],
        ),
    )
    if route.reason is not None:
        emit(
            writer,
            AgentFallback.model_validate(
                {
                    "from": requested or "(invalid)",
                    "to": route.target,
                    "reason": route.reason,
                    "detail": route.detail,
                }
            ),
        )
    entry: TeamLogEntry = {
        "step": step,
        "requested": requested,
        "routed": route.target,
        "reason": route.reason,
        "detail": route.detail,
        "guidance": decision.guidance if decision else "",
        "focus_areas": decision.focus_areas if decision else [],
        "digest": artefact_digest(merged),
    }
    if update["team_group"]:
        entry["group"] = list(update["team_group"])
    update["team_log"] = [*log, entry]
    return update


def _group(
    target: str, decision: SupervisorDecision, state: dict[str, Any], writer: Any
) -> tuple[list[str], list[Route]]:
    """Return the agents started together (`target`, then each parallel agent `admit`s).

    A parallel agent that may not start now (unknown, its input not ready or made
    in this very step, given up on, capped, repeated without progress) is left
    out with an `agent.fallback` event; the others start. The routes that left
    one out come back too, so that one left out for repeating without progress
    is recorded as capped (and given up on while its output is missing), as a
    refused plan step is.
    """
    group = [target]
    refused: list[Route] = []
    named = (plan_name(a) for a in decision.parallel_agents)
    wanted = [a for a in dict.fromkeys(named) if a != target]
    for agent in wanted:
        route = admit(agent, state, tuple(a for a in [target, *wanted] if a != agent))
        if route.reason is None:
            group.append(agent)
            continue
        refused.append(route)
        emit(
            writer,
            AgentFallback.model_validate(
                {
                    "from": agent,
                    "to": target,
                    "reason": route.reason,
                    "detail": f"{route.detail}; not started alongside {target}",
                }
            ),
        )
    return group, refused
