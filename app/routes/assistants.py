"""Assistants: the graphs this service runs, searchable and drawable.

POST /assistants/search          list them (filter by graph_id, name, metadata)
POST /assistants/count           how many match
GET  /assistants/{id}            one assistant
GET  /assistants/{id}/graph      its graph as nodes and edges (`xray` opens subgraphs)
GET  /assistants/{id}/schemas    JSON schemas of its input, output and state
GET  /assistants/{id}/subgraphs  its subgraphs' schemas by namespace (`/subgraphs/{ns}`, `recurse`)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter

from app.deps import PrincipalDep, RunsDep
from app.schemas import AssistantCount, AssistantOut, AssistantSearch
from engine.assistants import Assistant
from engine.manager import RunManager
from engine.serde import to_jsonable

router = APIRouter(tags=["assistants"])

AssistantId = Annotated[str, Path(min_length=1, max_length=128, description="Assistant id.")]
MAX_XRAY_DEPTH = 10


def _assistant(manager: RunManager, assistant_id: str) -> Assistant:
    return manager.assistant(assistant_id)


@router.post("/assistants/search", response_model=list[AssistantOut], summary="Search assistants")
async def search_assistants(
    body: AssistantSearch, manager: RunsDep, _owner: PrincipalDep
) -> list[dict[str, Any]]:
    """List the assistants matching every given filter."""
    found = [
        a.to_json()
        for a in manager.list_assistants()
        if (body.graph_id is None or a.graph_id == body.graph_id)
        and (body.name is None or a.spec.name == body.name)
        and not body.metadata  # assistants carry no metadata: any filter excludes them
    ]
    if body.sort_by is not None:
        key = body.sort_by
        found.sort(key=lambda a: str(a[key]), reverse=body.sort_order == "desc")
    return found[body.offset : body.offset + body.limit]


@router.post("/assistants/count", response_model=int, summary="Count assistants")
async def count_assistants(body: AssistantCount, manager: RunsDep, _owner: PrincipalDep) -> int:
    """Return how many assistants match every given filter."""
    return sum(
        1
        for a in manager.list_assistants()
        if (body.graph_id is None or a.graph_id == body.graph_id)
        and (body.name is None or a.spec.name == body.name)
        and not body.metadata  # assistants carry no metadata: any filter excludes them
    )


@router.get("/assistants/{assistant_id}", response_model=AssistantOut, summary="Get an assistant")
async def get_assistant(
    assistant_id: AssistantId, manager: RunsDep, _owner: PrincipalDep
) -> dict[str, Any]:
    """Return one assistant."""
    return _assistant(manager, assistant_id).to_json()


def _xray(value: str) -> bool | int:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered.isdigit() and int(lowered) <= MAX_XRAY_DEPTH:
        return int(lowered)
    raise RequestValidationError(
        [
            {
                "type": "value_error",
                "loc": ("query", "xray"),
                "msg": f"xray must be true, false or a depth 0-{MAX_XRAY_DEPTH}",
            }
        ]
    )


@router.get("/assistants/{assistant_id}/graph", summary="Draw an assistant's graph")
async def get_graph(
    assistant_id: AssistantId,
    manager: RunsDep,
    _owner: PrincipalDep,
    xray: Annotated[
        str, Query(max_length=5, description="Open subgraphs: true, false or a depth.")
    ] = "false",
) -> dict[str, Any]:
    """Return the graph as `{nodes, edges}` (what LangGraph Studio draws)."""
    graph = _assistant(manager, assistant_id).graph
    drawable = await graph.aget_graph(xray=_xray(xray))
    return to_jsonable(drawable.to_json())


def _state_schema(graph: Any) -> dict[str, Any]:
    """Return the JSON schema of a compiled StateGraph's state."""
    state_type: Any = graph.builder.state_schema
    adapter: TypeAdapter[Any] = TypeAdapter(state_type)
    return adapter.json_schema()


@router.get("/assistants/{assistant_id}/schemas", summary="An assistant's JSON schemas")
async def get_schemas(
    assistant_id: AssistantId, manager: RunsDep, _owner: PrincipalDep
) -> dict[str, Any]:
    """Return the JSON schemas of the assistant's input, output and state."""
    assistant = _assistant(manager, assistant_id)
    graph = assistant.graph

    def schema(get: Any) -> dict[str, Any] | None:
        try:
            return to_jsonable(get())
        except Exception:  # a schema LangGraph cannot describe is left out
            return None

    input_schema = (
        assistant.spec.input_model.model_json_schema()
        if assistant.spec.input_model is not None
        else schema(graph.get_input_jsonschema)
    )
    return {
        "graph_id": assistant.graph_id,
        "input_schema": input_schema,
        "output_schema": schema(graph.get_output_jsonschema),
        "state_schema": schema(lambda: _state_schema(graph)),
        "config_schema": None,
        "context_schema": None,
    }


def _graph_schemas(graph_id: str, graph: Any) -> dict[str, Any]:
    """Return a (sub)graph's schemas in the Platform's `GraphSchema` shape."""

    def schema(get: Any) -> dict[str, Any] | None:
        try:
            return to_jsonable(get())
        except Exception:  # a schema LangGraph cannot describe is left out
            return None

    return {
        "graph_id": graph_id,
        "input_schema": schema(graph.get_input_jsonschema),
        "output_schema": schema(graph.get_output_jsonschema),
        "state_schema": schema(lambda: _state_schema(graph)),
        "config_schema": None,
        "context_schema": None,
    }


async def _subgraphs(
    manager: RunManager, assistant_id: str, namespace: str | None, recurse: bool
) -> dict[str, Any]:
    assistant = _assistant(manager, assistant_id)
    found = {
        ns: _graph_schemas(assistant.graph_id, subgraph)
        async for ns, subgraph in assistant.graph.aget_subgraphs(
            namespace=namespace, recurse=recurse
        )
    }
    return found


@router.get("/assistants/{assistant_id}/subgraphs", summary="An assistant's subgraphs")
async def get_subgraphs(
    assistant_id: AssistantId,
    manager: RunsDep,
    _owner: PrincipalDep,
    recurse: bool = False,
) -> dict[str, Any]:
    """Return the schemas of the graph's subgraphs by namespace (`recurse`: nested too)."""
    return await _subgraphs(manager, assistant_id, None, recurse)


@router.get("/assistants/{assistant_id}/subgraphs/{namespace}", summary="One subgraph's schemas")
async def get_subgraphs_at(
    assistant_id: AssistantId,
    namespace: Annotated[str, Path(min_length=1, max_length=512, description="Namespace.")],
    manager: RunsDep,
    _owner: PrincipalDep,
    recurse: bool = False,
) -> dict[str, Any]:
    """Return the schemas of the subgraphs under one namespace (e.g. `executor`)."""
    return await _subgraphs(manager, assistant_id, namespace, recurse)
