"""Webhooks signed per API key, end to end, in the three deployments.

Three keys from AUTH_API_KEYS run to a receiver on loopback: A has a signing secret of
its own, B is in a rotation's overlap (two secrets), C has none (it keeps
WEBHOOK_SECRET). The secrets come from a mapping handed to the engine's opener
(`engine.MappingWebhookSecrets`: `create_app(webhook_secrets=…)` in process, the
`ATELIER_TEST_WEBHOOK_SECRETS` environment of tests/app/serve.py for the processes
deployment, whose workers deliver). Each delivery verifies with its own key's secret
only (the docs' recipe, docs/webhooks.md), and one replayed under another delivery
id verifies with none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.security import owner_id_for
from core.settings import Settings
from engine import MappingWebhookSecrets
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

KEY_A = "signing-key-a-0123456789"
KEY_B = "signing-key-b-0123456789"
KEY_C = "signing-key-c-0123456789"
SHARED = "whsec_deployment_wide"
#: Each key's own secrets by owner id, the current one first (C has none).
SECRETS = {
    owner_id_for(KEY_A): ["whsec_a_current"],
    owner_id_for(KEY_B): ["whsec_b_new", "whsec_b_old"],
}
ALL_SECRETS = [SHARED, "whsec_a_current", "whsec_b_new", "whsec_b_old"]


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
    """Two API replicas behind nginx and two `atelier worker`s, the workers delivering."""
    env = {
        "AUTH_API_KEYS": f"{KEY_A},{KEY_B},{KEY_C}",
        "WEBHOOK_ALLOW_PRIVATE": "true",
        "WEBHOOK_SECRET": SHARED,
        "ATELIER_TEST_WEBHOOK_SECRETS": json.dumps(SECRETS),
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
            auth_api_keys=[KEY_A, KEY_B, KEY_C],
            webhook_allow_private=True,
            webhook_secret=SHARED,
            **scale,
        )

    with serve_deployment(
        request,
        settings,
        sample_assistants,
        {"X-Api-Key": KEY_A},
        webhook_secrets=MappingWebhookSecrets(SECRETS),
    ) as served:
        yield served


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The docs' recipe (docs/webhooks.md), run as written."""
    namespace: dict[str, Any] = {}
    exec(code_block("webhooks", "python"), namespace)
    return bool(namespace["verify"](secret, headers, body))


def test_each_keys_deliveries_verify_with_its_own_secret_only(server: Served) -> None:
    with Receiver() as receiver:
        runs = {}
        for key in (KEY_A, KEY_B, KEY_C):
            answer = httpx.post(
                f"{server.url}/runs/wait",
                json={"assistant_id": "burst", "input": {"count": 1}, "webhook": receiver.url},
                headers={"X-Api-Key": key},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            runs[answer.headers["Content-Location"].split("/")[4]] = key
        wait_until(lambda: len(receiver.received) >= 3, timeout=30)
        received = list(receiver.received)
    by_key = {runs[json.loads(body)["run_id"]]: (headers, body) for headers, body in received}
    assert set(by_key) == {KEY_A, KEY_B, KEY_C}

    def verifying(key: str) -> list[str]:
        headers, body = by_key[key]
        return [secret for secret in ALL_SECRETS if verify(secret, headers, body)]

    assert verifying(KEY_A) == ["whsec_a_current"]
    assert verifying(KEY_B) == ["whsec_b_new", "whsec_b_old"]  # the rotation's overlap
    assert len(by_key[KEY_B][0]["X-Atelier-Signature"].split(",")) == 2
    assert verifying(KEY_C) == [SHARED]  # a key with no secret of its own
    signatures = {headers["X-Atelier-Signature"] for headers, _ in by_key.values()}
    assert len(signatures) == 3

    # A captured delivery sent again under another id verifies with no secret.
    headers, body = by_key[KEY_A]
    other_id = by_key[KEY_C][0]["X-Atelier-Delivery"]
    replayed = {**headers, "X-Atelier-Delivery": other_id}
    assert not any(verify(secret, replayed, body) for secret in ALL_SECRETS)
