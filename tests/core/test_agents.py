"""The agents are declared once (core.agents): every list of them elsewhere agrees with it."""

from __future__ import annotations

import importlib
import inspect
from typing import get_args

import pytest

from agentkit.routing import SupervisorTarget, check_basic_preconditions, stage_done
from agentkit.state import TeamOutput, TeamState
from core.agents import AGENT_TABLE, AGENTS, AgentName
from core.settings import LLM_ROLES
from graphs.team import SIMPLE_AGENTS, build_team
from nodes.supervisor import SupervisorDecision, stage_status
from prompts import supervisor as prompt


def test_the_literal_the_tuple_and_the_table_list_the_same_agents_in_order() -> None:
    assert AGENTS == get_args(AgentName) == tuple(AGENT_TABLE)
    assert len(set(AGENTS)) == len(AGENTS)
    assert all(AGENT_TABLE[name].name == name for name in AGENTS)


def test_every_agent_is_an_llm_role_and_a_supervisor_target() -> None:
    assert ("planner", "supervisor", *AGENTS, "critic", "judge", "campaign_planner") == LLM_ROLES
    assert get_args(SupervisorTarget) == ("supervisor", *AGENTS, "__end__")
    enum = SupervisorDecision.model_json_schema()["properties"]["next_agent"]["enum"]
    assert enum == [*AGENTS, "END"]


def test_every_agent_is_a_node_of_the_team_and_simple_ones_hand_back() -> None:
    graph = build_team().get_graph()
    assert set(AGENTS) <= set(graph.nodes)
    assert [name for name in AGENTS if AGENT_TABLE[name].simple] == SIMPLE_AGENTS
    plain = {(e.source, e.target) for e in graph.edges if not e.conditional}
    for name in AGENTS:
        assert ((name, "supervisor") in plain) is AGENT_TABLE[name].simple, name


@pytest.mark.parametrize("name", AGENTS)
def test_an_agents_node_is_the_function_of_its_own_module(name: str) -> None:
    node = getattr(importlib.import_module(f"nodes.{name}"), name)
    assert inspect.iscoroutinefunction(node)


@pytest.mark.parametrize("name", AGENTS)
def test_an_agents_fields_are_state_fields(name: str) -> None:
    agent = AGENT_TABLE[name]
    assert agent.output in TeamOutput.__annotations__
    assert agent.done_when.split(".")[0] in TeamState.__annotations__ or (
        agent.done_when.split(".")[0] in TeamOutput.__annotations__
    )
    if agent.needs is not None:
        assert agent.needs in AGENT_TABLE and agent.needs != name


def test_the_supervisor_prompt_renders_the_roster_and_the_preconditions() -> None:
    for agent in AGENT_TABLE.values():
        assert f"- {agent.name}：{agent.duty}" in prompt.SYSTEM
    needing = [agent for agent in AGENT_TABLE.values() if agent.needs is not None]
    assert needing  # PRODUCT.md §1.2's three preconditions, at least
    for agent in needing:
        provider = AGENT_TABLE[agent.needs]  # type: ignore[index]
        rule = f"{agent.name} 需要先有{provider.output_label}（{provider.done_when}）。"
        assert rule in prompt.SYSTEM
    # The rules are numbered 1..n with no gap.
    numbers = [line.split(".")[0] for line in prompt.RULES.splitlines()]
    assert numbers == [str(n) for n in range(1, len(numbers) + 1)]


@pytest.mark.parametrize("name", [a.name for a in AGENT_TABLE.values() if a.needs is not None])
def test_routing_enforces_the_rule_the_prompt_states(name: AgentName) -> None:
    provider = AGENT_TABLE[name].needs
    assert provider is not None
    # Everything done except the provider's stage: the agent is redirected to the provider.
    state = {
        "creative_brief": {"topic": "x"},
        "image_plans": [{"slot": 1}],
        "generated_content": {"body": "正文"},
    }
    field = AGENT_TABLE[provider].done_when.split(".")[0]
    without = {k: v for k, v in state.items() if k != field}
    assert not stage_done(provider, without)
    assert check_basic_preconditions(name, without) == provider
    assert check_basic_preconditions(name, state) == name


def test_the_stage_table_shows_every_agents_output() -> None:
    table = stage_status({})
    for agent in AGENT_TABLE.values():
        assert f"❌ {agent.output}（{agent.name}）" in table
