"""The OpenAPI document: valid, and describing what run streams carry."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from app.main import create_app
from core.events import PipelineEvent
from tests.app.harness import service_settings

STREAM_PATHS = (
    ("/threads/{thread_id}/runs/stream", "post"),
    ("/runs/stream", "post"),
    ("/threads/{thread_id}/runs/{run_id}/stream", "get"),
)


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = service_settings(tmp_path_factory.mktemp("data"), "http://127.0.0.1:9/v1")
    return TestClient(create_app(settings)).get("/openapi.json").json()  # no lifespan needed


def event_types() -> set[str]:
    union = typing.get_args(typing.get_args(PipelineEvent)[0])
    return {model.model_fields["type"].default for model in union}


def test_the_document_validates(document: dict[str, Any]) -> None:
    validate(document)


def test_every_pipeline_event_is_listed_in_a_discriminated_union(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    union = schemas["PipelineEvent"]
    assert union["discriminator"]["propertyName"] == "type"
    assert set(union["discriminator"]["mapping"]) == event_types()
    for ref in union["discriminator"]["mapping"].values():
        name = ref.rsplit("/", 1)[-1]
        assert name in schemas and "type" in schemas[name]["properties"]
    assert len(event_types()) == 10


def test_stream_endpoints_reference_the_frames_with_an_example(document: dict[str, Any]) -> None:
    for path, method in STREAM_PATHS:
        content = document["paths"][path][method]["responses"]["200"]["content"]
        stream = content["text/event-stream"]
        assert stream["schema"] == {"$ref": "#/components/schemas/StreamFrame"}
        assert "event: metadata" in stream["example"] and "event: end" in stream["example"]
    frame = document["components"]["schemas"]["StreamFrame"]
    refs = {item.get("$ref") for item in frame["properties"]["data"]["anyOf"]}
    assert "#/components/schemas/PipelineEvent" in refs


def test_run_requests_document_their_bounds(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    modes = schemas["RunCreate"]["properties"]["stream_mode"]
    assert "messages-tuple" in str(modes) and "events" not in str(modes)
    assert schemas["RunCreate"]["additionalProperties"] is False
    for path in ("/threads", "/threads/search", "/assistants/search", "/runs/wait"):
        assert path in document["paths"]
