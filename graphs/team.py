"""The executor team (PRODUCT.md §1.2): a supervisor routing eight agents until the post is done.

`build_team()` wires it: the supervisor node decides (or takes its plan's next step),
the agents of a step run as one superstep and hand back to it, and the two tool-loop
agents are subgraphs of their own (`research_loop`, `image_loop`) whose artefacts
alone cross back. Every routing rule is a pure function of `agentkit.routing`. The
wiring, the parallel steps and the recursion bound are explained in `docs/team.md`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

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
from agentkit.state import (
    AgentView,
    ImageOutput,
    ImageState,
    ImageView,
    ResearchOutput,
    ResearchState,
    TeamInput,
    TeamOutput,
    TeamState,
)
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

#: Each agent's node, in `core.agents.AGENTS` order (a tool-loop agent's is its subgraph's
#: first node: `research_loop`, `image_loop`).
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

    The team's supersteps: the entry (`enter_team`), at most `max_team_steps`
    decisions of 1 + 2 × `max_supervisor_tool_rounds` each (the last one ends the
    run), an agent step of one superstep between two decisions, `finish_team`, and
    the one more LangGraph counts. A tool loop runs inside its agent's step as a
    subgraph, which counts its own supersteps under the same limit (passed down with
    the config): 1 + 2 × its rounds, plus one. The limit is the larger of the two.
    """
    bounds = limits_of({"limits": limits})
    decision = 1 + 2 * bounds["max_supervisor_tool_rounds"]
    steps = bounds["max_team_steps"]
    team = 1 + steps * decision + (steps - 1) + 1 + 1
    tool_rounds = max(bounds["max_research_tool_rounds"], bounds["max_image_tool_rounds"])
    return max(team, 1 + 2 * tool_rounds + 1)


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


def route_after_review(state: TeamState) -> Literal["__end__", "supervisor"]:
    """End the team when the review passed (`should_continue_review`), unless it ran in a step.

    After a planned or parallel step the supervisor takes the step's outcome, the
    review's included (`agentkit.routing.next_plan_step`), so the team ends once.
    """
    return "supervisor" if state.get("team_group") else should_continue_review(state)


def research_loop(
    context_schema: type[Any] = AtelierContext,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build one research turn: the agent and its `search_knowledge` rounds (a subgraph).

    It reads the run's context (`ResearchState`'s `AgentView`) and hands back only the
    evidence and its notes (`ResearchOutput`).
    """
    builder = StateGraph(
        ResearchState,
        context_schema=context_schema,
        input_schema=AgentView,
        output_schema=ResearchOutput,
    )
    builder.add_node("research_evidence_agent", research_evidence_agent)
    builder.add_node(
        "research_evidence_tools", tool_loop_node([search_knowledge], "research_messages")
    )
    builder.add_edge(START, "research_evidence_agent")
    builder.add_conditional_edges(
        "research_evidence_agent",
        should_continue_research,
        {"research_evidence_tools": "research_evidence_tools", "supervisor": END},
    )
    builder.add_edge("research_evidence_tools", "research_evidence_agent")
    return builder.compile(name="research_evidence_agent")


def image_loop(
    context_schema: type[Any] = AtelierContext,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build one image turn: the agent and its `generate_image` rounds (a subgraph).

    It reads the plans and the post's text (`ImageView`) and hands back only the drawn
    images and its notes (`ImageOutput`).
    """
    builder = StateGraph(
        ImageState,
        context_schema=context_schema,
        input_schema=ImageView,
        output_schema=ImageOutput,
    )
    builder.add_node("image_agent", image_agent)
    builder.add_node("image_tools", tool_loop_node([generate_image], "image_messages"))
    builder.add_edge(START, "image_agent")
    builder.add_conditional_edges(
        "image_agent", should_continue_image, {"image_tools": "image_tools", "supervisor": END}
    )
    builder.add_edge("image_tools", "image_agent")
    return builder.compile(name="image_agent")


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
    # Every agent's turn is one superstep (a tool loop runs inside its subgraph), so the
    # supervisor runs once after a step, however many agents it started.
    builder.add_node("supervisor", supervisor)
    builder.add_node("supervisor_tools", tool_loop_node([search_knowledge], "supervisor_messages"))
    loops: dict[str, Any] = {
        "research_evidence_agent": research_loop(context_schema),
        "image_agent": image_loop(context_schema),
    }
    for name, node in AGENT_NODES.items():
        builder.add_node(name, loops.get(name, node))
    builder.add_node("finish_team", finish_team)

    builder.add_edge(START, "enter_team")
    builder.add_edge("enter_team", "supervisor")
    targets = ["supervisor_tools", "supervisor", *AGENTS]
    builder.add_conditional_edges(
        "supervisor", route_after_supervisor, {**{t: t for t in targets}, END: "finish_team"}
    )
    builder.add_edge("supervisor_tools", "supervisor")
    for name in (*SIMPLE_AGENTS, "research_evidence_agent", "image_agent"):
        builder.add_edge(name, "supervisor")
    builder.add_conditional_edges(
        "review_agent", route_after_review, {END: "finish_team", "supervisor": "supervisor"}
    )
    builder.add_edge("finish_team", END)

    if isinstance(checkpointer, Mapping):
        checkpointer = None
    graph = builder.compile(checkpointer=checkpointer, name="team")
    return graph.with_config(recursion_limit=team_recursion_limit(limits))
