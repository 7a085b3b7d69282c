"""The knowledge vault over HTTP: CRUD, optimistic updates, archive, list, search."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.security import owner_id_for
from core.settings import Settings

KEY = "knowledge-key-0123456789"
AUTH = {"X-Api-Key": KEY}
OTHER_KEY = "knowledge-other-key-987654"
OTHER = {"X-Api-Key": OTHER_KEY}


#: An endpoint nothing listens on: the app's lifespan then skips the embedded model,
#: and nothing in these tests calls an LLM.
NO_LLM = "http://127.0.0.1:9/v1"


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    """Return settings for an app with its data under tmp_path and no embedded model."""
    return Settings(data_dir=tmp_path / "data", llm_base_url=NO_LLM, **overrides)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(settings_for(tmp_path, auth_api_keys=[KEY, OTHER_KEY]))
    with TestClient(app, headers=AUTH) as client:
        yield client


def create(client: TestClient, **fields: Any) -> dict[str, Any]:
    response = client.post("/knowledge/notes", json={"type": "reference", **fields})
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_create_get_update_archive_round_trip(client: TestClient) -> None:
    created = client.post(
        "/knowledge/notes",
        json={"type": "blocker", "content": "  标题禁止使用绝对化用语  ", "tags": ["合规", "合规"]},
    )
    assert created.status_code == 201
    note = created.json()
    assert created.headers["location"] == f"/knowledge/notes/{note['id']}"
    assert note["content"] == "标题禁止使用绝对化用语"  # trimmed
    assert note["tags"] == ["合规"]  # repeats dropped
    assert (note["version"], note["status"]) == (1, "draft")
    assert note["owner"] == owner_id_for(KEY)

    assert client.get(f"/knowledge/notes/{note['id']}").json() == note

    updated = client.patch(
        f"/knowledge/notes/{note['id']}",
        json={"expected_version": 1, "status": "approved", "tags": ["合规", "广告法"]},
    )
    assert updated.status_code == 200
    assert updated.json()["version"] == 2
    assert updated.json()["status"] == "approved"
    assert updated.json()["content"] == note["content"]  # untouched fields stay

    archived = client.post(f"/knowledge/notes/{note['id']}/archive", json={"expected_version": 2})
    assert archived.status_code == 200
    assert (archived.json()["status"], archived.json()["version"]) == ("archived", 3)
    assert client.get(f"/knowledge/notes/{note['id']}").json()["status"] == "archived"


def test_a_stale_update_is_a_409_and_changes_nothing(client: TestClient) -> None:
    note = create(client, content="旧内容")
    first = client.patch(
        f"/knowledge/notes/{note['id']}", json={"expected_version": 1, "content": "甲的修改"}
    )
    assert first.status_code == 200

    second = client.patch(
        f"/knowledge/notes/{note['id']}", json={"expected_version": 1, "content": "乙的修改"}
    )

    assert second.status_code == 409
    body = second.json()
    assert body["error"] == "conflict"
    assert body["detail"]["current_version"] == 2
    assert body["detail"]["expected_version"] == 1
    assert "version 2" in body["message"]
    current = client.get(f"/knowledge/notes/{note['id']}").json()
    assert (current["content"], current["version"]) == ("甲的修改", 2)


def test_a_stale_archive_is_a_409(client: TestClient) -> None:
    note = create(client, content="x")
    client.patch(f"/knowledge/notes/{note['id']}", json={"expected_version": 1, "content": "y"})

    response = client.post(f"/knowledge/notes/{note['id']}/archive", json={"expected_version": 1})

    assert response.status_code == 409
    assert client.get(f"/knowledge/notes/{note['id']}").json()["status"] == "draft"


def test_archive_without_a_body_archives(client: TestClient) -> None:
    note = create(client, content="x")

    assert client.post(f"/knowledge/notes/{note['id']}/archive").json()["status"] == "archived"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/knowledge/notes/note_missing", None),
        ("PATCH", "/knowledge/notes/note_missing", {"expected_version": 1, "content": "x"}),
        ("POST", "/knowledge/notes/note_missing/archive", None),
    ],
)
def test_unknown_ids_are_404(
    client: TestClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    response = client.request(method, path, json=body)

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert "note_missing" in response.json()["message"]


def test_a_taken_id_is_a_409(client: TestClient) -> None:
    create(client, id="house_rule_1", content="x")

    response = client.post(
        "/knowledge/notes", json={"type": "blocker", "id": "house_rule_1", "content": "y"}
    )

    assert response.status_code == 409
    assert client.get("/knowledge/notes/house_rule_1").json()["content"] == "x"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "blocker", "content": "长" * 4001}, "body.content"),
        ({"type": "blocker", "content": "   "}, "body.content"),
        ({"type": "blocker"}, "body.content"),
        ({"type": "rumour", "content": "x"}, "body.type"),
        ({"type": "blocker", "content": "x", "tags": ["t"] * 21}, "body.tags"),
        ({"type": "blocker", "content": "x", "tags": ["长" * 51]}, "body.tags.0"),
        ({"type": "blocker", "content": "x", "owner": "o" * 129}, "body.owner"),
        ({"type": "blocker", "content": "x", "id": "a/b"}, "body.id"),
        ({"type": "blocker", "content": "x", "version": 7}, "body.version"),
        ({"type": "blocker", "content": "x", "status": "published"}, "body.status"),
    ],
    ids=[
        "content-4001",
        "content-blank",
        "content-missing",
        "type",
        "tag-count",
        "tag-length",
        "owner-length",
        "id-slash",
        "unknown-field",
        "status",
    ],
)
def test_bad_notes_are_422_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    response = client.post("/knowledge/notes", json=body)

    assert response.status_code == 422
    assert field in response.json()["message"]
    assert client.get("/knowledge/notes").json()["total"] == 0  # nothing half-created


def test_an_update_must_change_something_and_name_its_version(client: TestClient) -> None:
    note = create(client, content="x")

    nothing = client.patch(f"/knowledge/notes/{note['id']}", json={"expected_version": 1})
    no_version = client.patch(f"/knowledge/notes/{note['id']}", json={"content": "y"})
    id_change = client.patch(
        f"/knowledge/notes/{note['id']}", json={"expected_version": 1, "id": "other"}
    )

    assert nothing.status_code == 422 and "at least one of" in nothing.json()["message"]
    assert no_version.status_code == 422 and "expected_version" in no_version.json()["message"]
    assert id_change.status_code == 422 and "body.id" in id_change.json()["message"]
    assert client.get(f"/knowledge/notes/{note['id']}").json()["version"] == 1


def test_list_filters_and_pages(client: TestClient) -> None:
    for i in range(5):
        create(client, content=f"参考 {i}", tags=["Style"] if i % 2 == 0 else ["其他"])
    blocker = create(client, type="blocker", content="禁止夸大功效", status="approved")

    page = client.get("/knowledge/notes", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == 6 and (page["limit"], page["offset"]) == (2, 1)
    assert [n["content"] for n in page["items"]] == ["参考 1", "参考 2"]

    blockers = client.get("/knowledge/notes", params={"type": "blocker"}).json()
    assert [n["id"] for n in blockers["items"]] == [blocker["id"]]
    approved = client.get("/knowledge/notes", params={"status": "approved"}).json()
    assert approved["total"] == 1

    tagged = client.get("/knowledge/notes", params={"tag": "style", "limit": 2}).json()
    assert tagged["total"] == 3
    assert [n["content"] for n in tagged["items"]] == ["参考 0", "参考 2"]


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 201}, {"offset": -1}, {"type": "rumour"}, {"tag": "t" * 51}],
)
def test_list_bounds_are_enforced(client: TestClient, params: dict[str, Any]) -> None:
    response = client.get("/knowledge/notes", params=params)

    assert response.status_code == 422
    assert f"query.{next(iter(params))}" in response.json()["message"]


def test_search_ranks_chinese_text_and_skips_archived_notes(client: TestClient) -> None:
    rule = create(
        client,
        type="blocker",
        content="标题和正文禁止使用绝对化用语，例如最好、第一。",
        tags=["合规"],
    )
    create(client, type="reference", content="小红书封面图建议使用 3:4 竖图。", tags=["封面"])
    old = create(client, type="conclusion", content="绝对化用语会被平台限流。")
    client.post(f"/knowledge/notes/{old['id']}/archive")

    response = client.post("/knowledge/notes/search", json={"query": "绝对化用语", "limit": 5})

    assert response.status_code == 200
    result = response.json()
    assert result["query"] == "绝对化用语"
    ids = [item["note"]["id"] for item in result["items"]]
    assert ids[0] == rule["id"]
    assert old["id"] not in ids
    assert 0 < result["items"][0]["score"] <= 1
    assert result["total_found"] == len(result["items"])


def test_search_only_approved(client: TestClient) -> None:
    draft = create(client, content="封面使用暖色调")
    approved = create(client, content="封面使用暖色调和大字标题", status="approved")

    result = client.post(
        "/knowledge/notes/search", json={"query": "封面", "only_approved": True}
    ).json()

    ids = [item["note"]["id"] for item in result["items"]]
    assert ids == [approved["id"]] and draft["id"] not in ids


@pytest.mark.parametrize(
    "body",
    [{"query": ""}, {"query": "   "}, {"query": "q" * 501}, {"query": "q", "limit": 51}, {}],
)
def test_bad_searches_are_422(client: TestClient, body: dict[str, Any]) -> None:
    response = client.post("/knowledge/notes/search", json=body)

    assert response.status_code == 422
    assert "body" in response.json()["message"]


def test_notes_survive_a_restart(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    with TestClient(create_app(settings)) as first:
        note = create(first, content="持久化的规则")

    with TestClient(create_app(settings)) as second:
        again = second.get(f"/knowledge/notes/{note['id']}")

    assert again.status_code == 200
    assert again.json()["content"] == "持久化的规则"


def test_notes_need_a_key(client: TestClient) -> None:
    response = client.get("/knowledge/notes", headers={"X-Api-Key": "not-the-key-000000000"})

    assert response.status_code == 401


def test_the_openapi_document_describes_bounded_note_fields(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]

    content = schemas["NoteCreate"]["properties"]["content"]
    assert content["maxLength"] == 4000 and content["description"] and content["examples"]
    tags = schemas["NoteCreate"]["properties"]["tags"]
    assert tags["maxItems"] == 20 and tags["items"]["maxLength"] == 50
    assert schemas["SearchRequest"]["properties"]["query"]["maxLength"] == 500


def test_a_note_lives_in_a_namespace_shared_by_default(client: TestClient) -> None:
    shared = create(client, content="通用规则")
    branded = create(client, content="品牌规则", namespace="brand-a")

    assert (shared["namespace"], branded["namespace"]) == ("shared", "brand-a")
    assert "principal" not in branded  # the key stays on the server
    in_brand = client.get("/knowledge/notes", params={"namespace": "brand-a"}).json()
    assert ([n["id"] for n in in_brand["items"]], in_brand["total"]) == ([branded["id"]], 1)
    moved = client.patch(
        f"/knowledge/notes/{shared['id']}", json={"expected_version": 1, "namespace": "brand-b"}
    )
    assert (moved.status_code, moved.json()["namespace"]) == (200, "brand-b")
    searched = client.post(
        "/knowledge/notes/search", json={"query": "规则", "namespaces": ["brand-a"]}
    ).json()
    assert [item["note"]["id"] for item in searched["items"]] == [branded["id"]]


def test_two_keys_never_see_each_others_notes(client: TestClient) -> None:
    mine = create(client, content="甲方的咖啡店规则", id="mine")
    theirs = client.post(
        "/knowledge/notes",
        json={"type": "blocker", "content": "乙方的咖啡店规则", "id": "theirs"},
        headers=OTHER,
    )
    assert theirs.status_code == 201

    assert [n["id"] for n in client.get("/knowledge/notes").json()["items"]] == [mine["id"]]
    listed = client.get("/knowledge/notes", headers=OTHER).json()
    assert [n["id"] for n in listed["items"]] == ["theirs"]
    for path, method in (("", "GET"), ("/archive", "POST")):
        response = client.request(method, f"/knowledge/notes/theirs{path}")
        assert response.status_code == 404, path
    patched = client.patch("/knowledge/notes/theirs", json={"expected_version": 1, "tags": ["x"]})
    assert patched.status_code == 404
    found = client.post("/knowledge/notes/search", json={"query": "咖啡店规则"}).json()
    assert [item["note"]["id"] for item in found["items"]] == ["mine"]
    assert client.get("/knowledge/notes/theirs", headers=OTHER).json()["version"] == 1


@pytest.mark.parametrize("namespace", ["", "Brand-A", "-a", "a b", "品牌", "a" * 65])
def test_a_bad_namespace_is_a_422_naming_it(client: TestClient, namespace: str) -> None:
    created = client.post(
        "/knowledge/notes", json={"type": "blocker", "content": "x", "namespace": namespace}
    )
    listed = client.get("/knowledge/notes", params={"namespace": namespace})
    searched = client.post(
        "/knowledge/notes/search", json={"query": "x", "namespaces": [namespace]}
    )

    assert created.status_code == 422
    assert created.json()["detail"][0]["loc"] == ["body", "namespace"]
    assert searched.status_code == 422
    assert searched.json()["detail"][0]["loc"][:2] == ["body", "namespaces"]
    if namespace:  # an empty query parameter is no filter
        assert listed.status_code == 422
        assert listed.json()["detail"][0]["loc"] == ["query", "namespace"]
