"""The pipeline's shape: every node and edge of PRODUCT.md §1.1, with the team drawn inside."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from agentkit.context import AtelierContext, RunOptions
from agentkit.state import PipelineInput
from core.agents import AGENTS
from graphs.pipeline import build_pipeline

ROOT = Path(__file__).resolve().parents[2]
PIPELINE_NODES = ("planner", "rag", "executor", "critic", "finalize")


def edges(drawing: Any) -> set[tuple[str, str, bool]]:
    return {(e.source, e.target, bool(e.conditional)) for e in drawing.edges}


def test_the_pipeline_has_the_five_nodes_and_the_edges_of_the_spec_and_the_card_redraw() -> None:
    graph = build_pipeline()
    assert graph.name == "atelier"
    assert graph.context_schema is AtelierContext
    drawing = graph.get_graph()
    # The spec's five nodes, plus redraw_card: one card again (issue 15, nodes.redraw_card),
    # and adapter: the writer adapting a finished post instead of the team (issue 35).
    assert set(drawing.nodes) == {
        "__start__",
        *PIPELINE_NODES,
        "redraw_card",
        "adapter",
        "__end__",
    }
    assert edges(drawing) == {
        ("__start__", "planner", False),
        ("planner", "rag", True),
        ("planner", "finalize", True),  # unknown intent / unrecoverable error
        ("planner", "planner", True),  # the question written, then the pause on it
        ("rag", "executor", True),
        ("rag", "adapter", True),  # the input adapts a post (agentkit.adaptation)
        ("executor", "critic", False),
        ("adapter", "critic", False),
        ("critic", "finalize", True),  # passed, exhausted or failed
        ("critic", "rag", True),  # retry
        ("critic", "planner", True),  # replan
        ("finalize", "__end__", True),
        ("finalize", "redraw_card", True),  # a state update as finalize asked for a card
        ("redraw_card", "critic", False),
    }


def test_xray_draws_the_team_inside_the_executor() -> None:
    drawing = build_pipeline().get_graph(xray=True)
    nodes = set(drawing.nodes)
    for node in ("planner", "rag", "critic", "finalize"):
        assert node in nodes
    for agent in (*AGENTS, "supervisor", "research_evidence_tools", "image_tools"):
        assert f"executor:{agent}" in nodes, agent
    found = edges(drawing)
    # planner → rag → executor → critic, with the executor's own entry and end.
    # The team's entry (it resolves the loop bounds) stands for the executor's start.
    assert ("rag", "executor:enter_team", True) in found
    assert ("executor:enter_team", "executor:supervisor", False) in found
    assert ("executor:supervisor", "executor:writer_agent", True) in found
    assert ("executor:writer_agent", "executor:supervisor", False) in found
    # The team's last node (it shows the finished post in its own conversation).
    assert ("executor:finish_team", "critic", False) in found
    for source, target in (
        ("planner", "rag"),
        ("planner", "finalize"),
        ("critic", "finalize"),
        ("critic", "rag"),
        ("critic", "planner"),
    ):
        assert (source, target, True) in found
    assert ("finalize", "__end__", True) in found
    mermaid = drawing.draw_mermaid()
    assert "subgraph executor" in mermaid


def test_input_and_output_schemas() -> None:
    graph = build_pipeline()
    properties = graph.get_input_jsonschema()["properties"]
    assert set(properties) == set(PipelineInput.__annotations__)
    assert {
        "request",
        "platform",
        "audience",
        "constraints",
        "reference_images",
        "layout_preference",
        "image_provider",
        "image_count",
        "fast_mode",
        "auto_confirm",
    } <= set(properties)
    assert graph.get_input_jsonschema()["required"] == ["request"]
    assert set(graph.get_output_jsonschema()["properties"]) == {"result"}


def test_langgraph_json_serves_the_pipeline_as_atelier() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))

    def load(spec: str) -> Any:
        module_name, variable = spec.split(":")
        return getattr(importlib.import_module(module_name), variable)

    atelier, team, app = (
        load(config["graphs"]["atelier"]),
        load(config["graphs"]["team"]),
        load(config["http"]["app"]),
    )
    assert atelier.name == "atelier" and team.name == "team"
    assert set(atelier.get_graph().nodes) >= set(PIPELINE_NODES)
    # LangGraph's server sends the context as JSON: the schema is the serializable one,
    # and the start-up that binds the services is the http app's lifespan.
    assert atelier.context_schema is RunOptions and team.context_schema is RunOptions
    assert atelier.get_context_jsonschema()["properties"]
    assert isinstance(app, Starlette) and not app.routes
