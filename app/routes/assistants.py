"""Assistants: the graphs this service runs, and the saved configurations of them clients make.

POST   /assistants                  create one (a graph, config, context, metadata): version 1
POST   /assistants/search           list them (filter by graph_id, name, metadata)
POST   /assistants/count            how many match
GET    /assistants/{id}             one assistant (a created one at its latest version)
PATCH  /assistants/{id}             a new version, which becomes the latest
DELETE /assistants/{id}             delete it with its versions (its runs' threads stay)
POST   /assistants/{id}/versions    its versions, newest first
POST   /assistants/{id}/latest      pick the version runs use
GET  /assistants/{id}/graph      its graph as nodes and edges (`xray` opens subgraphs)
GET  /assistants/{id}/schemas    JSON schemas of its input, output and state
GET  /assistants/{id}/subgraphs  its subgraphs' schemas by namespace (`/subgraphs/{ns}`, `recurse`)

The built-in assistants (`atelier`, `team`: one per graph) are read-only and every
caller sees them; a created one belongs to the API key that created it (another key
gets 404, as for threads). An `atelier` assistant's context is a brand preset
(`agentkit.brand.BrandPreset`, its context schema).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter

from app.access import READ, WRITE
from app.deps import AssistantsDep, AuditDep, CallerDep, PrincipalDep
from app.schemas import (
    AssistantCount,
    AssistantCreate,
    AssistantLatest,
    AssistantOut,
    AssistantPatch,
    AssistantSearch,
    AssistantVersionSearch,
)
from engine import Assistant, AssistantsService, to_jsonable

router = APIRouter(tags=["assistants"])

AssistantId = Annotated[str, Path(min_length=1, max_length=128, description="Assistant id.")]
MAX_XRAY_DEPTH = 10


async def _assistant(assistants: AssistantsService, owner: str, assistant_id: str) -> Assistant:
    return await assistants.resolve(owner, assistant_id)


@router.post(
    "/assistants", response_model=AssistantOut, summary="Create an assistant", dependencies=[WRITE]
)
async def create_assistant(
    body: AssistantCreate, assistants: AssistantsDep, caller: CallerDep, audit: AuditDep
) -> dict[str, Any]:
    """Save a configuration of a graph as an assistant (version 1), owned by the caller."""
    assistant = await assistants.create(
        caller.owner,
        graph_id=body.graph_id,
        assistant_id=body.assistant_id,
        config=body.config.model_dump(exclude_none=True) if body.config else None,
        context=dict(body.context) if body.context is not None else None,
        metadata=body.metadata,
        name=body.name,
        description=body.description,
        if_exists=body.if_exists,
    )
    created = assistant.to_json()
    await audit.record(
        caller.actor,
        "assistant.create",
        subject=caller.owner,
        target=created["assistant_id"],
        details={"graph_id": created["graph_id"], "version": created["version"]},
    )
    return created


@router.post(
    "/assistants/search",
    response_model=list[AssistantOut],
    summary="Search assistants",
    dependencies=[READ],
)
async def search_assistants(
    body: AssistantSearch, assistants: AssistantsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """List the assistants matching every given filter: the built-in ones and the caller's."""
    return await assistants.search(
        owner,
        graph_id=body.graph_id,
        name=body.name,
        metadata=body.metadata,
        limit=body.limit,
        offset=body.offset,
        sort_by=body.sort_by,
        sort_order=body.sort_order,
    )


@router.post(
    "/assistants/count", response_model=int, summary="Count assistants", dependencies=[READ]
)
async def count_assistants(
    body: AssistantCount, assistants: AssistantsDep, owner: PrincipalDep
) -> int:
    """Return how many assistants match every given filter."""
    return await assistants.count(
        owner, graph_id=body.graph_id, name=body.name, metadata=body.metadata
    )


@router.get(
    "/assistants/{assistant_id}",
    response_model=AssistantOut,
    summary="Get an assistant",
    dependencies=[READ],
)
async def get_assistant(
    assistant_id: AssistantId, assistants: AssistantsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Return one assistant (a created one at its latest version)."""
    return (await _assistant(assistants, owner, assistant_id)).to_json()


@router.patch(
    "/assistants/{assistant_id}",
    response_model=AssistantOut,
    summary="Update an assistant",
    dependencies=[WRITE],
)
async def patch_assistant(
    assistant_id: AssistantId,
    body: AssistantPatch,
    assistants: AssistantsDep,
    caller: CallerDep,
    audit: AuditDep,
) -> dict[str, Any]:
    """Write a new version (the fields sent replace the latest's; metadata is merged).

    The new version becomes the latest; a built-in assistant is read-only (409).
    """
    changes = body.model_dump(exclude_unset=True)
    if body.config is not None:
        changes["config"] = body.config.model_dump(exclude_none=True)
    if body.context is not None:
        changes["context"] = dict(body.context)
    updated = (await assistants.update(caller.owner, assistant_id, changes)).to_json()
    await audit.record(
        caller.actor,
        "assistant.update",
        subject=caller.owner,
        target=assistant_id,
        details={"fields": sorted(changes), "version": updated["version"]},
    )
    return updated


@router.delete(
    "/assistants/{assistant_id}",
    status_code=204,
    summary="Delete an assistant",
    dependencies=[WRITE],
)
async def delete_assistant(
    assistant_id: AssistantId,
    assistants: AssistantsDep,
    caller: CallerDep,
    audit: AuditDep,
    delete_threads: Annotated[
        bool, Query(description="Delete its threads too: not supported (false only).")
    ] = False,
) -> Response:
    """Delete a created assistant with every version; its runs' threads stay readable."""
    if delete_threads:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("query", "delete_threads"),
                    "msg": "delete_threads is not supported: an assistant's threads stay; "
                    "delete them with DELETE /threads/{thread_id}",
                }
            ]
        )
    await assistants.delete(caller.owner, assistant_id)
    await audit.record(caller.actor, "assistant.delete", subject=caller.owner, target=assistant_id)
    return Response(status_code=204)


@router.post(
    "/assistants/{assistant_id}/versions",
    response_model=list[AssistantOut],
    summary="List an assistant's versions",
    dependencies=[READ],
)
async def list_versions(
    assistant_id: AssistantId,
    body: AssistantVersionSearch,
    assistants: AssistantsDep,
    owner: PrincipalDep,
) -> list[dict[str, Any]]:
    """Return the assistant's versions matching `metadata`, newest first."""
    return await assistants.versions(
        owner, assistant_id, metadata=body.metadata, limit=body.limit, offset=body.offset
    )


@router.post(
    "/assistants/{assistant_id}/latest",
    response_model=AssistantOut,
    summary="Set an assistant's latest version",
    dependencies=[WRITE],
)
async def set_latest_version(
    assistant_id: AssistantId,
    body: AssistantLatest,
    assistants: AssistantsDep,
    caller: CallerDep,
    audit: AuditDep,
) -> dict[str, Any]:
    """Make one version the latest: the one the assistant's runs use from now on."""
    latest = (await assistants.set_latest(caller.owner, assistant_id, body.version)).to_json()
    await audit.record(
        caller.actor,
        "assistant.set_latest",
        subject=caller.owner,
        target=assistant_id,
        details={"version": body.version},
    )
    return latest


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


@router.get(
    "/assistants/{assistant_id}/graph", summary="Draw an assistant's graph", dependencies=[READ]
)
async def get_graph(
    assistant_id: AssistantId,
    assistants: AssistantsDep,
    owner: PrincipalDep,
    xray: Annotated[
        str, Query(max_length=5, description="Open subgraphs: true, false or a depth.")
    ] = "false",
) -> dict[str, Any]:
    """Return the graph as `{nodes, edges}` (what LangGraph Studio draws)."""
    graph = (await _assistant(assistants, owner, assistant_id)).graph
    drawable = await graph.aget_graph(xray=_xray(xray))
    return to_jsonable(drawable.to_json())


def _state_schema(graph: Any) -> dict[str, Any]:
    """Return the JSON schema of a compiled StateGraph's state."""
    state_type: Any = graph.builder.state_schema
    adapter: TypeAdapter[Any] = TypeAdapter(state_type)
    return adapter.json_schema()


@router.get(
    "/assistants/{assistant_id}/schemas", summary="An assistant's JSON schemas", dependencies=[READ]
)
async def get_schemas(
    assistant_id: AssistantId, assistants: AssistantsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Return the JSON schemas of the assistant's input, output, state and context.

    The context schema is the graph's context type's (an atelier assistant's: a brand
    preset, `agentkit.brand.BrandPreset`); None where the graph takes any object.
    """
    assistant = await _assistant(assistants, owner, assistant_id)
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
        "context_schema": _context_schema(assistant),
    }


def _context_schema(assistant: Assistant) -> dict[str, Any] | None:
    context_type = assistant.spec.context_type
    if context_type is None:
        return None
    adapter: TypeAdapter[Any] = TypeAdapter(context_type)
    return adapter.json_schema()


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
    assistants: AssistantsService,
    owner: str,
    assistant_id: str,
    namespace: str | None,
    recurse: bool,
) -> dict[str, Any]:
    assistant = await _assistant(assistants, owner, assistant_id)
    found = {
        ns: _graph_schemas(assistant.graph_id, subgraph)
        async for ns, subgraph in assistant.graph.aget_subgraphs(
            namespace=namespace, recurse=recurse
        )
    }
    return found


@router.get(
    "/assistants/{assistant_id}/subgraphs", summary="An assistant's subgraphs", dependencies=[READ]
)
async def get_subgraphs(
    assistant_id: AssistantId,
    assistants: AssistantsDep,
    owner: PrincipalDep,
    recurse: bool = False,
) -> dict[str, Any]:
    """Return the schemas of the graph's subgraphs by namespace (`recurse`: nested too)."""
    return await _subgraphs(assistants, owner, assistant_id, None, recurse)


@router.get(
    "/assistants/{assistant_id}/subgraphs/{namespace}",
    summary="One subgraph's schemas",
    dependencies=[READ],
)
async def get_subgraphs_at(
    assistant_id: AssistantId,
    namespace: Annotated[str, Path(min_length=1, max_length=512, description="Namespace.")],
    assistants: AssistantsDep,
    owner: PrincipalDep,
    recurse: bool = False,
) -> dict[str, Any]:
    """Return the schemas of the subgraphs under one namespace (e.g. `executor`)."""
    return await _subgraphs(assistants, owner, assistant_id, namespace, recurse)
