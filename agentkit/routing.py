"""Pure routing functions of the executor team (PRODUCT.md §1.2).

Nothing here does I/O or reads settings: every function is a function of the
state it is given, so each rule is unit-tested table by table. `resolve_route`
holds all of the supervisor's routing rules and also says *why* a choice was
corrected; the supervisor node calls it to emit `agent.fallback` events and the
graph's conditional edge calls it (through `route_from_supervisor`) to route, so
what the stream explains is exactly what the graph does.

Once a run's supervisor has drifted (`drift_detail`), its later attempts route by
`autopilot_route`, the stage order, without asking it.

Counters are written by the node that owns the loop and read here under the same
name: `team_step`/`invalid_decisions`/`team_log`/`given_up`/`capped` (supervisor),
`research_tool_rounds` (research agent), `image_tool_rounds`/`images_complete`
(image agent).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from langgraph.graph import END

from agentkit.limits import DEFAULT_LIMITS, limits_of
from agentkit.state import QUALITY_DIMENSIONS, TeamOutput
from core.agents import AGENT_TABLE, AGENTS, AgentName
from core.events import FallbackReason

#: Where the run may go after a supervisor turn: back to the supervisor, an agent, or END.
SupervisorTarget = Literal["supervisor", AgentName, "__end__"]

#: LangGraph's END, typed as the literal node name the routers return.
_END = cast(Literal["__end__"], END)

#: Which agent fixes a failing quality dimension, in priority order (first failing wins).
QUALITY_FALLBACK: dict[str, AgentName] = {
    "infoDensity": "research_evidence_agent",
    "textImageAlignment": "layout_planner_agent",
    "styleConsistency": "reference_intelligence_agent",
    "readability": "image_planner_agent",
    "platformFit": "writer_agent",
}

#: `TeamOutput` fields that are not artefacts: the images (their asset ids stand for them),
#: the review's bookkeeping, the team log, why the team stopped early and why its
#: supervisor was found drifting.
_NOT_ARTEFACTS = frozenset({"images", "reviewed_digest", "team_log", "stalled", "drifted"})
#: What a review's verdict does not depend on: its own fields, and the drawn images' ids.
#: The cards follow the image plans (part of the draft), and the review may judge the
#: text while they are drawn (a parallel step): the images landing after it does not make
#: it stale.
_REVIEW_FIELDS = frozenset({"review_feedback", "quality_scores", "generated_image_asset_ids"})

#: The artefact fields; their fingerprint tells whether an agent made progress.
ARTEFACT_FIELDS: tuple[str, ...] = tuple(
    name for name in TeamOutput.__annotations__ if name not in _NOT_ARTEFACTS
)
DRAFT_FIELDS: tuple[str, ...] = tuple(
    name for name in ARTEFACT_FIELDS if name not in _REVIEW_FIELDS
)


@dataclass(frozen=True)
class Route:
    """Where the run goes after a supervisor turn, and why if that is not what was asked."""

    target: SupervisorTarget
    requested: str
    reason: FallbackReason | None = None
    detail: str = ""
    gives_up: AgentName | None = None  # an agent this route stops asking (see `given_up`)
    caps: AgentName | None = None  # an agent capped by this route (see `capped`)


def _body(state: Mapping[str, Any]) -> str:
    content = state.get("generated_content") or {}
    return str(content.get("body") or "").strip()


def _present(state: Mapping[str, Any], path: str) -> bool:
    """Return whether the field at a dotted `path` holds something (a blank string does not)."""
    value: Any = state
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return bool(value.strip() if isinstance(value, str) else value)


def stage_done(agent: str, state: Mapping[str, Any]) -> bool:
    """Return whether `agent`'s artefact is present in `state` (its `done_when` field).

    A review counts only for the draft it judged: once the draft changes, the
    review is stale and the stage is missing again.
    """
    if agent not in AGENT_TABLE:
        raise ValueError(f"unknown agent {agent!r}")
    if agent == "review_agent":
        reviewed = state.get("reviewed_digest")
        return state.get("review_feedback") is not None and (
            reviewed is None or reviewed == draft_digest(state)
        )
    return _present(state, AGENT_TABLE[cast(AgentName, agent)].done_when)


def given_up(state: Mapping[str, Any]) -> frozenset[str]:
    """Return the agents this team run has given up on.

    An agent chosen again and again without progress is capped (`resolve_route`);
    from then on the team moves on without it: it is no longer the suggested next
    stage, a way out of a stuck turn or a quality fix, and choosing it again is
    corrected at once. So one stage that a model cannot do (a small model that
    never fills the evidence pack) costs `max_same_agent_repeats` + 1 turns once,
    not the rest of the run's steps.
    """
    return frozenset(state.get("given_up") or ())


def capped(state: Mapping[str, Any]) -> frozenset[str]:
    """Return the agents routing capped in this team run, their artefact present or not.

    An agent is capped when it is chosen again and again without progress
    (`max_same_agent_repeats`). After its first cap, an agent whose artefact is
    present is not run again on the supervisor's say-so: a re-pick is redirected
    at once (`resolve_route`), so a supervisor stuck on one agent costs
    `max_same_agent_repeats` + 1 of its calls per team run, not two more for
    every other stage. Routing itself may
    still send it work (a failing quality dimension it fixes), and once its
    artefact is stale or gone (`stage_done`) the supervisor may pick it again.
    """
    return frozenset(state.get("capped") or ())


def first_missing_stage(state: Mapping[str, Any], exclude: str | None = None) -> AgentName | None:
    """Return the first agent, in the normal order, whose artefact is missing.

    Agents the run has given up on (`given_up`) are passed over.
    """
    skipped = given_up(state)
    for agent in AGENTS:
        if agent != exclude and agent not in skipped and not stage_done(agent, state):
            return agent
    return None


def quality_fallback(
    scores: Mapping[str, float] | None, threshold: float = DEFAULT_LIMITS["quality_threshold"]
) -> AgentName | None:
    """Return the agent that fixes the first failing quality dimension, or None if all pass.

    Dimensions are checked in the fixed order infoDensity, textImageAlignment,
    styleConsistency, readability, platformFit. A dimension missing from
    `scores` is not counted as failing: the review did not judge it.
    """
    for dimension in QUALITY_DIMENSIONS:
        value = (scores or {}).get(dimension)
        if value is not None and float(value) < threshold:
            return QUALITY_FALLBACK[dimension]
    return None


def review_passes(state: Mapping[str, Any]) -> bool:
    """Return whether the review approved and every quality score meets the threshold."""
    review = state.get("review_feedback") or {}
    threshold = limits_of(state)["quality_threshold"]
    return bool(review.get("approved")) and (
        quality_fallback(state.get("quality_scores"), threshold) is None
    )


def end_allowed(state: Mapping[str, Any]) -> bool:
    """Return whether the team may end: a body exists and any review, of this draft, passed."""
    if not _body(state):
        return False
    if state.get("review_feedback") is None:
        return True
    return stage_done("review_agent", state) and review_passes(state)


def check_basic_preconditions(target: str, state: Mapping[str, Any]) -> str:
    """Return where `target` can actually run: itself, or the agent providing what it lacks.

    An agent that `needs` another (`core.agents`) runs only once that one's stage
    is done: writer_agent needs `creative_brief` (else brief_compiler_agent);
    review_agent needs `generated_content.body` (else writer_agent); image_agent
    needs non-empty `image_plans` (else image_planner_agent). Applied transitively,
    so a review with neither body nor brief goes to brief_compiler_agent.
    """
    seen: set[str] = set()
    while target in AGENT_TABLE and target not in seen:
        seen.add(target)
        provider = AGENT_TABLE[cast(AgentName, target)].needs
        if provider is None or stage_done(provider, state):
            break
        target = provider
    return target


def _digest(state: Mapping[str, Any], fields: tuple[str, ...]) -> str:
    snapshot = {field: state.get(field) for field in fields}
    raw = json.dumps(snapshot, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:16]


def artefact_digest(state: Mapping[str, Any]) -> str:
    """Fingerprint every artefact, so a turn that changed nothing can be recognised."""
    return _digest(state, ARTEFACT_FIELDS)


def draft_digest(state: Mapping[str, Any]) -> str:
    """Fingerprint what a review judges: every artefact except the review itself."""
    return _digest(state, DRAFT_FIELDS)


def _ran(entry: Mapping[str, Any]) -> list[str]:
    """Return the agents a team log entry started (none for a turn that ran no agent)."""
    if entry.get("routed") not in AGENT_TABLE:
        return []
    return list(entry.get("group") or [entry["routed"]])


def _earlier(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Return the team log's entries of the turns before the one being decided."""
    step = int(state.get("team_step") or 0)
    return [entry for entry in state.get("team_log") or [] if entry["step"] < step]


def _repeats_without_progress(target: str, state: Mapping[str, Any]) -> int:
    """Count the latest earlier steps that ran `target` while nothing changed.

    Turns that started no agent (a re-ask, a refused plan step) neither count nor
    break the run of repeats: they added nothing either.
    """
    digest = artefact_digest(state)
    count = 0
    for entry in reversed(_earlier(state)):
        ran = _ran(entry)
        if not ran:
            continue
        if target not in ran or entry["digest"] != digest:
            break
        count += 1
    return count


def _names_nothing_runnable(entry: Mapping[str, Any]) -> bool:
    """Tell whether a log entry is a plan step refused for naming something that is no agent."""
    return bool(
        entry.get("planned")
        and entry.get("routed") == "supervisor"
        and entry.get("reason") == "invalid_decision"
    )


def stalled_steps(state: Mapping[str, Any]) -> int:
    """Count the latest team steps in a row that added nothing (see `stall_limit`).

    A step adds nothing when it ran agents that had all been chosen before in this
    team run and left every artefact as it was (the same agent chosen again with no
    new output), or when it was a plan step naming something that is no agent, so
    nothing ran. Walking back from the turn being decided, the first step that
    changed an artefact ends the count; an agent's first try that failed and turns
    that started nothing for another reason (a re-ask, a refused END) are passed over.
    """
    entries = _earlier(state)
    if not entries:
        return 0
    # The artefacts once each entry's step had run: the next entry's, or the state's now.
    after = [entry["digest"] for entry in entries[1:]] + [artefact_digest(state)]
    chosen: set[str] = set()
    added_nothing: list[bool | None] = []  # None: neither progress nor a step adding nothing
    for entry, digest in zip(entries, after, strict=True):
        ran = _ran(entry)
        if ran:
            if entry["digest"] != digest:
                added_nothing.append(False)
            else:
                added_nothing.append(True if chosen.issuperset(ran) else None)
            chosen.update(ran)
        else:
            added_nothing.append(True if _names_nothing_runnable(entry) else None)
    count = 0
    for mark in reversed(added_nothing):
        if mark is False:
            break
        count += mark is True
    return count


def stall_detail(stalled: int) -> str:
    """Return why the team stopped for lack of progress (a fallback's and the result's detail)."""
    return f"{stalled} steps in a row added nothing; the team stops here"


def stall_limit(limits: Mapping[str, Any]) -> int:
    """Return how many steps in a row may add nothing before the team stops.

    One more than `max_same_agent_repeats`: a supervisor repeating one agent is
    corrected by the repeat cap first (its turns then go to missing stages and make
    progress again); steps that still add nothing after that — a plan of names
    that are no agents, agents chosen in turn without anything new — end the team's
    loop as capped.
    """
    return int(limits["max_same_agent_repeats"]) + 1


def _unstick(state: Mapping[str, Any], exclude: str | None = None) -> SupervisorTarget:
    """Pick where a stuck or capped team goes: a missing stage, a quality fix, or END."""
    missing = first_missing_stage(state, exclude=exclude)
    if missing is not None:
        return cast(SupervisorTarget, check_basic_preconditions(missing, state))
    if end_allowed(state):
        return _END
    fix = quality_fallback(state.get("quality_scores"), limits_of(state)["quality_threshold"])
    if fix is not None and fix != exclude and fix not in given_up(state):
        return fix
    return _END


def resolve_route(state: Mapping[str, Any]) -> Route:
    """Apply every routing rule to the supervisor's latest decision.

    In order: the team step cap; steps that added nothing (`stalled_steps`, at
    `stall_limit` the team ends); an unparsable or unknown decision (re-ask the
    supervisor, at most `max_invalid_decisions` times in a row, then go to the
    first stage whose output is missing); END (allowed only with a body and a
    passing review, else a failing quality dimension's agent, else back to the
    supervisor); preconditions; an agent given up on (`given_up`) or capped
    earlier with its output in place (`capped`), redirected at once; and the
    same agent chosen again with no progress (`max_same_agent_repeats`).
    """
    limits = limits_of(state)
    decision = state.get("supervisor_decision") or {}
    requested = str(decision.get("next_agent") or "")
    step = int(state.get("team_step") or 0)

    if step >= limits["max_team_steps"] and not (requested == "END" and end_allowed(state)):
        return Route(_END, requested, "cap", f"max_team_steps ({limits['max_team_steps']}) reached")

    stalled = stalled_steps(state)
    if stalled >= stall_limit(limits) and not (requested == "END" and end_allowed(state)):
        return Route(_END, requested, "cap", stall_detail(stalled))

    if requested != "END" and requested not in AGENTS:
        what = f"unknown agent {requested!r}" if requested else "no parsable decision"
        if int(state.get("invalid_decisions") or 0) <= limits["max_invalid_decisions"]:
            return Route("supervisor", requested, "invalid_decision", f"{what}; asking again")
        target = _unstick(state)
        return Route(target, requested, "invalid_decision", f"{what}; re-ask limit reached")

    if requested == "END":
        if end_allowed(state):
            return Route(_END, requested)
        if not _body(state):
            return Route("supervisor", requested, "precondition", "END refused: no body yet")
        if not stage_done("review_agent", state):
            return Route(
                "supervisor",
                requested,
                "precondition",
                "END refused: the draft changed since its review",
            )
        fix = quality_fallback(state.get("quality_scores"), limits["quality_threshold"])
        if fix is not None:
            return Route(
                fix, requested, "quality", "END refused: a quality score is below threshold"
            )
        return Route("supervisor", requested, "precondition", "END refused: review not approved")

    target = cast(SupervisorTarget, check_basic_preconditions(requested, state))
    if target != requested:
        return Route(
            target,
            requested,
            "precondition",
            f"{requested} needs {target} first",
        )

    if target in given_up(state) and not stage_done(target, state):
        fallback = _unstick(state, exclude=target)
        detail = f"{target} was given up on earlier in this run (no progress)"
        return Route(fallback, requested, "cap", detail)

    if target in capped(state) and stage_done(target, state):
        fallback = _unstick(state, exclude=target)
        detail = f"{target} was capped earlier in this run and its output is in place"
        return Route(fallback, requested, "cap", detail)

    if _repeats_without_progress(target, state) >= limits["max_same_agent_repeats"]:
        fallback = _unstick(state, exclude=target)
        detail = f"{target} chosen repeatedly without progress"
        # Given up on only while its artefact is missing: an agent that delivered and is
        # merely re-picked stays available as a quality fix.
        agent = cast(AgentName, target)
        gives_up = None if stage_done(target, state) else agent
        return Route(fallback, requested, "cap", detail, gives_up=gives_up, caps=agent)

    return Route(cast(SupervisorTarget, target), requested)


def route_from_supervisor(state: Mapping[str, Any]) -> SupervisorTarget:
    """Return the node that runs after the supervisor (see `resolve_route`)."""
    return resolve_route(state).target


# --- a supervisor that drifted: the stage order, without asking it ------------------------
#
# Once routing has had to take a team run over from its supervisor for lack of progress,
# the run's later attempts (a failing verdict retried) do not ask that supervisor again:
# it would drift the same way and cost as much every time. The supervisor node records
# why (`drift_detail`, or the stop of a stalled team) as the team's `drifted`; the
# pipeline keeps it for the run and hands it to each later attempt as
# `supervisor_drifted`, whose turns `autopilot_route` decides.

#: What an `agent.fallback` of a turn that no supervisor decided names as its `from`.
AUTOPILOT = "supervisor"


def drift_detail(route: Route) -> str | None:
    """Return why a route shows the supervisor drifting, or None when it does not.

    The supervisor drifts when routing takes a turn over for lack of progress: an
    agent chosen again with nothing new is capped (or given up on), or the
    decisions stay unparsable past the re-ask limit and routing goes to a missing
    stage itself. (A team stopped because its steps added nothing drifted too;
    the supervisor node records that with the stop.) Correcting a sound choice —
    a precondition, a quality fix, a refused END, one unknown name asked again —
    is not drift.
    """
    if route.caps is not None or route.gives_up is not None:
        return route.detail
    if route.reason == "invalid_decision" and route.target != "supervisor":
        return route.detail
    return None


def _quality_fixed(state: Mapping[str, Any]) -> bool:
    """Tell whether this team run already sent an agent to fix a failing quality dimension."""
    return any(entry.get("reason") == "quality" for entry in state.get("team_log") or [])


def _tried_in_vain(state: Mapping[str, Any]) -> frozenset[str]:
    """Return the agents the stage order ran in this team run that left no output at all.

    Each gets one try: its output failed its check, and the same input would fail
    the same way. (A review made stale by a later fix did deliver; it runs again.)
    """
    ran = {
        a for entry in state.get("team_log") or [] if entry.get("autopilot") for a in _ran(entry)
    }
    return frozenset(
        a for a in ran if not _present(state, AGENT_TABLE[cast(AgentName, a)].done_when)
    )


def autopilot_route(state: Mapping[str, Any]) -> Route:
    """Decide the next turn of a team whose supervisor drifted earlier in the run.

    No model call: the stage order the routers fall back on. In order: the step
    cap (`max_team_steps`, as for a decision); the first agent whose output is
    missing, one at a time (preconditions applied; an agent given up on or tried in
    vain in this team run, or one whose provider was, is passed over); with every
    stage it can run done, END
    when that is allowed (a body, and any review of this draft passing); else,
    once per team run, the agent of the review's first failing quality dimension
    (PRODUCT.md §1.2's quality fallback), after which the review runs again; else
    END: the critic judges what the team made. The route's `requested` is
    `AUTOPILOT` and its reason `cap` (`quality` for the fix), so each turn is an
    `agent.fallback` that says why.
    """
    limits = limits_of(state)
    drifted = f"the supervisor drifted earlier in this run ({state.get('supervisor_drifted')})"
    if int(state.get("team_step") or 0) >= limits["max_team_steps"]:
        detail = f"max_team_steps ({limits['max_team_steps']}) reached"
        return Route(_END, AUTOPILOT, "cap", detail)
    skipped = given_up(state) | _tried_in_vain(state)
    for agent in AGENTS:
        if agent in skipped or stage_done(agent, state):
            continue
        target = check_basic_preconditions(agent, state)
        if target in skipped:
            continue
        detail = f"{drifted}; the stage order runs {target}, the first stage missing"
        return Route(cast(SupervisorTarget, target), AUTOPILOT, "cap", detail)
    if end_allowed(state):
        return Route(_END, AUTOPILOT, "cap", f"{drifted}; every stage is done")
    fix = quality_fallback(state.get("quality_scores"), limits["quality_threshold"])
    if fix is not None and fix not in skipped and not _quality_fixed(state):
        detail = f"{drifted}; the review's first failing quality dimension is {fix}'s"
        return Route(fix, AUTOPILOT, "quality", detail)
    detail = f"{drifted}; nothing left that the stage order may run, the critic judges the post"
    return Route(_END, AUTOPILOT, "cap", detail)


def _has_tool_calls(message: Any) -> bool:
    """Tell whether a message asks for tools: a message object or its `message_to_dict` form."""
    if isinstance(message, Mapping):
        data = message.get("data")
        calls = data.get("tool_calls") if isinstance(data, Mapping) else message.get("tool_calls")
    else:
        calls = getattr(message, "tool_calls", None)
    return bool(calls)


def _last_has_tool_calls(state: Mapping[str, Any], key: str) -> bool:
    messages = state.get(key) or []
    return bool(messages) and _has_tool_calls(messages[-1])


def should_continue_supervisor(state: Mapping[str, Any]) -> Literal["supervisor_tools", "route"]:
    """Run the supervisor's look-ups if it asked for some (bounded), else route."""
    rounds = int(state.get("supervisor_tool_rounds") or 0)
    if _last_has_tool_calls(state, "supervisor_messages") and (
        rounds <= limits_of(state)["max_supervisor_tool_rounds"]
    ):
        return "supervisor_tools"
    return "route"


def should_continue_research(
    state: Mapping[str, Any],
) -> Literal["research_evidence_tools", "supervisor"]:
    """Run the research tools while it asks for them, at most `max_research_tool_rounds`."""
    rounds = int(state.get("research_tool_rounds") or 0)
    if _last_has_tool_calls(state, "research_messages") and (
        rounds <= limits_of(state)["max_research_tool_rounds"]
    ):
        return "research_evidence_tools"
    return "supervisor"


def should_continue_image(state: Mapping[str, Any]) -> Literal["image_tools", "supervisor"]:
    """Draw while images are missing and the agent asks, fewer than 10 rounds in all."""
    if state.get("images_complete"):
        return "supervisor"
    rounds = int(state.get("image_tool_rounds") or 0)
    if _last_has_tool_calls(state, "image_messages") and (
        rounds <= limits_of(state)["max_image_tool_rounds"]
    ):
        return "image_tools"
    return "supervisor"


def should_continue_review(state: Mapping[str, Any]) -> Literal["__end__", "supervisor"]:
    """End the team when the review approves and every quality score passes."""
    return _END if review_passes(state) else "supervisor"


# --- parallel and planned steps (PRODUCT.md §1.2: `parallel_agents`, `plan`) ---------------
#
# A decision may start several agents at once (`parallel_agents`) and name the steps that
# follow (`plan`, each step one agent or several started together). Every agent hands back
# to the supervisor node as on the one-agent path; each agent's turn is one superstep of
# the team (`graphs.team`), so the supervisor runs once all the agents of a step have
# finished, and takes the plan's next step without asking the model unless something
# calls for a decision (`next_plan_step`).
# Each agent of a step passes the checks a decision's agent passes (`admit`).


#: The short names a decision's `plan` and `parallel_agents` may use for the agents: a
#: plan names most of the team, and its full names were half of a planning decision's
#: completion tokens (each one paid on the critical path). The team records, routes and
#: reports the full names; `next_agent` takes full names only, as it always did. In the
#: agents' order (`AGENTS`): the supervisor's prompt lists them against its roster.
PLAN_NAMES: dict[str, AgentName] = {
    "brief": "brief_compiler_agent",
    "research": "research_evidence_agent",
    "reference": "reference_intelligence_agent",
    "layout": "layout_planner_agent",
    "image_planner": "image_planner_agent",
    "writer": "writer_agent",
    "image": "image_agent",
    "review": "review_agent",
}


def plan_name(name: str) -> str:
    """Return the agent a plan's name stands for: a short name's agent, else the name."""
    return PLAN_NAMES.get(name, name)


def admit(agent: str, state: Mapping[str, Any], alongside: tuple[str, ...] = ()) -> Route:
    """Check one agent of a parallel or planned step as `resolve_route` checks a decision.

    Returns `Route(agent, agent)` when it may start now, next to the agents
    `alongside`; otherwise a route to the supervisor with the reason: an unknown
    name, an agent alongside the one whose output it needs, its input missing
    (preconditions), an agent given up on or capped with its output in place, or
    one chosen again with no progress (`max_same_agent_repeats`).
    """
    if agent not in AGENTS:
        return Route("supervisor", agent, "invalid_decision", f"unknown agent {agent!r}")
    needs = AGENT_TABLE[cast(AgentName, agent)].needs
    if needs is not None and needs in alongside:
        return Route("supervisor", agent, "precondition", f"{agent} needs {needs} first")
    provider = check_basic_preconditions(agent, state)
    if provider != agent:
        return Route("supervisor", agent, "precondition", f"{agent} needs {provider} first")
    if agent in given_up(state) and not stage_done(agent, state):
        return Route("supervisor", agent, "cap", f"{agent} was given up on earlier in this run")
    if agent in capped(state) and stage_done(agent, state):
        detail = f"{agent} was capped earlier in this run and its output is in place"
        return Route("supervisor", agent, "cap", detail)
    if _repeats_without_progress(agent, state) >= limits_of(state)["max_same_agent_repeats"]:
        # Capped (and given up on while its artefact is missing), as `resolve_route` does.
        named = cast(AgentName, agent)
        gives_up = None if stage_done(agent, state) else named
        detail = f"{agent} chosen repeatedly without progress"
        return Route("supervisor", agent, "cap", detail, gives_up=gives_up, caps=named)
    return Route(cast(SupervisorTarget, agent), agent)


def plan_steps(plan: Any) -> list[list[str]]:
    """Return a decision's `plan` as steps: each entry one agent, or a list run together.

    Short names (`PLAN_NAMES`) become the agents' names. Blank names are
    dropped, and so is an empty step; a name repeated within a step counts once.
    Unknown names are kept: the step that holds one is refused when it comes
    (`admit`), so the supervisor is asked again then.
    """
    steps: list[list[str]] = []
    for entry in plan or []:
        names = [entry] if isinstance(entry, str) else list(entry or [])
        step = list(dict.fromkeys(plan_name(str(n).strip()) for n in names if str(n).strip()))
        if step:
            steps.append(step)
    return steps


@dataclass(frozen=True)
class PlanStep:
    """What follows a parallel or planned step: the next step's agents, END, or a decision."""

    targets: tuple[str, ...]  # agents started together; or ("supervisor",) or ("__end__",)
    why: str  # why the supervisor is asked again or the team ends ("" while the plan runs)
    refused: Route | None = None  # the check that stopped the plan (an agent.fallback)


def next_plan_step(state: Mapping[str, Any]) -> PlanStep:
    """Decide what follows a parallel or planned step, once all its agents have finished.

    In order: a review in the step ends the team when it passed (as
    `should_continue_review`) and asks the supervisor when it did not; an agent
    of the step whose stage is still not done (its output failed its check) asks
    the supervisor; so does the end of the plan. A plan's `END` step ends the team
    when that is allowed (`end_allowed`), else asks. A step that would be the
    `max_team_steps`-th turn ends the run (the cap, as for a decision). The next
    step's agents each pass `admit`; the first refused one stops the plan and
    the supervisor is asked (the refusal is reported as a fallback).
    """
    limits = limits_of(state)
    ran = list(state.get("team_group") or [])
    if "review_agent" in ran:
        if review_passes(state) and end_allowed(state):
            return PlanStep((_END,), "the review passed")
        return PlanStep(("supervisor",), "the review did not pass")
    failed = [agent for agent in ran if agent in AGENT_TABLE and not stage_done(agent, state)]
    if failed:
        return PlanStep(("supervisor",), f"{', '.join(failed)} produced no usable output")
    plan = plan_steps(state.get("team_plan"))
    if not plan:
        return PlanStep(("supervisor",), "the plan ended")
    upcoming = plan[0]
    if upcoming == ["END"]:
        if end_allowed(state):
            return PlanStep((_END,), "the plan ended the team")
        return PlanStep(("supervisor",), "the plan's END is not allowed yet")
    if int(state.get("team_step") or 0) + 1 >= limits["max_team_steps"]:
        detail = f"max_team_steps ({limits['max_team_steps']}) reached"
        return PlanStep((_END,), detail, Route(_END, upcoming[0], "cap", detail))
    turn = {**state, "team_step": int(state.get("team_step") or 0) + 1}  # the step it starts
    for agent in upcoming:
        route = admit(agent, turn, tuple(a for a in upcoming if a != agent))
        if route.reason is not None:
            return PlanStep(("supervisor",), route.detail, route)
    return PlanStep(tuple(upcoming), "")
