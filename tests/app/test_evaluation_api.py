"""The evaluation routes refuse what they cannot do with a 4xx naming the field, write nothing
then, keep every resource to its API key, and are in the OpenAPI document with typed bodies.

Embedded, the real assistants (the scripted pipeline answers the one run a test needs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, service_settings
from tests.support.scripted_openai import ScriptedOpenAIServer

KEY = "evaluation-api-key-0123456789"
OTHER = "evaluation-api-other-0123456789"
BRIEF = {"request": "写一篇小红书笔记：平价护肤", "auto_confirm": True, "fast_mode": True}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with ScriptedOpenAIServer(atelier_responder()) as llm:
        settings = service_settings(
            tmp_path_factory.mktemp("api") / "data", llm.base_url, auth_api_keys=[KEY, OTHER]
        )
        with LiveServer(settings, None) as server:
            yield server


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=120, headers={"X-Api-Key": KEY}) as client:
        yield client


@pytest.fixture
def other(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=60, headers={"X-Api-Key": OTHER}) as client:
        yield client


def _dataset(http: httpx.Client, examples: int = 1) -> str:
    dataset = http.post("/datasets", json={"name": "briefs", "metadata": {"team": "a"}}).json()
    if examples:
        added = http.post(
            f"/datasets/{dataset['dataset_id']}/examples",
            json={"examples": [{"input": BRIEF}] * examples},
        )
        assert added.status_code == 200, added.text
    return str(dataset["dataset_id"])


def _locs(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 422, answer.text
    return [".".join(str(p) for p in error["loc"]) for error in answer.json()["detail"]]


@pytest.mark.parametrize(
    ("example", "loc"),
    [
        ({"input": {"request": ""}}, "body.examples.1.input.request"),
        ({"input": {"request": "x", "platform": "My Space"}}, "body.examples.1.input.platform"),
        ({"input": {"prompt": "x"}}, "body.examples.1.input.request"),
        (
            {"input": BRIEF, "expectations": {"title_max": -1}},
            "body.examples.1.expectations.title_max",
        ),
        ({"input": BRIEF, "expectations": {"musts": ["x"]}}, "body.examples.1.expectations.musts"),
        ({"input": BRIEF, "extra": 1}, "body.examples.1.extra"),
        ({"input": "写一篇"}, "body.examples.1.input"),
    ],
)
def test_a_bad_example_is_a_422_naming_it_and_nothing_is_added(
    http: httpx.Client, example: dict[str, Any], loc: str
) -> None:
    dataset_id = _dataset(http, examples=0)
    answer = http.post(
        f"/datasets/{dataset_id}/examples", json={"examples": [{"input": BRIEF}, example]}
    )
    assert loc in _locs(answer)
    assert "examples.1" in answer.json()["message"]
    assert http.get(f"/datasets/{dataset_id}/examples").json() == []
    assert http.get(f"/datasets/{dataset_id}").json()["example_count"] == 0


def test_jsonl_import_and_export_round_trip_and_a_bad_line_is_named(http: httpx.Client) -> None:
    dataset_id = _dataset(http, examples=0)
    text = (
        '{"input": {"request": "写一篇笔记：防晒"}, "expectations": {"must_include": ["防晒"]}}\n'
        "\n"
        '{"input": {"request": "写一篇笔记：保湿", "platform": "weibo"}}\n'
    )
    headers = {"Content-Type": "application/x-ndjson"}
    added = http.post(f"/datasets/{dataset_id}/examples/import", content=text, headers=headers)
    assert added.status_code == 200, added.text
    assert [e["position"] for e in added.json()] == [0, 1]
    exported = http.get(f"/datasets/{dataset_id}/export.jsonl")
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = exported.text.splitlines()
    assert len(lines) == 2 and '"must_include":["防晒"]' in lines[0]
    again = http.post(
        f"/datasets/{dataset_id}/examples/import",
        content=exported.text,
        headers={"Content-Type": "text/plain"},
    )
    assert again.status_code == 200 and len(again.json()) == 2

    bad = '{"input": {"request": "好"}}\nnot json\n'
    assert "body.lines.2" in _locs(
        http.post(f"/datasets/{dataset_id}/examples/import", content=bad, headers=headers)
    )
    wrong = '{"input": {"request": "好"}}\n{"input": {"request": "好", "fast_mode": "yes"}}\n'
    assert "body.examples.1.input.fast_mode" in _locs(
        http.post(f"/datasets/{dataset_id}/examples/import", content=wrong, headers=headers)
    )
    assert http.get(f"/datasets/{dataset_id}").json()["example_count"] == 4
    empty = http.post(f"/datasets/{dataset_id}/examples/import", content="\n", headers=headers)
    assert "body.lines" in _locs(empty)


def test_datasets_are_kept_to_their_key_and_updated(
    http: httpx.Client, other: httpx.Client
) -> None:
    dataset_id = _dataset(http)
    example_id = http.get(f"/datasets/{dataset_id}/examples").json()[0]["example_id"]
    for method, path, body in (
        ("GET", f"/datasets/{dataset_id}", None),
        ("PATCH", f"/datasets/{dataset_id}", {"name": "mine"}),
        ("DELETE", f"/datasets/{dataset_id}", None),
        ("GET", f"/datasets/{dataset_id}/examples", None),
        ("POST", f"/datasets/{dataset_id}/examples", {"examples": [{"input": BRIEF}]}),
        ("DELETE", f"/datasets/{dataset_id}/examples/{example_id}", None),
        ("GET", f"/datasets/{dataset_id}/export.jsonl", None),
    ):
        assert other.request(method, path, json=body).status_code == 404, (method, path)
    assert dataset_id not in str(other.post("/datasets/search", json={}).json())
    renamed = http.patch(
        f"/datasets/{dataset_id}", json={"name": " 新名字 ", "description": "说明"}
    ).json()
    assert renamed["name"] == "新名字" and renamed["description"] == "说明"
    assert renamed["metadata"] == {"team": "a"}  # unchanged
    found = http.post("/datasets/search", json={"name": "新名", "metadata": {"team": "a"}}).json()
    assert [d["dataset_id"] for d in found] == [dataset_id]
    assert http.delete(f"/datasets/{dataset_id}/examples/{example_id}").status_code == 204
    assert http.delete(f"/datasets/{dataset_id}/examples/{example_id}").status_code == 404
    assert http.delete(f"/datasets/{dataset_id}").status_code == 204
    assert http.get(f"/datasets/{dataset_id}").status_code == 404
    assert "body.name" in _locs(http.post("/datasets", json={"name": "   "}))
    assert "body.metadata" in _locs(
        http.post("/datasets", json={"name": "x", "metadata": {'a"': 1}})
    )


def test_examples_are_made_from_the_callers_threads(
    http: httpx.Client, other: httpx.Client
) -> None:
    run = http.post("/runs/wait", json={"assistant_id": "atelier", "input": BRIEF})
    assert run.status_code == 200, run.text
    (thread,) = http.post(
        "/threads/search", json={"metadata": {"graph_id": "atelier"}, "limit": 1}
    ).json()
    dataset_id = _dataset(http, examples=0)
    path = f"/datasets/{dataset_id}/examples/from-threads"
    (example,) = http.post(path, json={"thread_ids": [thread["thread_id"]]}).json()
    assert example["input"] == BRIEF
    assert example["source"]["thread_id"] == thread["thread_id"]
    # Another key's thread is as missing as an unknown one; an empty thread has no request.
    other_dataset = _dataset(other, examples=0)
    refused = other.post(
        f"/datasets/{other_dataset}/examples/from-threads",
        json={"thread_ids": [thread["thread_id"]]},
    )
    assert refused.status_code == 404
    empty = http.post("/threads", json={}).json()
    assert "body.thread_ids.0" in _locs(http.post(path, json={"thread_ids": [empty["thread_id"]]}))


@pytest.mark.parametrize(
    ("arms", "status", "loc"),
    [
        ([{"assistant_id": "atelier"}], 422, "body.arms"),
        ([{"assistant_id": "atelier"}, {"assistant_id": "nobody"}], 404, "arms.1.assistant_id"),
        ([{"assistant_id": "atelier"}, {"assistant_id": "team"}], 422, "body.arms.1.assistant_id"),
        ([{"assistant_id": "atelier"}, {"assistant_id": "atelier"}], 422, "body.arms.1.name"),
        (
            [{"assistant_id": "atelier"}, {"assistant_id": "atelier", "name": "b", "version": 2}],
            422,
            "body.arms.1.version",
        ),
        (
            [
                {"assistant_id": "atelier", "models": {"writer": "gpt-4o"}},
                {"assistant_id": "atelier", "name": "b"},
            ],
            422,
            "body.arms.0.models",
        ),
        (
            [
                {"assistant_id": "atelier", "models": {"critic": "bad name"}},
                {"assistant_id": "atelier", "name": "b"},
            ],
            422,
            "body.arms.0.models",
        ),
    ],
)
def test_an_experiment_that_cannot_run_is_refused_naming_the_arm(
    http: httpx.Client, arms: list[dict[str, Any]], status: int, loc: str
) -> None:
    dataset_id = _dataset(http)
    answer = http.post("/experiments", json={"dataset_id": dataset_id, "arms": arms})
    assert answer.status_code == status, answer.text
    if status == 422:
        assert loc in _locs(answer)
    else:
        assert loc in answer.json()["message"] or "nobody" in answer.json()["message"]
    assert http.post("/experiments/search", json={"dataset_id": dataset_id}).json() == []


def test_experiments_need_the_callers_dataset_with_examples_and_a_pinned_version(
    http: httpx.Client, other: httpx.Client
) -> None:
    arms = [{"assistant_id": "atelier"}, {"assistant_id": "atelier", "name": "again"}]
    empty = _dataset(http, examples=0)
    assert "body.dataset_id" in _locs(
        http.post("/experiments", json={"dataset_id": empty, "arms": arms})
    )
    mine = _dataset(http)
    assert other.post("/experiments", json={"dataset_id": mine, "arms": arms}).status_code == 404
    preset = http.post("/assistants", json={"graph_id": "atelier", "name": "青禾"}).json()
    missing = http.post(
        "/experiments",
        json={
            "dataset_id": mine,
            "arms": [
                {"assistant_id": "atelier"},
                {"assistant_id": preset["assistant_id"], "version": 7},
            ],
        },
    )
    assert missing.status_code == 404 and "version 7" in missing.json()["message"]
    theirs = other.post(
        "/experiments",
        json={
            "dataset_id": _dataset(other),
            "arms": [{"assistant_id": "atelier"}, {"assistant_id": preset["assistant_id"]}],
        },
    )
    assert theirs.status_code == 404
    started = http.post(
        "/experiments",
        json={
            "dataset_id": mine,
            "arms": [{"assistant_id": "atelier"}, {"assistant_id": preset["assistant_id"]}],
            "max_concurrency": 1,
        },
    ).json()
    assert [arm["name"] for arm in started["arms"]] == ["atelier", "青禾@v1"]
    assert started["arms"][1]["version"] == 1  # the latest, pinned
    experiment_id = started["experiment_id"]
    for method, path in (
        ("GET", f"/experiments/{experiment_id}"),
        ("POST", f"/experiments/{experiment_id}/cancel"),
        ("DELETE", f"/experiments/{experiment_id}"),
        ("GET", f"/experiments/{experiment_id}/stream"),
    ):
        assert other.request(method, path).status_code == 404, (method, path)
    assert other.post("/experiments/search", json={}).json() == []
    assert http.delete(f"/experiments/{experiment_id}").status_code == 204
    bad_cursor = http.get(f"/experiments/{experiment_id}/stream", headers={"Last-Event-ID": "x"})
    assert bad_cursor.status_code == 422


def test_the_evaluation_setting_is_checked_and_kept_to_its_key(
    http: httpx.Client, other: httpx.Client
) -> None:
    for rate in (1.5, -0.1, "half", None):
        answer = http.put("/assistants/atelier/evaluation", json={"sample_rate": rate})
        assert "body.sample_rate" in _locs(answer)
    assert http.put("/assistants/nobody/evaluation", json={"sample_rate": 0.5}).status_code == 404
    preset = http.post("/assistants", json={"graph_id": "atelier", "name": "青禾"}).json()
    path = f"/assistants/{preset['assistant_id']}/evaluation"
    assert http.put(path, json={"sample_rate": 0.25}).json()["sample_rate"] == 0.25
    assert other.put(path, json={"sample_rate": 1}).status_code == 404
    assert other.get(path).status_code == 404
    assert http.get(path).json()["sample_rate"] == 0.25
    window = http.get(
        path, params={"since": "2030-01-01T00:00:00Z", "until": "2020-01-01T00:00:00Z"}
    )
    assert "query.since" in _locs(window)
    far = http.get(path, params={"until": "0001-01-02T00:00:00"})
    assert far.status_code == 422


def test_the_document_lists_every_evaluation_route_with_typed_bodies(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    paths = document["paths"]
    expected = {
        ("post", "/datasets"): "DatasetCreate",
        ("post", "/datasets/search"): "DatasetSearch",
        ("patch", "/datasets/{dataset_id}"): "DatasetUpdate",
        ("post", "/datasets/{dataset_id}/examples"): "ExamplesIn",
        ("post", "/datasets/{dataset_id}/examples/from-threads"): "ThreadsIn",
        ("post", "/experiments"): "ExperimentCreate",
        ("post", "/experiments/search"): "ExperimentSearch",
        ("put", "/assistants/{assistant_id}/evaluation"): "EvaluationIn",
    }
    for (method, path), model in expected.items():
        body = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}, (method, path)
    answers = {
        ("get", "/datasets/{dataset_id}"): "DatasetOut",
        ("get", "/experiments/{experiment_id}"): "ExperimentDetail",
        ("get", "/assistants/{assistant_id}/evaluation"): "EvaluationReport",
    }
    for (method, path), model in answers.items():
        ok = paths[path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{model}"}
    imported = paths["/datasets/{dataset_id}/examples/import"]["post"]["requestBody"]["content"]
    assert list(imported) == ["text/plain"]
    stream = paths["/experiments/{experiment_id}/stream"]["get"]["responses"]["200"]["content"]
    assert "text/event-stream" in stream
    assert {"404", "409", "422"} <= set(paths["/experiments"]["post"]["responses"])
    assert "409" in paths["/datasets/{dataset_id}/examples"]["post"]["responses"]
