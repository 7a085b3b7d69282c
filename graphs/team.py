"""The executor team (PRODUCT.md §1.2): a supervisor routing eight agents until the post is done.

```
START → enter_team → supervisor ─┬─ look-ups ──→ supervisor_tools ──→ supervisor
                                 ├─ (invalid) ─→ supervisor
                                 ├─ END ───────→ finish_team → END
                                 └─ agent ─────→ <agent> ──→ supervisor
research_evidence_agent ⇄ research_evidence_tools   (search_knowledge, ≤ 3 rounds)
image_agent ⇄ image_tools                            (generate_image, < 10 rounds)
review_agent ─┬─ approved and every score passes → finish_team → END
              └─ otherwise → supervisor
```

The agents come from `core.agents`; their nodes are listed here by name
(`AGENT_NODES`, `nodes/<name>.py`'s function `<name>`, in `AGENTS` order: a test
ties the two). Each `simple` agent is wired as one node that hands straight back
to the supervisor; the three others (the two tool loops and the review, which
may end the team) are wired by hand below.

`enter_team` resolves the run's loop bounds once (`agentkit.limits`): the input's
`limits` over the context's over the defaults, written to state `limits`, which
every router and node reads.

`finish_team` shows what the team made in its conversation (`messages`, what a chat
client renders when the team is served on its own, `?assistantId=team`): the
writer's last draft message, same id, becomes the finished text — title, body,
`#tags` and the images as absolute links (signed when API keys are on), as the
`atelier` conversation shows a draft (`agentkit.chat.draft_text`). As the pipeline's
executor the team's `messages` are not part of its output, and the pipeline writes
its own post message (nodes.executor, nodes.finalize).

A decision may start several agents together (`parallel_agents`) and plan the
steps after it (`plan`): the supervisor's edge then returns the step's agents as a
list, which LangGraph starts in one superstep. Each agent still hands back to the
supervisor; the supervisor node is deferred, so after a parallel step it runs
once, when every agent of the step has finished, and takes the plan's next step
without a model call unless `agentkit.routing.next_plan_step` asks for a decision.
On the one-agent path the supervisor is the only node left to run after an
agent, so deferring it changes nothing. Agents' nodes are wrapped
(`side_by_side`) so that two of one step never overwrite each other's notes,
and the two tool loops run their rounds inside their agent's node in a parallel
step (`own_loop`), so that a round never waits for the step's slowest agent.

Every rule of the supervisor's edge lives in `agentkit.routing` (pure functions);
the supervisor node applies the same rules to emit `supervisor.route` and
`agent.fallback` events, so the stream explains every turn.

Recursion limit: loops are bounded by counters in state (`team_step` against
`max_team_steps`, the tool-round counters against their caps), never by
LangGraph's `recursion_limit`. The limit only has to be high enough for the
longest legal run; `team_recursion_limit(limits)` computes it (560 with the
default limits: the entry, then 24 decisions of up to 5 supersteps each — the
decision and two look-up rounds — plus 23 agent turns of up to 19 supersteps
each — the image agent's 9 tool rounds — plus `finish_team`, plus the one
LangGraph needs to finish). The compiled graph carries it as its default config. A parent graph
that mounts the team (calling it from a node or as a subgraph node) passes *its
own* `recursion_limit` down, which overrides that default: it must be at least
`team_recursion_limit(limits)` (the team counts its supersteps separately from
the parent's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from agentkit.chat import base_url_of, draft_text, post_message_update
from agentkit.common import tool_loop_node
from agentkit.context import AtelierContext, context_of
from agentkit.limits import TeamLimits, limits_of, resolve_limits
from agentkit.routing import (
    SupervisorTarget,
    route_from_supervisor,
    should_continue_image,
    should_continue_research,
    should_continue_review,
    should_continue_supervisor,
)
from agentkit.run_start import shown_request
from agentkit.services import ensure_services
from agentkit.state import TeamInput, TeamOutput, TeamState, transcript
from agentkit.tools import generate_image, search_knowledge
from core.agents import AGENT_TABLE, AGENTS, AgentName
from nodes.brief_compiler_agent import brief_compiler_agent
from nodes.image_agent import image_agent
from nodes.image_planner_agent import image_planner_agent
from nodes.layout_planner_agent import layout_planner_agent
from nodes.reference_intelligence_agent import reference_intelligence_agent
from nodes.research_evidence_agent import research_evidence_agent
from nodes.review_agent import review_agent
from nodes.supervisor import supervisor
from nodes.writer_agent import writer_agent

#: Each agent's node, in `core.agents.AGENTS` order.
AGENT_NODES: dict[AgentName, Callable[..., Awaitable[dict[str, Any]]]] = {
    "brief_compiler_agent": brief_compiler_agent,
    "research_evidence_agent": research_evidence_agent,
    "reference_intelligence_agent": reference_intelligence_agent,
    "layout_planner_agent": layout_planner_agent,
    "image_planner_agent": image_planner_agent,
    "writer_agent": writer_agent,
    "image_agent": image_agent,
    "review_agent": review_agent,
}

#: An agent's node as the team runs it.
AgentNode = Callable[..., Awaitable[dict[str, Any]]]

#: Agents whose turn is one node that hands straight back to the supervisor.
SIMPLE_AGENTS = [agent.name for agent in AGENT_TABLE.values() if agent.simple]


async def enter_team(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Resolve the run's loop bounds once: the input's over the context's over the defaults.

    A run given no services gets the default ones here (`agentkit.services.ensure_services`).
    Served on its own, a run started with a `request` shows it as the user's message
    (`agentkit.run_start.shown_request`).
    """
    await ensure_services(runtime)
    limits = resolve_limits(context_of(runtime).limits, state.get("limits"))
    return {"limits": limits, **shown_request(state, runtime)}


async def finish_team(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Show the finished post in the conversation: the writer's draft message, completed.

    Its text becomes the title, body, `#tags` and images (absolute links from the run's
    base URL, signed when API keys are on); a team that wrote nothing leaves it alone.
    """
    content = state.get("generated_content")
    message_id = state.get("draft_message_id")
    if not content or not message_id:
        return {}
    images = state.get("images") or []
    links = context_of(runtime).asset_links
    text = draft_text(content, images, base_url_of(get_config()), links)
    return {"messages": post_message_update(text, message_id, None)["messages"]}


def team_recursion_limit(limits: TeamLimits | Mapping[str, Any] | None = None) -> int:
    """Return the smallest `recursion_limit` the longest legal team run needs.

    The entry (`enter_team`) takes one superstep; each supervisor decision at
    most 1 + 2 × `max_supervisor_tool_rounds`; each agent turn after a decision
    at most 1 + 2 × the larger tool cap (research or image); there are at most
    `max_team_steps` decisions, and the last one ends the run; `finish_team` takes
    one. LangGraph needs one superstep more than the run executes.
    """
    bounds = limits_of({"limits": limits})
    decision = 1 + 2 * bounds["max_supervisor_tool_rounds"]
    tool_rounds = max(bounds["max_research_tool_rounds"], bounds["max_image_tool_rounds"])
    agent_turn = 1 + 2 * tool_rounds
    steps = bounds["max_team_steps"]
    return 1 + steps * decision + (steps - 1) * agent_turn + 1 + 1


def route_after_supervisor(state: TeamState) -> SupervisorTarget | str | list[str]:
    """Run the supervisor's look-ups if it asked for some, else route its decision.

    A parallel or planned step (`team_route`, written by the supervisor node)
    starts its agents together: LangGraph runs the nodes of a returned list in
    one superstep.
    """
    if should_continue_supervisor(state) == "supervisor_tools":
        return "supervisor_tools"
    step = state.get("team_route")
    if step:
        return step[0] if len(step) == 1 else list(step)
    return route_from_supervisor(state)


#: State keys several agents write, as a whole list computed from what each read.
_SHARED_NOTES = ("agent_errors", "no_optional_tools")


def side_by_side(node: Callable[..., Awaitable[dict[str, Any]]]) -> AgentNode:
    """Wrap an agent's node so agents of one parallel step never clobber a shared list.

    An agent writes `agent_errors` / `no_optional_tools` as the whole new list;
    two agents running together would each overwrite the other's change. The
    wrapper writes the change instead (`{"add", "drop"}` against the list the
    agent read), which the lists' reducer (`agentkit.state.shared_list`) applies in turn.
    """

    async def run(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
        update = await node(state, runtime)
        for key in _SHARED_NOTES:
            if isinstance(update.get(key), list):
                before = list(cast(Mapping[str, Any], state).get(key) or [])
                after = update[key]
                update = {
                    **update,
                    key: {
                        "add": [n for n in after if n not in before],
                        "drop": [n for n in before if n not in after],
                    },
                }
        return update

    run.__name__ = run.__qualname__ = getattr(node, "__name__", "agent")
    run.__doc__ = node.__doc__
    return run


def _transcript_write(before: list[Any], after: list[Any]) -> list[Any] | None:
    """Return the one write that turns a loop's transcript `before` into `after`.

    Within a turn a transcript only grows (the agent's ask, the tools' results) until the
    agent's last update clears it, after which the loop is over: so `after` either
    extends `before` (the new entries) or is empty (None, the clear).
    """
    return after[len(before) :] if after else None


def own_loop(
    node: AgentNode,
    tools: Callable[..., Awaitable[dict[str, Any]]],
    transcript_key: str,
    goes_on: Callable[[Mapping[str, Any]], str],
) -> AgentNode:
    """Wrap a tool-loop agent so that, in a parallel step, its loop runs inside its node.

    On its own the agent hands each round to its tools node and back (one superstep
    each), as it always did. In a step with other agents (`team_group`) every
    superstep waits for all of the step's nodes, so each round would wait for the
    slowest of them: the research's second call for the reference analysis, the
    cards for the review. There the wrapper runs the rounds itself (`tools` while
    `goes_on` names the tools node, the same nodes' functions, on the state as the
    graph would have it) and returns their net update, so the loop never waits on
    a neighbour. A worker killed mid-loop runs the turn again from its start, as
    it would the node (the rounds' writes are the node's, kept only when it ends).
    """

    async def run(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
        update = await node(state, runtime)
        if len(state.get("team_group") or []) < 2:
            return update
        local: dict[str, Any] = dict(state)
        written: dict[str, Any] = {}

        def apply(change: Mapping[str, Any]) -> None:
            for key, value in change.items():
                local[key] = transcript(local.get(key), value) if key == transcript_key else value
                written[key] = local[key]

        apply(update)
        while goes_on(local) != "supervisor":
            apply(await tools(local, get_config()))
            apply(await node(cast(TeamState, local), runtime))
        if transcript_key in written:
            before = list(cast(Mapping[str, Any], state).get(transcript_key) or [])
            written[transcript_key] = _transcript_write(before, local[transcript_key])
        return written

    run.__name__ = run.__qualname__ = getattr(node, "__name__", "agent")
    run.__doc__ = node.__doc__
    return run


def build_team(
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    limits: TeamLimits | None = None,
    context_schema: type[Any] = AtelierContext,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build and compile the executor team graph (named "team").

    Args:
        checkpointer: Where checkpoints go when the team is served on its own
            (`graphs.assistants.TEAM`); as the pipeline's executor it has none
            and runs under the pipeline's. A mapping (a run's config, as
            LangGraph's server passes a one-argument graph factory) is taken as
            "no checkpointer".
        limits: Loop bounds the run will use, only to size the default
            `recursion_limit` (`team_recursion_limit`); the bounds themselves
            come from the input's `limits` and the run's `AtelierContext`.
        context_schema: What a run's `context` is: `AtelierContext`, or
            `agentkit.context.RunOptions` for LangGraph's own server (`graphs.served`).

    Returns:
        The compiled graph: input `TeamInput`, output `TeamOutput`.
    """
    builder = StateGraph(
        TeamState,
        context_schema=context_schema,
        input_schema=TeamInput,
        output_schema=TeamOutput,
    )
    builder.add_node("enter_team", enter_team)
    # Deferred: after a parallel step it runs once, when every agent of the step is done
    # (on the one-agent path it is the only node left to run, so nothing changes).
    builder.add_node("supervisor", supervisor, defer=True)
    builder.add_node("supervisor_tools", tool_loop_node([search_knowledge], "supervisor_messages"))
    research_tools = tool_loop_node([search_knowledge], "research_messages")
    image_tools = tool_loop_node([generate_image], "image_messages")
    loops: dict[str, AgentNode] = {
        "research_evidence_agent": own_loop(
            research_evidence_agent, research_tools, "research_messages", should_continue_research
        ),
        "image_agent": own_loop(image_agent, image_tools, "image_messages", should_continue_image),
    }
    for name, node in AGENT_NODES.items():
        builder.add_node(name, side_by_side(loops.get(name, node)))
    builder.add_node("research_evidence_tools", research_tools)
    builder.add_node("image_tools", image_tools)
    builder.add_node("finish_team", finish_team)

    builder.add_edge(START, "enter_team")
    builder.add_edge("enter_team", "supervisor")
    targets = ["supervisor_tools", "supervisor", *AGENTS]
    builder.add_conditional_edges(
        "supervisor", route_after_supervisor, {**{t: t for t in targets}, END: "finish_team"}
    )
    builder.add_edge("supervisor_tools", "supervisor")
    for name in SIMPLE_AGENTS:
        builder.add_edge(name, "supervisor")
    builder.add_conditional_edges(
        "research_evidence_agent",
        should_continue_research,
        ["research_evidence_tools", "supervisor"],
    )
    builder.add_edge("research_evidence_tools", "research_evidence_agent")
    builder.add_conditional_edges(
        "image_agent", should_continue_image, ["image_tools", "supervisor"]
    )
    builder.add_edge("image_tools", "image_agent")
    builder.add_conditional_edges(
        "review_agent",
        should_continue_review,
        {END: "finish_team", "supervisor": "supervisor"},
    )
    builder.add_edge("finish_team", END)

    if isinstance(checkpointer, Mapping):
        checkpointer = None
    graph = builder.compile(checkpointer=checkpointer, name="team")
    return graph.with_config(recursion_limit=team_recursion_limit(limits))
