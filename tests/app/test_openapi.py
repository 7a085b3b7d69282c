"""The OpenAPI document: valid, and describing what run streams carry."""

from __future__ import annotations

import typing
from collections.abc import Iterator
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


# --------------------------------------------------------------------------- the truth (issue 11)


@pytest.fixture(scope="module")
def keyed_document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = service_settings(
        tmp_path_factory.mktemp("keyed"), "http://127.0.0.1:9/v1", auth_api_keys=["k" * 32]
    )
    client = TestClient(create_app(settings))
    return client.get("/openapi.json").json()  # public: no key needed


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                yield path, method, operation


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def test_the_keyed_document_validates(keyed_document: dict[str, Any]) -> None:
    validate(keyed_document)


@pytest.mark.parametrize("which", ["open", "keyed"])
def test_every_ref_resolves(
    which: str, document: dict[str, Any], keyed_document: dict[str, Any]
) -> None:
    doc = document if which == "open" else keyed_document
    schemas = doc["components"]["schemas"]
    dangling = {
        ref for ref in refs(doc) if ref.removeprefix("#/components/schemas/") not in schemas
    }
    assert not dangling
    upload = doc["paths"]["/assets"]["post"]["requestBody"]["content"]["application/json"]
    assert upload["schema"]["properties"]["data"]["type"] == "string"  # Base64Upload, inline


def test_401_is_documented_on_every_protected_operation_when_keyed(
    document: dict[str, Any], keyed_document: dict[str, Any]
) -> None:
    for path, _method, operation in operations(keyed_document):
        public = path in (
            "/ok",
            "/health",
            "/ready",
            "/",
            "/a2a/{assistant_id}/.well-known/agent-card.json",
        )
        assert ("401" in operation["responses"]) is not public, path
    assert not any("401" in op["responses"] for _p, _m, op in operations(document))


@pytest.mark.parametrize(
    ("path", "method", "statuses"),
    [
        ("/threads", "post", {"200", "400", "409", "413", "422"}),
        ("/threads/{thread_id}", "get", {"200", "404", "422"}),
        ("/threads/prune", "post", {"200", "400", "413", "422"}),
        ("/threads/{thread_id}/runs/stream", "post", {"200", "404", "409", "413", "422"}),
        ("/runs/wait", "post", {"200", "404", "409", "413", "422"}),
        ("/threads/{thread_id}/runs/{run_id}", "delete", {"204", "404", "409", "422"}),
        ("/threads/{thread_id}/runs/{run_id}/cancel", "post", {"200", "202", "404", "409"}),
        ("/knowledge/notes/{note_id}", "patch", {"200", "404", "409", "413", "422"}),
        ("/assets", "post", {"200", "201", "413", "415", "422"}),
        ("/assistants/{assistant_id}", "get", {"200", "404", "422"}),
    ],
)
def test_error_statuses_are_documented_where_they_happen(
    document: dict[str, Any], path: str, method: str, statuses: set[str]
) -> None:
    responses = document["paths"][path][method]["responses"]
    assert statuses <= set(responses)
    for status, response in responses.items():
        if int(status) >= 400:
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorResponse"}


def test_probes_document_no_invented_errors(document: dict[str, Any]) -> None:
    assert set(document["paths"]["/health"]["get"]["responses"]) == {"200"}
    assert set(document["paths"]["/ready"]["get"]["responses"]) == {"200", "503"}


def test_a_frame_id_is_documented_as_the_text_the_id_line_carries(
    document: dict[str, Any],
) -> None:
    frame_id = document["components"]["schemas"]["StreamFrame"]["properties"]["id"]
    assert frame_id["type"] == "string" and frame_id["pattern"] == "^[1-9][0-9]*$"


def test_query_integers_and_booleans_are_documented_with_their_bounds(
    document: dict[str, Any],
) -> None:
    params = {
        p["name"]: p["schema"]
        for p in document["paths"]["/threads/{thread_id}/runs"]["get"]["parameters"]
    }
    assert params["offset"]["type"] == "integer" and params["offset"]["maximum"] == 1_000_000
    assert params["limit"]["maximum"] == 1000
    cancel = document["paths"]["/threads/{thread_id}/runs/{run_id}/cancel"]["post"]
    wait = next(p for p in cancel["parameters"] if p["name"] == "wait")
    assert wait["schema"]["type"] == "boolean"


@pytest.mark.parametrize(
    ("path", "method", "body", "answer", "statuses"),
    [
        ("/runs/crons", "post", "CronCreate", "CronOut", {"200", "404", "422"}),
        ("/threads/{thread_id}/runs/crons", "post", "ThreadCronCreate", "CronOut", {"404"}),
        ("/runs/crons/{cron_id}", "patch", "CronUpdate", "CronOut", {"404", "422"}),
        ("/runs/crons/search", "post", "CronSearch", None, {"422"}),
        ("/runs/crons/count", "post", "CronCount", None, {"422"}),
    ],
)
def test_the_cron_routes_are_listed_with_typed_bodies(
    document: dict[str, Any],
    path: str,
    method: str,
    body: str,
    answer: str | None,
    statuses: set[str],
) -> None:
    operation = document["paths"][path][method]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert request == {"$ref": f"#/components/schemas/{body}"}
    assert statuses <= set(operation["responses"])
    if answer is not None:
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{answer}"}
    schemas = document["components"]["schemas"]
    assert schemas[body]["additionalProperties"] is False
    assert {"204", "404"} <= set(document["paths"]["/runs/crons/{cron_id}"]["delete"]["responses"])


def test_a_cron_schedule_documents_its_bounds(document: dict[str, Any]) -> None:
    schedule = document["components"]["schemas"]["CronCreate"]["properties"]["schedule"]
    assert schedule["maxLength"] == 256 and schedule["examples"]


@pytest.mark.parametrize(
    ("path", "method", "body", "answer", "statuses"),
    [
        ("/assistants", "post", "AssistantCreate", "AssistantOut", {"200", "409", "422"}),
        ("/assistants/{assistant_id}", "patch", "AssistantPatch", "AssistantOut", {"404", "409"}),
        ("/assistants/{assistant_id}/versions", "post", "AssistantVersionSearch", None, {"404"}),
        ("/assistants/{assistant_id}/latest", "post", "AssistantLatest", "AssistantOut", {"409"}),
        ("/assistants/search", "post", "AssistantSearch", None, {"422"}),
        ("/assistants/count", "post", "AssistantCount", None, {"422"}),
    ],
)
def test_the_assistant_routes_are_listed_with_typed_bodies(
    document: dict[str, Any],
    path: str,
    method: str,
    body: str,
    answer: str | None,
    statuses: set[str],
) -> None:
    operation = document["paths"][path][method]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert request == {"$ref": f"#/components/schemas/{body}"}
    assert statuses <= set(operation["responses"])
    if answer is not None:
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{answer}"}
    assert document["components"]["schemas"][body]["additionalProperties"] is False
    deleting = document["paths"]["/assistants/{assistant_id}"]["delete"]["responses"]
    assert {"204", "404", "409"} <= set(deleting)


def test_an_assistants_context_is_documented_as_a_brand_preset(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    context = str(schemas["AssistantCreate"]["properties"]["context"])
    assert "'$ref': '#/components/schemas/BrandPreset'" in context
    preset = schemas["BrandPreset"]
    assert preset["additionalProperties"] is False
    assert preset["properties"]["image_count"]["maximum"] == 9
    assert "url" not in str(sorted(preset["properties"])).lower()  # no endpoint a client sets


#: Every campaign route: (path, method, request body, success status, answer, statuses).
CAMPAIGN_ROUTES = [
    ("/campaigns", "post", "CampaignCreate", "201", "CampaignOut", {"404", "422", "503"}),
    ("/campaigns/search", "post", "CampaignSearch", "200", None, {"422"}),
    ("/campaigns/{campaign_id}", "get", None, "200", "CampaignOut", {"404"}),
    ("/campaigns/{campaign_id}", "patch", "CampaignUpdate", "200", "CampaignOut", {"404"}),
    ("/campaigns/{campaign_id}", "delete", None, "204", None, {"404"}),
    ("/campaigns/{campaign_id}/plan", "post", None, "200", "CampaignOut", {"404", "409"}),
    ("/campaigns/{campaign_id}/start", "post", None, "200", "CampaignOut", {"404", "409"}),
    ("/campaigns/{campaign_id}/items", "get", None, "200", None, {"404"}),
    ("/campaigns/{campaign_id}/items", "post", "ItemCreate", "201", "ItemOut", {"409", "422"}),
    ("/campaigns/{campaign_id}/items/{item_id}", "patch", "ItemUpdate", "200", "ItemOut", {"409"}),
    ("/campaigns/{campaign_id}/items/{item_id}", "delete", None, "204", None, {"404", "409"}),
    ("/campaigns/{campaign_id}/items/{item_id}/approve", "post", None, "200", "ItemOut", {"409"}),
    (
        "/campaigns/{campaign_id}/items/{item_id}/reject",
        "post",
        "Rejection",
        "200",
        "ItemOut",
        {"409", "422"},
    ),
    ("/campaigns/{campaign_id}/publications", "get", None, "200", None, {"404"}),
    ("/campaigns/{campaign_id}/stream", "get", None, "200", None, {"404"}),
]


@pytest.mark.parametrize(("path", "method", "body", "ok", "answer", "statuses"), CAMPAIGN_ROUTES)
def test_the_campaign_routes_are_listed_with_typed_bodies_and_answers(
    document: dict[str, Any],
    path: str,
    method: str,
    body: str | None,
    ok: str,
    answer: str | None,
    statuses: set[str],
) -> None:
    operation = document["paths"][path][method]
    assert operation["tags"] == ["campaigns"] and operation["summary"]
    assert {ok, *statuses} <= set(operation["responses"])
    if body is not None:
        request = operation["requestBody"]["content"]["application/json"]["schema"]
        assert request == {"$ref": f"#/components/schemas/{body}"}
        assert document["components"]["schemas"][body]["additionalProperties"] is False
    if answer is not None:
        shown = operation["responses"][ok]["content"]["application/json"]["schema"]
        assert shown == {"$ref": f"#/components/schemas/{answer}"}
    paths = [p for p in document["paths"] if p.startswith("/campaigns")]
    listed = {
        (p, m)
        for p in paths
        for m in document["paths"][p]
        if m in ("get", "post", "patch", "delete")
    }
    assert listed == {(p, m) for p, m, *_ in CAMPAIGN_ROUTES}


def test_a_campaign_documents_its_bounds_and_its_stream(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    create = schemas["CampaignCreate"]["properties"]
    assert create["posts"]["maximum"] == 60 and create["brief"]["maxLength"] == 4000
    assert "weibo" in str(create["platforms"]) and create["platforms"]["maxItems"] == 7
    assert schemas["WindowIn"]["properties"]["min_gap_minutes"]["maximum"] == 10080
    mapping = str(schemas["McpPublisher"]["properties"]["arguments"])
    assert "image_urls" in mapping and "password" not in mapping
    stream = document["paths"]["/campaigns/{campaign_id}/stream"]["get"]["responses"]["200"]
    events = stream["content"]["text/event-stream"]
    assert "event: metadata" in events["example"] and "event: end" in events["example"]
