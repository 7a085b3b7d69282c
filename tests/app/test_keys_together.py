"""Managed keys with what was built beside them: webhook signing, quotas, revocation.

Issue 33's cross-feature acceptance, on the three deployments (tests/app/harness.py),
keyed with one `AUTH_API_KEYS` admin and managed keys made through `POST /keys`:

* each managed key's deliveries are signed with the `webhook_secret` `POST /keys`
  answered (the docs' verification snippet, run as written), a replay under another
  delivery id verifies with no secret, a rotated key's deliveries verify with the old
  and the new secret during the overlap, and the bootstrap key keeps WEBHOOK_SECRET;
* a key's `quotas` from its record are its limits: its third cron over `crons: 2` is
  a 429 naming `crons`, a PATCH applies within the keys' cache time, and
  `GET /keys/{key_id}/usage` shows the override, to the key and to an admin.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.routes.keys import Quotas
from core.settings import Settings
from engine import QUOTA_NAMES
from engine.services.keys import CACHE_SECONDS
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
    wait_until,
)
from tests.app.sample_graphs import sample_assistants, scripted_reply
from tests.app.test_webhooks import Receiver
from tests.support.docs import code_block
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

ADMIN_KEY = "keys-together-admin-0123456789"
ADMIN = {"X-Api-Key": ADMIN_KEY}
#: The deployment's WEBHOOK_SECRET: what the bootstrap key's deliveries are signed with.
SHARED = "whsec_deployment_wide_secret"
CRON = {"assistant_id": "burst", "schedule": "0 9 * * *", "input": {"count": 1}}


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """Two API replicas behind nginx and two workers (which deliver), keyed."""
    env = {
        "AUTH_API_KEYS": ADMIN_KEY,
        "WEBHOOK_ALLOW_PRIVATE": "true",
        "WEBHOOK_SECRET": SHARED,
    }
    with processes_deployment(request, tmp_path_factory, llm.base_url, env=env) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            llm.base_url,
            auth_api_keys=[ADMIN_KEY],
            webhook_allow_private=True,
            webhook_secret=SHARED,
            **scale,
        )

    with serve_deployment(request, settings, sample_assistants, ADMIN) as served:
        yield served


def make_key(url: str, **fields: Any) -> dict[str, Any]:
    body = {"name": "a member", "role": "member", **fields}
    answer = httpx.post(f"{url}/keys", json=body, headers=ADMIN, timeout=30)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def as_key(made: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {made['key']}"}


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The docs' recipe (docs/webhooks.md, "Webhooks"), run as written."""
    namespace: dict[str, Any] = {}
    exec(code_block("webhooks", "python"), namespace)
    return bool(namespace["verify"](secret, headers, body))


def run_with_webhook(url: str, headers: dict[str, str], receiver: Receiver) -> str:
    """Run a post to the end with a webhook; return the run's id."""
    answer = httpx.post(
        f"{url}/runs/wait",
        json={"assistant_id": "burst", "input": {"count": 1}, "webhook": receiver.url},
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.headers["Content-Location"].split("/")[4]


def delivery_of(receiver: Receiver, run_id: str) -> tuple[dict[str, str], bytes]:
    """Wait for the delivery of `run_id` and return its headers and body."""

    def found() -> tuple[dict[str, str], bytes] | None:
        for headers, body in list(receiver.received):
            if json.loads(body)["run_id"] == run_id:
                return headers, body
        return None

    delivered: tuple[dict[str, str], bytes] = wait_until(found, timeout=30)
    return delivered


# --------------------------------------------------------------------------- webhooks


def test_each_managed_keys_deliveries_verify_with_its_own_webhook_secret(server: Served) -> None:
    first, second = make_key(server.url, name="Client A"), make_key(server.url, name="Client B")
    secrets = [first["webhook_secret"], second["webhook_secret"], SHARED]
    assert len(set(secrets)) == 3

    with Receiver() as receiver:
        runs = {
            "first": run_with_webhook(server.url, as_key(first), receiver),
            "second": run_with_webhook(server.url, as_key(second), receiver),
            "bootstrap": run_with_webhook(server.url, ADMIN, receiver),
        }
        delivered = {who: delivery_of(receiver, run_id) for who, run_id in runs.items()}

        def verifying(who: str) -> list[str]:
            headers, body = delivered[who]
            return [secret for secret in secrets if verify(secret, headers, body)]

        assert verifying("first") == [first["webhook_secret"]]
        assert verifying("second") == [second["webhook_secret"]]
        assert verifying("bootstrap") == [SHARED]  # AUTH_API_KEYS keys keep WEBHOOK_SECRET
        signatures = {headers["X-Atelier-Signature"] for headers, _ in delivered.values()}
        assert len(signatures) == 3

        # A captured delivery sent again under another delivery id verifies with no secret.
        headers, body = delivered["first"]
        other_id = delivered["second"][0]["X-Atelier-Delivery"]
        replayed = {**headers, "X-Atelier-Delivery": other_id}
        assert not any(verify(secret, replayed, body) for secret in secrets)

        # Rotated: the old and the new secret both verify while the overlap runs.
        rotated = httpx.post(
            f"{server.url}/keys/{first['key_id']}/webhook-secret", headers=ADMIN, timeout=30
        )
        assert rotated.status_code == 200, rotated.text
        new_secret = rotated.json()["webhook_secret"]
        assert new_secret not in secrets
        time.sleep(CACHE_SECONDS + 0.5)  # every process forgets the key's old record
        headers, body = delivery_of(receiver, run_with_webhook(server.url, as_key(first), receiver))
    assert len(headers["X-Atelier-Signature"].split(",")) == 2
    assert verify(new_secret, headers, body) and verify(first["webhook_secret"], headers, body)
    assert not verify(second["webhook_secret"], headers, body)
    assert not verify(SHARED, headers, body)


# --------------------------------------------------------------------------- quotas


def test_the_quotas_a_key_may_set_are_the_engines_quotas() -> None:
    assert set(Quotas.model_fields) == set(QUOTA_NAMES)


@pytest.mark.parametrize(
    "quotas",
    [{"crons": 10**13}, {"monthly_spend": 10**13}, {"store_searches_per_minute": -1}],
    ids=["crons", "monthly_spend", "store_searches_per_minute"],
)
def test_a_quota_the_engine_would_refuse_is_a_422_when_the_key_is_made(
    server: Served, quotas: dict[str, Any]
) -> None:
    body = {"name": "too much", "role": "member", "quotas": quotas}
    answer = httpx.post(f"{server.url}/keys", json=body, headers=ADMIN, timeout=30)
    assert answer.status_code == 422, answer.text
    assert next(iter(quotas)) in answer.json()["message"]
    assert httpx.get(f"{server.url}/keys", headers=ADMIN, timeout=30).json()["total"] == 0


def quota_of(url: str, key_id: str, headers: dict[str, str], name: str) -> Any:
    answer = httpx.get(f"{url}/keys/{key_id}/usage", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return next(q for q in answer.json()["quotas"] if q["name"] == name)


def test_a_keys_quota_comes_from_its_record_and_a_patch_applies_within_the_cache_time(
    server: Served,
) -> None:
    made = make_key(server.url, quotas={"crons": 2})
    member = as_key(made)

    def new_cron() -> httpx.Response:
        return httpx.post(f"{server.url}/runs/crons", json=CRON, headers=member, timeout=30)

    assert [new_cron().status_code for _ in range(2)] == [200, 200]
    refused = new_cron()
    assert refused.status_code == 429, refused.text
    assert refused.json()["message"].startswith("quota crons (2) reached")
    assert int(refused.headers["Retry-After"]) >= 1
    assert httpx.post(f"{server.url}/runs/crons", json=CRON, headers=ADMIN, timeout=30).is_success

    for headers in (member, ADMIN):  # the key itself, and an admin
        assert quota_of(server.url, made["key_id"], headers, "crons") == {
            "name": "crons",
            "limit": 2,
            "used": 2,
        }

    patched = httpx.patch(
        f"{server.url}/keys/{made['key_id']}",
        json={"quotas": {"crons": 3}},
        headers=ADMIN,
        timeout=30,
    )
    assert patched.status_code == 200 and patched.json()["quotas"] == {"crons": 3}
    started = time.monotonic()
    wait_until(lambda: new_cron().status_code == 200, timeout=CACHE_SECONDS + 4, interval=0.2)
    assert time.monotonic() - started < CACHE_SECONDS + 4
    assert new_cron().status_code == 429
    # Each replica trusts its own lookup for CACHE_SECONDS: the other one may answer
    # with the old limit for that long after this one took the new one.
    wait_until(
        lambda: quota_of(server.url, made["key_id"], ADMIN, "crons")["limit"] == 3,
        timeout=CACHE_SECONDS + 4,
        interval=0.2,
    )
    wait_until(
        lambda: (
            quota_of(server.url, "me", member, "crons") == {"name": "crons", "limit": 3, "used": 3}
        ),
        timeout=CACHE_SECONDS + 4,
        interval=0.2,
    )
