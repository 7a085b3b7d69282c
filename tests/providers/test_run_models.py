"""A run may name another model for a role (`configurable.models`): an experiment's arm does.

The factory reads the run's config when a node asks for its role's model; outside a
run, or for a role the run does not name, the deployment's model serves. Requests go
to the scripted OpenAI server, which records the model each one names.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from core.settings import Settings
from providers.llm import MAX_RUN_MODELS, OpenAIModelFactory, run_models
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer


class _State(TypedDict, total=False):
    roles: list[str]


def _graph(factory: OpenAIModelFactory) -> Any:
    async def ask(state: _State) -> dict[str, Any]:
        for role in state["roles"]:
            await factory(role).ainvoke("你好")
        return {}

    builder = StateGraph(_State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile()


async def test_a_run_names_a_model_per_role_and_other_roles_keep_the_deployments() -> None:
    with ScriptedOpenAIServer(lambda _req: Reply.text("好")) as server:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_base_url=server.base_url,
            llm_model="scripted",
            llm_max_retries=0,
        )
        factory = OpenAIModelFactory(settings)
        try:
            graph = _graph(factory)
            models = {"writer_agent": "cheap-writer", "critic": "strict-critic"}
            await graph.ainvoke(
                {"roles": ["writer_agent", "critic", "planner"]},
                {"configurable": {"models": models}},
            )
            await graph.ainvoke({"roles": ["writer_agent"]})
            assert [r.model for r in server.requests] == [
                "cheap-writer",
                "strict-critic",
                "scripted",
                "scripted",
            ]
            assert run_models() == {}  # outside a run
            assert factory("writer_agent") is factory(
                "writer_agent"
            )  # the deployment's, built once
        finally:
            await factory.aclose()


async def test_the_models_a_factory_builds_for_runs_are_bounded() -> None:
    settings = Settings(_env_file=None, llm_base_url="http://127.0.0.1:9/v1")  # type: ignore[call-arg]
    factory = OpenAIModelFactory(settings)
    try:

        async def build(name: str) -> None:
            async def node(_state: _State) -> dict[str, Any]:
                factory("writer_agent")
                return {}

            builder = StateGraph(_State)
            builder.add_node("node", node)
            builder.add_edge(START, "node")
            await builder.compile().ainvoke(
                {}, {"configurable": {"models": {"writer_agent": name}}}
            )

        for n in range(MAX_RUN_MODELS):
            await build(f"model-{n}")
        await build("model-0")  # one it built already
        with pytest.raises(ValueError, match="other models"):
            await build("one-too-many")
    finally:
        await factory.aclose()
