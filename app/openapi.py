"""The OpenAPI document's description of what run streams carry.

FastAPI documents JSON bodies by itself; a `text/event-stream` response needs its
schemas added by hand. `install_openapi` adds to `components.schemas`:

* every pipeline event of `core.events` and their discriminated union
  `PipelineEvent` (on `type`), so Apifox and Swagger show what `custom` frames carry;
* the `data` of the control frames (`RunMetadataData`, `ErrorData`, `GapData`,
  `EndData`);
* `StreamFrame`, one SSE frame (`id`, `event`, `data`), which the stream endpoints
  reference from their `text/event-stream` response (with an example stream).

`POST /mcp`, the MCP endpoint (`app.mcp`), is an ASGI app FastAPI does not describe:
`mcp_path` documents it, with the JSON-RPC messages it carries (`JsonRpcMessage`)
and the answers of the `mcp` SDK's transport.

It also documents the error answers FastAPI cannot see, so the document says
what the server does (schemathesis checks every status against it, and Apifox
imports it): `ErrorResponse`, the one error body of the service (app/security.py),
on every error status, and per operation

* 401 on everything but the public paths, when API keys are configured (the
  document describes the server it is served by), and 403 on the routes a role may
  be refused (writes: a read-only key; admin routes: any but an admin key,
  `app.access`);
* 404 where a path names a resource, and on the run-creating operations (unknown
  assistant or thread);
* 409 where `CONFLICTS` says an operation can conflict;
* 503 on the run-creating operations (a database that takes no writes);
* 429 with `Retry-After` where a key's quota may refuse (`QUOTAS`: runs, crons,
  assistants, Store puts and searches);
* 400, 413 and 422 on every operation with a request body (an unreadable body,
  the body limit and the validation apply to all of them), 422 also where there
  are parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from app.access import Access, route_access
from app.errors import ERROR_CODES, endpoint_routes
from app.mcp import MCP_PATH
from app.schemas import EndData, ErrorData, GapData, RunMetadataData
from app.security import is_public
from core.events import PipelineEvent

_REF = "#/components/schemas/{model}"


def _schema_with_defs(adapter: TypeAdapter[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = adapter.json_schema(ref_template=_REF, mode="serialization")
    defs = schema.pop("$defs", {})
    return schema, defs


def stream_schemas() -> dict[str, Any]:
    """Return the component schemas describing run stream frames."""
    components: dict[str, Any] = {}
    union, defs = _schema_with_defs(TypeAdapter(PipelineEvent))
    components.update(defs)
    components["PipelineEvent"] = {
        **union,
        "title": "PipelineEvent",
        "description": "A pipeline event: the `data` of a `custom` frame (PRODUCT.md §2.3).",
    }
    for model in (RunMetadataData, ErrorData, GapData, EndData):
        schema, model_defs = _schema_with_defs(TypeAdapter(model))
        components.update(model_defs)
        components[model.__name__] = schema
    components["StreamFrame"] = {
        "title": "StreamFrame",
        "description": (
            "One Server-Sent Events frame: `id: <n>`, `event: <name>`, `data: <JSON>`. "
            "Events: `metadata` (first), `values`, `updates`, `messages` "
            "([message chunk, metadata], for stream mode messages-tuple), `custom` "
            "(a PipelineEvent), `tasks`, `debug`, `gap` (frames no longer kept), "
            "`error` (then `end`) and `end` (last). With stream_subgraphs, subgraph "
            "events carry their namespace: `updates|executor:<task id>`."
        ),
        "type": "object",
        "required": ["id", "event", "data"],
        "properties": {
            "id": {
                "type": "string",
                "pattern": "^[1-9][0-9]*$",
                "description": "Per-run sequence number, as the SSE `id:` line carries it "
                "(decimal text); send it back as Last-Event-ID to resume after it.",
                "examples": ["5"],
            },
            "event": {
                "type": "string",
                "pattern": r"^(metadata|values|updates|messages|custom|tasks|debug|gap|error|end)"
                r"(\|.+)?$",
            },
            "data": {
                "anyOf": [
                    {"$ref": _REF.format(model="RunMetadataData")},
                    {"$ref": _REF.format(model="PipelineEvent")},
                    {"$ref": _REF.format(model="ErrorData")},
                    {"$ref": _REF.format(model="GapData")},
                    {"$ref": _REF.format(model="EndData")},
                    {"description": "values, updates, messages, tasks, debug: LangGraph's data"},
                ]
            },
        },
    }
    return components


#: Operations that answer 409, and why.
_READ_ONLY = "A built-in assistant (atelier, team, campaign_planner) is read-only."
CONFLICTS: dict[tuple[str, str], str] = {
    ("post", "/threads"): "A thread with this thread_id exists (if_exists raise).",
    ("post", "/threads/{thread_id}/runs/{run_id}/cancel"): "The run has already ended.",
    ("delete", "/threads/{thread_id}/runs/{run_id}"): "The run is still pending or running.",
    ("post", "/knowledge/notes"): "The given id is taken.",
    ("patch", "/knowledge/notes/{note_id}"): "The note is no longer at `expected_version`.",
    ("post", "/knowledge/notes/{note_id}/archive"): "The note is no longer at `expected_version`.",
    ("post", "/threads/{thread_id}/state"): "The thread is running a run, or has never run a "
    "graph whose state could be updated.",
    ("get", "/threads/{thread_id}/export.zip"): "The thread has no finished post yet.",
    ("post", "/assistants"): "The assistant_id is a built-in assistant's, or taken "
    "(if_exists raise).",
    ("patch", "/assistants/{assistant_id}"): _READ_ONLY,
    ("delete", "/assistants/{assistant_id}"): _READ_ONLY,
    ("post", "/assistants/{assistant_id}/latest"): _READ_ONLY,
    ("post", "/datasets"): "The API key keeps the most datasets it may (delete one first).",
    ("post", "/datasets/{dataset_id}/examples"): "The dataset would hold too many examples.",
    ("post", "/datasets/{dataset_id}/examples/import"): "The dataset would hold too many examples.",
    ("post", "/datasets/{dataset_id}/examples/from-threads"): "The dataset would hold too "
    "many examples.",
    ("post", "/experiments"): "The API key runs (or keeps) the most experiments it may.",
}
_RUN_UNAVAILABLE = "The database takes no writes right now (locked or full); retry later."
_RUN_CONFLICT = (
    "The thread is busy (multitask_strategy reject), has no interrupt to resume, the "
    "server is shutting down, or the Idempotency-Key was used for another request."
)
_RUN_CREATING = (
    "/runs",
    "/runs/stream",
    "/runs/wait",
    "/threads/{thread_id}/runs",
    "/threads/{thread_id}/runs/stream",
    "/threads/{thread_id}/runs/wait",
)
_QUOTA = "The API key is over its quota {quotas} (docs/keys.md): nothing was {done}; " + (
    "retry after the `Retry-After` seconds. `detail` names the quota, its limit and the wait."
)
#: Operations a key's quotas may refuse (429, with `Retry-After`), and why.
QUOTAS: dict[tuple[str, str], str] = {
    **{
        ("post", path): _QUOTA.format(
            quotas="runs_at_once, runs_per_minute or monthly_spend", done="started"
        )
        for path in _RUN_CREATING
    },
    ("post", "/runs/crons"): _QUOTA.format(quotas="crons", done="created"),
    ("post", "/threads/{thread_id}/runs/crons"): _QUOTA.format(quotas="crons", done="created"),
    ("post", "/assistants"): _QUOTA.format(quotas="assistants", done="created"),
    ("put", "/store/items"): _QUOTA.format(quotas="store_bytes", done="stored"),
    ("post", "/store/items/search"): _QUOTA.format(
        quotas="store_searches_per_minute", done="searched"
    ),
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before a retry may pass.",
        "schema": {"type": "integer", "minimum": 1},
    }
}
_DESCRIPTIONS = {
    400: "The body cannot be read at all (not UTF-8 text, a broken multipart form).",
    401: "No valid API key (AUTH_API_KEYS): send 'Authorization: Bearer <key>' or "
    "'X-Api-Key: <key>'.",
    404: "What the path or body names does not exist (or belongs to another API key).",
    413: "The request body is larger than MAX_BODY_BYTES.",
    422: "The request is invalid; `detail` names each field and the rule it broke.",
}
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def error_schema() -> dict[str, Any]:
    """Return the schema of the service's error body (`app.errors.error_body`)."""
    return {
        "title": "ErrorResponse",
        "type": "object",
        "required": ["detail", "error", "message"],
        "properties": {
            "detail": {
                "description": "A message, the list of field errors of a 422, or an "
                "object with details (a 409 of the vault names the versions).",
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"$ref": _REF.format(model="FieldError")}},
                    {"type": "object"},
                ],
            },
            "error": {
                "type": "string",
                "description": "Error code.",
                "examples": sorted(set(ERROR_CODES.values())),
            },
            "message": {"type": "string", "description": "One sentence, safe to show."},
        },
    }


def field_error_schema() -> dict[str, Any]:
    """Return the schema of one field error in a 422's `detail`."""
    return {
        "title": "FieldError",
        "type": "object",
        "required": ["loc", "msg", "type"],
        "properties": {
            "loc": {
                "type": "array",
                "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "description": "Where: body, query, path or header, then the field path.",
            },
            "msg": {"type": "string", "description": "The rule the value broke."},
            "type": {"type": "string", "description": "Error type."},
            "ctx": {"type": "object", "description": "The rule's values (limits, patterns)."},
        },
    }


#: Why a role may be refused, by a route's access.
_FORBIDDEN = {
    Access.WRITE: "The API key's role is read-only: it may not create, change, delete or "
    "start anything.",
    Access.ADMIN: "The API key is not an admin key.",
}


def forbidden_operations(app: FastAPI) -> dict[tuple[str, str], str]:
    """Return the operations a role may be refused (403), with why, from the routes' access."""
    found: dict[tuple[str, str], str] = {}
    for route in endpoint_routes(app):
        if not isinstance(route, APIRoute):
            continue
        for access in route_access(route):
            if access in _FORBIDDEN:
                for method in route.methods or ():
                    found[method.lower(), route.path_format] = _FORBIDDEN[access]
    return found


def document_errors(
    document: dict[str, Any],
    *,
    keyed: bool,
    forbidden: Mapping[tuple[str, str], str] | None = None,
) -> None:
    """Add the error answers of every operation to an OpenAPI document, in place."""
    error_ref = {"$ref": _REF.format(model="ErrorResponse")}
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            parameters = operation.get("parameters", [])
            statuses: dict[int, str] = {}
            if keyed and not is_public(path):
                statuses[401] = _DESCRIPTIONS[401]
                if (method, path) in (forbidden or {}):
                    statuses[403] = (forbidden or {})[method, path]
            if any(p.get("in") == "path" for p in parameters) or path in _RUN_CREATING:
                statuses[404] = _DESCRIPTIONS[404]
            if (method, path) in CONFLICTS:
                statuses[409] = CONFLICTS[method, path]
            elif method == "post" and path in _RUN_CREATING:
                statuses[409] = _RUN_CONFLICT
            if method == "post" and path in _RUN_CREATING:
                statuses[503] = _RUN_UNAVAILABLE
            if (method, path) in QUOTAS:
                statuses[429] = QUOTAS[method, path]
            if "requestBody" in operation:
                statuses[400] = _DESCRIPTIONS[400]
                statuses[413] = _DESCRIPTIONS[413]
            if "requestBody" in operation or parameters:
                statuses[422] = _DESCRIPTIONS[422]
            responses = operation.setdefault("responses", {})
            for status, description in statuses.items():
                responses.setdefault(str(status), {"description": description})
            for status, response in responses.items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {"application/json": {"schema": error_ref}}
            if "429" in responses:
                responses["429"]["headers"] = _RETRY_AFTER
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorResponse"] = error_schema()
    schemas["FieldError"] = field_error_schema()
    # FastAPI's own 422 schemas are no longer referenced: every 422 is an ErrorResponse.
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


def mcp_path(*, keyed: bool) -> dict[str, Any]:
    """Return the path item of the MCP endpoint (`app.mcp`): its POST, the only method served.

    Its errors are the `mcp` SDK's (JSON-RPC error objects; a 406 of protocol 2026-07-28
    has no body), except the 401 and 413 the service's middleware answers first, the
    403 of `app.mcp_guard` and the 415 of `app.mcp.JsonBodiesOnly` (`ErrorResponse`).
    """
    message = {"$ref": _REF.format(model="JsonRpcMessage")}
    error_ref = {"$ref": _REF.format(model="ErrorResponse")}
    responses: dict[str, Any] = {
        "200": {
            "description": "A request's answer: a Server-Sent Events stream whose `data:` "
            "lines are JSON-RPC messages (the call's `notifications/progress`, then its "
            "response), or that response alone as JSON.",
            "content": {
                "text/event-stream": {"schema": {"$ref": _REF.format(model="McpStreamEvent")}},
                "application/json": {"schema": message},
            },
        },
        "202": {"description": "A notification or a response was accepted (no body)."},
        "400": {
            "description": "Not a JSON-RPC message, or a protocol version or request "
            "envelope the server does not accept (a JSON-RPC error).",
            "content": {"application/json": {"schema": message}},
        },
        "404": {
            "description": "Protocol 2026-07-28: the method does not exist (a JSON-RPC error).",
            "content": {"application/json": {"schema": message}},
        },
        "406": {
            "description": "The Accept header does not take both application/json and "
            "text/event-stream.",
            "content": {"application/json": {"schema": message}},
        },
        "413": {
            "description": _DESCRIPTIONS[413],
            "content": {"application/json": {"schema": error_ref}},
        },
        "403": {
            "description": "A browser's request from an origin outside CORS_ORIGINS, or, "
            "when the service runs without API keys, a Host that is neither loopback nor in "
            "MCP_ALLOWED_HOSTS (DNS rebinding protection, `app.mcp_guard`).",
            "content": {"application/json": {"schema": error_ref}},
        },
        "415": {
            "description": "The body is not declared application/json.",
            "content": {"application/json": {"schema": error_ref}},
        },
    }
    if keyed:
        responses["401"] = {
            "description": _DESCRIPTIONS[401],
            "content": {"application/json": {"schema": error_ref}},
        }
    return {
        "post": {
            "tags": ["mcp"],
            "summary": "MCP endpoint (Streamable HTTP): every assistant is a tool",
            "description": (
                "The Model Context Protocol's Streamable HTTP endpoint, served statelessly "
                "(no `Mcp-Session-Id`; GET and DELETE are not served). `tools/list` lists one "
                "tool per assistant (its input schema is the assistant's `input`); "
                "`tools/call` runs it on a new thread of the caller's API key and answers the "
                "post as text, with `notifications/progress` per pipeline stage and supervisor "
                "step when the call carries a progress token. Point an MCP client at this URL "
                "(docs/mcp.md)."
            ),
            "operationId": "mcp_post",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": message}},
            },
            "responses": responses,
            "security": [{"bearer": []}, {"apiKey": []}],
        }
    }


def json_rpc_schema() -> dict[str, Any]:
    """Return the schema of one JSON-RPC 2.0 message (request, notification or response)."""
    return {
        "title": "JsonRpcMessage",
        "description": "A JSON-RPC 2.0 message: a request (`id`, `method`, `params`), a "
        "notification (no `id`) or a response (`id` with `result` or `error`).",
        "type": "object",
        "required": ["jsonrpc"],
        "properties": {
            "jsonrpc": {"type": "string", "enum": ["2.0"]},
            "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
            "method": {"type": "string", "examples": ["initialize", "tools/list", "tools/call"]},
            "params": {"type": "object"},
            "result": {"type": "object"},
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                    "data": {},
                },
            },
        },
        "examples": [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}],
    }


def mcp_event_schema() -> dict[str, Any]:
    """Return the schema of one Server-Sent Event of the MCP endpoint."""
    return {
        "title": "McpStreamEvent",
        "description": "One Server-Sent Event of `POST /mcp`: `event: message` and a "
        "JSON-RPC message (`JsonRpcMessage`) as the JSON text of `data:`.",
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string", "enum": ["message"]},
            "id": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": _REF.format(model="JsonRpcMessage")},
            },
        },
    }


def install_openapi(app: FastAPI) -> None:
    """Complete the app's OpenAPI document (built once, then cached).

    Adds the stream schemas, the error answers (`document_errors`) and the MCP
    endpoint (`mcp_path`); 401s are documented when `app.state.settings` has API keys.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in stream_schemas().items():
                schemas.setdefault(name, schema)
            settings = getattr(app.state, "settings", None)
            keyed = bool(settings and settings.auth_api_keys)
            document_errors(document, keyed=keyed, forbidden=forbidden_operations(app))
            # After document_errors: the MCP endpoint's errors are JSON-RPC, not ErrorResponse.
            document.setdefault("paths", {})[MCP_PATH] = mcp_path(keyed=keyed)
            schemas["JsonRpcMessage"] = json_rpc_schema()
            schemas["McpStreamEvent"] = mcp_event_schema()
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
