"""The OpenAPI document's description of what run streams carry.

FastAPI documents JSON bodies by itself; a `text/event-stream` response needs its
schemas added by hand. `install_openapi` adds to `components.schemas`:

* every pipeline event of `core.events` and their discriminated union
  `PipelineEvent` (on `type`), so Apifox and Swagger show what `custom` frames carry;
* the `data` of the control frames (`RunMetadataData`, `ErrorData`, `GapData`,
  `EndData`);
* `StreamFrame`, one SSE frame (`id`, `event`, `data`), which the stream endpoints
  reference from their `text/event-stream` response (with an example stream).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import TypeAdapter

from app.schemas import EndData, ErrorData, GapData, RunMetadataData
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
            "id": {"type": "integer", "minimum": 1, "description": "Per-run sequence number."},
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


def install_openapi(app: FastAPI) -> None:
    """Add the stream schemas to the app's OpenAPI document (built once, then cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in stream_schemas().items():
                schemas.setdefault(name, schema)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
