"""No input reaches a 500 (issue 11): every value is bounded and typed where it enters.

Each test is one of the inputs schemathesis found answering 500, or its kind, sent
to the real app on uvicorn; each must be a 4xx naming the field and the rule, and
the server must have logged no unhandled error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.schemas import check_json_integers
from engine.serde import dumps, loads
from tests.app.harness import LiveServer, service_settings
from tests.app.sample_graphs import sample_assistants, scripted_reply
from tests.support.scripted_openai import ScriptedOpenAIServer

HUGE = 99999999999999999999  # 67 bits


@pytest.fixture
def http(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[httpx.Client]:
    with (
        ScriptedOpenAIServer(scripted_reply) as llm,
        LiveServer(service_settings(tmp_path / "data", llm.base_url), sample_assistants) as live,
        httpx.Client(
            base_url=live.url, timeout=30, headers={"content-type": "application/json"}
        ) as client,
    ):
        yield client
    unhandled = [r for r in caplog.records if "unhandled error" in r.getMessage()]
    assert not unhandled, "the server logged an unhandled error"


def field_error(response: httpx.Response, *loc: str | int) -> dict[str, Any]:
    """Assert a 422 whose detail names `loc`; return that error."""
    assert response.status_code == 422, response.text
    body = response.json()
    for error in body["detail"]:
        if tuple(error["loc"][: len(loc)]) == loc:
            return dict(error)
    raise AssertionError(f"no error at {loc}: {body['detail']}")


def studio(**extra: Any) -> dict[str, Any]:
    return {
        "assistant_id": "studio",
        "input": {"request": "写一篇笔记", "auto_confirm": True},
        **extra,
    }


# --------------------------------------------------------------------------- wide integers


def test_an_integer_beyond_64_bits_in_thread_metadata_is_a_422_not_a_500(
    http: httpx.Client,
) -> None:
    response = http.post("/threads", content=f'{{"metadata": {{"a": {HUGE}}}}}')

    error = field_error(response, "body", "metadata")
    assert "64-bit" in error["msg"]
    assert str(HUGE) not in response.text  # the value is not echoed


@pytest.mark.parametrize(
    "body",
    [
        f'{{"metadata": {{"a": [1, {{"b": {HUGE}}}]}}}}',
        f'{{"config": {{"configurable": {{"x": -{HUGE}}}}}}}',
        f'{{"input": {{"request": "x", "n": {HUGE}}}}}',
    ],
    ids=["metadata", "configurable", "input"],
)
def test_an_integer_beyond_64_bits_in_a_run_request_is_a_422_not_a_500(
    http: httpx.Client, body: str
) -> None:
    payload = '{"assistant_id": "slow", ' + body[1:]
    if '"input"' not in payload:
        payload = payload[:-1] + ', "input": {}}'

    response = http.post("/runs", content=payload)

    assert response.status_code == 422, response.text
    assert "64-bit" in response.json()["message"]


def test_an_integer_beyond_64_bits_in_a_resume_value_is_a_422(http: httpx.Client) -> None:
    response = http.post(
        "/runs", content=f'{{"assistant_id": "slow", "command": {{"resume": {HUGE}}}}}'
    )

    field_error(response, "body", "command", "resume")


def test_a_patch_or_search_with_a_wide_integer_is_a_422(http: httpx.Client) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]

    patched = http.patch(f"/threads/{thread}", content=f'{{"metadata": {{"a": {HUGE}}}}}')
    searched = http.post("/threads/search", content=f'{{"metadata": {{"a": {HUGE}}}}}')

    field_error(patched, "body", "metadata")
    field_error(searched, "body", "metadata")


def test_64_bit_integers_themselves_are_kept() -> None:
    value = {"max": 2**63 - 1, "min": -(2**63), "flag": True}
    assert check_json_integers(value) is value
    with pytest.raises(ValueError, match="64-bit"):
        check_json_integers({"a": [2**63]})


def test_the_event_log_writes_an_integer_beyond_64_bits_as_text() -> None:
    # A graph may still produce one (a model's JSON); the stream must not fail on it.
    assert loads(dumps({"n": HUGE, "ok": 1})) == {"n": str(HUGE), "ok": 1}


# --------------------------------------------------------------------------- numbers in queries


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/threads/{t}/runs?offset=99999999999999999999", "offset"),
        ("/threads/{t}/runs?limit=99999999999999999999", "limit"),
        ("/threads/{t}/history?limit=99999999999999999999", "limit"),
        ("/knowledge/notes?offset=99999999999999999999", "offset"),
    ],
)
def test_a_huge_number_in_a_query_is_a_422_naming_the_bound(
    http: httpx.Client, path: str, param: str
) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]

    response = http.get(path.format(t=thread))

    error = field_error(response, "query", param)
    assert error["type"] == "less_than_equal"


@pytest.mark.parametrize("value", ["254695.0", "1e3", "0x10", " 5", "1_000", "五"])
def test_a_query_integer_takes_decimal_digits_only(http: httpx.Client, value: str) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]

    response = http.get(f"/threads/{thread}/runs", params={"offset": value})

    field_error(response, "query", "offset")


@pytest.mark.parametrize(("value", "status"), [("yes", 422), ("on", 422), ("t", 422)])
def test_a_query_boolean_is_true_false_1_or_0(http: httpx.Client, value: str, status: int) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]

    refused = http.get(f"/threads/{thread}/state", params={"subgraphs": value})
    accepted = [
        http.get(f"/threads/{thread}/state", params={"subgraphs": v}).status_code
        for v in ("true", "false", "1", "0")
    ]

    assert refused.status_code == status
    field_error(refused, "query", "subgraphs")
    assert accepted == [200, 200, 200, 200]


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/threads/search", {"offset": 254695.0}, ("body", "offset")),
        ("/threads/search", {"limit": "10"}, ("body", "limit")),
        ("/assistants/search", {"offset": 2**40}, ("body", "offset")),
        ("/runs", studio(stream_subgraphs="true"), ("body", "stream_subgraphs")),
        ("/runs", studio(stream_resumable=1), ("body", "stream_resumable")),
        ("/knowledge/notes/search", {"query": "x", "only_approved": "false"}, ("body",)),
    ],
)
def test_json_bodies_are_strict_about_integers_and_booleans(
    http: httpx.Client, path: str, body: dict[str, Any], loc: tuple[str, ...]
) -> None:
    field_error(http.post(path, json=body), *loc)


# --------------------------------------------------------------------------- headers


def test_a_note_id_outside_latin_1_is_percent_encoded_in_location(http: httpx.Client) -> None:
    response = http.post(
        "/knowledge/notes", json={"id": "笔记1", "type": "blocker", "content": "不要夸大"}
    )

    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/knowledge/notes/%E7%AC%94%E8%AE%B01"
    assert http.get(response.headers["location"]).json()["id"] == "笔记1"


@pytest.mark.parametrize("note_id", ["a\x00b", "a\x7fb", "a?b#c", "%41"])
def test_a_note_id_with_odd_characters_never_breaks_the_location_header(
    http: httpx.Client, note_id: str
) -> None:
    response = http.post(
        "/knowledge/notes", json={"id": note_id, "type": "blocker", "content": "x"}
    )

    assert response.status_code in (201, 422), response.text
    if response.status_code == 201:
        assert response.headers["location"].isascii()


def test_a_405_allows_every_method_the_path_serves(http: httpx.Client) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]

    response = http.put(f"/threads/{thread}")

    assert response.status_code == 405
    assert response.headers["allow"] == "DELETE, GET, PATCH"


# --------------------------------------------------------------------------- commands


@pytest.mark.parametrize(
    ("command", "loc"),
    [
        ({"goto": ""}, ("body", "command", "goto")),
        ({"goto": []}, ("body", "command")),  # an empty goto is no goto (RemoteGraph)
        ({"goto": "no_such_node"}, ("body", "command", "goto")),
        ({"goto": ["__start__"]}, ("body", "command", "goto")),
        ({"update": {"no_such_key": 1}}, ("body", "command", "update")),
        ({"update": [["", 1]]}, ("body", "command", "update")),
    ],
)
def test_an_empty_or_unknown_goto_or_update_target_is_a_422(
    http: httpx.Client, command: dict[str, Any], loc: tuple[str, ...]
) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]

    for path in ("/runs/wait", f"/threads/{thread}/runs/wait"):
        response = http.post(
            path, json={"assistant_id": "studio", "command": command, "if_not_exists": "create"}
        )
        field_error(response, *loc)
    runs = http.get(f"/threads/{thread}/runs").json()
    assert runs == []  # nothing was recorded


def test_a_known_goto_target_is_accepted(http: httpx.Client) -> None:
    response = http.post("/runs/wait", json={"assistant_id": "slow", "command": {"goto": "step"}})

    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("extra", "threaded", "loc", "message"),
    [
        (
            {"input": {"request": "", "colour": "red"}},
            False,
            ["body", "input", "request"],
            "Invalid request: body.input.request: String should have at least 1 character; "
            "body.input.colour: Extra inputs are not permitted",
        ),
        (
            {"input": None, "command": {"goto": "nope"}},
            True,
            ["body", "command", "goto"],
            "Invalid request: body.command.goto: command.goto names unknown nodes ['nope']; "
            "nodes: ['executor', 'finalize', 'planner']",
        ),
        (
            {"interrupt_before": ["nope"]},
            False,
            ["body", "interrupt_before"],
            "Invalid request: body.interrupt_before: interrupt_before names unknown nodes "
            "['nope']; nodes: ['executor', 'finalize', 'planner']",
        ),
        (
            {"checkpoint_id": "1"},
            False,
            ["body", "checkpoint"],
            "Invalid request: body.checkpoint: a run from a checkpoint needs a thread "
            "(POST /threads/{thread_id}/runs…)",
        ),
        (
            {"on_completion": "keep"},
            True,
            ["body", "on_completion"],
            "Invalid request: body.on_completion: on_completion applies to thread-less runs "
            "(POST /runs, /runs/stream, /runs/wait)",
        ),
    ],
    ids=["input", "goto", "interrupt_before", "checkpoint", "on_completion"],
)
def test_what_the_assistant_refuses_is_a_422_naming_each_field(
    http: httpx.Client, extra: dict[str, Any], threaded: bool, loc: list[str], message: str
) -> None:
    # The engine checks a request against its assistant; it answers as a body failing its model.
    path = "/runs/wait"
    if threaded:
        path = f"/threads/{http.post('/threads', json={}).json()['thread_id']}/runs/wait"

    response = http.post(path, json=studio(**extra))

    assert response.json()["message"] == message
    assert field_error(response, *loc)["type"] in ("value_error", "string_too_short")


# --------------------------------------------------------------------------- history and search


@pytest.mark.parametrize(
    "before",
    [{"configurable": "x"}, {"checkpoint_id": 5}, {"configurable": {"checkpoint_id": ""}}, {}],
)
def test_a_history_cursor_without_a_checkpoint_id_is_a_422(
    http: httpx.Client, before: dict[str, Any]
) -> None:
    thread = http.post("/threads", json={}).json()["thread_id"]

    field_error(http.post(f"/threads/{thread}/history", json={"before": before}), "body", "before")


@pytest.mark.parametrize("key", ['a"b', "a\\b", "a\x00b", ""])
def test_a_metadata_key_a_search_cannot_address_is_a_422(http: httpx.Client, key: str) -> None:
    field_error(http.post("/threads/search", json={"metadata": {key: 1}}), "body", "metadata")
