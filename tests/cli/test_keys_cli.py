"""`atelier keys`: managed keys made, listed, revoked and rotated from the command line.

On the embedded database (while a keyed server runs on the same DATA_DIR, which sees
each change within a second) and on PostgreSQL (DATABASE_URL).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.main import create_app
from cli.main import cli
from core.settings import Settings
from tests.support.servers import (  # noqa: F401 - the PostgreSQL fixtures
    migrated_postgres_url,
    postgres_cluster,
)

runner = CliRunner()
ADMIN_KEY = "cli-keys-admin-0123456789"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point DATA_DIR at a fresh directory, away from any .env of the developer."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    monkeypatch.setenv("DATA_DIR", str(data))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    return data


@pytest.fixture
def server(data_dir: Path) -> Iterator[TestClient]:
    """A keyed server on the same DATA_DIR (it owns the directory; the CLI does not need to)."""
    settings = Settings(
        data_dir=data_dir, llm_base_url="http://127.0.0.1:9/v1", auth_api_keys=[ADMIN_KEY]
    )  # type: ignore[call-arg]
    with TestClient(create_app(settings)) as client:
        yield client


def create(*args: str) -> dict[str, object]:
    result = runner.invoke(cli, ["keys", "create", "--json", *args])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_a_key_made_on_the_command_line_works_until_it_is_revoked(server: TestClient) -> None:
    made = create("--name", "Client B", "--role", "member", "--quota", "crons=50")
    assert str(made["key"]).startswith("atl_") and str(made["webhook_secret"]).startswith("whsec_")
    assert made["quotas"] == {"crons": 50} and made["state"] == "active"
    headers = {"Authorization": f"Bearer {made['key']}"}
    me = server.get("/keys/me", headers=headers)
    assert me.status_code == 200 and me.json()["kind"] == "managed"

    listed = runner.invoke(cli, ["keys", "list"])
    assert listed.exit_code == 0 and "Client B" in listed.output
    assert (
        str(made["key"]) not in listed.output and str(made["webhook_secret"]) not in listed.output
    )
    rows = [
        json.loads(line)
        for line in runner.invoke(cli, ["keys", "list", "--json"]).stdout.splitlines()
    ]
    assert [(r["key_id"], r["state"]) for r in rows] == [(made["key_id"], "active")]

    rotated = runner.invoke(cli, ["keys", "rotate-webhook-secret", str(made["key_id"])])
    assert rotated.exit_code == 0 and "whsec_" in rotated.output

    revoked = runner.invoke(cli, ["keys", "revoke", str(made["key_id"])])
    assert revoked.exit_code == 0, revoked.output
    assert "0 cron(s) paused" in revoked.output
    time.sleep(1.2)  # the server trusts a lookup for a second at most
    refused = server.get("/keys/me", headers=headers)
    assert refused.status_code == 401 and "revoked" in refused.json()["message"]
    again = runner.invoke(cli, ["keys", "revoke", str(made["key_id"])])
    assert again.exit_code == 1 and "revoked already" in again.output

    audit = server.get(
        "/audit", params={"key_id": made["key_id"]}, headers={"X-Api-Key": ADMIN_KEY}
    )
    assert [(e["action"], e["actor"]) for e in audit.json()["items"]] == [
        ("key.revoke", "cli"),
        ("key.rotate_webhook_secret", "cli"),
        ("key.create", "cli"),
    ]
    active = runner.invoke(cli, ["keys", "list", "--active", "--json"])
    assert active.exit_code == 0 and active.stdout.strip() == ""


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--name", "x", "--role", "owner"], 1, "role"),
        (["--name", " ", "--role", "member"], 1, "name"),
        (["--name", "x", "--quota", "crons=-1"], 1, "quotas.crons"),
        (["--name", "x", "--quota", "tokens=5"], 1, "tokens"),
        (["--name", "x", "--quota", "crons"], 2, "name=number"),
        (["--name", "x", "--quota", "crons=lots"], 2, "not a number"),
        (["--name", "x", "--expires-at", "soon"], 2, "ISO 8601"),
        (["--name", "x", "--expires-at", "2001-01-01"], 1, "future"),
    ],
)
def test_bad_options_are_refused_naming_the_problem_and_make_nothing(
    data_dir: Path, args: list[str], code: int, said: str
) -> None:
    result = runner.invoke(cli, ["keys", "create", *args])
    assert result.exit_code == code, result.output
    assert said in result.output
    listed = runner.invoke(cli, ["keys", "list", "--json"])
    assert listed.exit_code == 0 and listed.stdout.strip() == ""


def test_revoking_an_unknown_key_says_so(data_dir: Path) -> None:
    result = runner.invoke(cli, ["keys", "revoke", "key_" + "0" * 24])
    assert result.exit_code == 1 and "not found" in result.output


def test_the_keys_live_in_postgresql_with_database_url(
    data_dir: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("migrated_postgres_url"))
    made = create("--name", "scaled", "--role", "read-only")
    rows = [
        json.loads(line)
        for line in runner.invoke(cli, ["keys", "list", "--json"]).stdout.splitlines()
    ]
    assert made["key_id"] in [r["key_id"] for r in rows]
    assert runner.invoke(cli, ["keys", "revoke", str(made["key_id"])]).exit_code == 0
    assert not (data_dir / "atelier.db").exists()  # nothing went to the embedded file
