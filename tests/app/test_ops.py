"""Operations endpoints: /ok, /health, /ready, /info, /metrics (app/routes/ops.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from core.settings import LLM_ROLES, Settings

LLM_KEY = "sk-live-DO-NOT-LEAK-0123456789"


#: An endpoint nothing listens on: the app's lifespan then skips the embedded model,
#: and nothing in these tests calls an LLM.
NO_LLM = "http://127.0.0.1:9/v1"


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    """Return settings for an app with its data under tmp_path and no embedded model."""
    return Settings(data_dir=tmp_path / "data", llm_base_url=NO_LLM, **overrides)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(tmp_path))) as client:
        yield client


def test_liveness_probes(client: TestClient) -> None:
    assert client.get("/ok").json() == {"ok": True}
    assert client.get("/health").json() == {"status": "ok"}


def test_ready_when_the_database_answers(client: TestClient) -> None:
    response = client.get("/ready")

    assert response.status_code == 200
    body = response.json()
    assert body["ready"] is True
    assert body["checks"]["database"] == "ok"
    assert set(body["checks"].values()) == {"ok"}  # the run store registers its own check


def test_not_ready_when_the_database_file_is_gone(tmp_path: Path, client: TestClient) -> None:
    shutil.rmtree(tmp_path / "data")

    response = client.get("/ready")

    assert response.status_code == 503
    body = response.json()
    assert body["ready"] is False and body["checks"]["database"] == "failed"
    assert body["error"] == "unavailable" and "database" in body["message"]
    assert str(tmp_path) not in response.text and "Traceback" not in response.text


def test_not_ready_when_the_vault_connection_is_closed(client: TestClient) -> None:
    assert client.portal is not None
    client.portal.call(client.app.state.notes.close)  # type: ignore[attr-defined]

    response = client.get("/ready")

    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "failed"


def test_registered_ready_checks_are_run_and_named(client: TestClient) -> None:
    async def fails() -> None:
        raise ConnectionError("redis://:password@cache:6379 refused")

    async def passes() -> None:
        return None

    client.app.state.ready_checks = {"run_store": passes, "events": fails}  # type: ignore[attr-defined]

    response = client.get("/ready")

    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "run_store": "ok", "events": "failed"}
    assert "events" in response.json()["message"]
    assert "password" not in response.text


def test_ready_needs_no_lifespan_resources_to_answer(tmp_path: Path) -> None:
    client = TestClient(create_app(settings_for(tmp_path)))  # lifespan not run

    response = client.get("/ready")

    assert response.status_code == 503


def test_info_shows_models_per_role_without_secrets(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        llm_base_url="https://user:hunter2@api.example.com:8443/v1?token=abc",
        llm_api_key=LLM_KEY,  # type: ignore[arg-type]
        llm_model="cheap-model",
        llm_models={"writer_agent": "strong-model"},  # type: ignore[arg-type]
        image_api_key="img-secret-0123456789",  # type: ignore[arg-type]
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/info")

    info = response.json()
    assert response.status_code == 200
    assert info["version"] == "0.1.0" and info["name"] == "Atelier"
    assert set(info["models"]) == set(LLM_ROLES)
    assert info["models"]["writer_agent"] == "strong-model"
    assert info["models"]["critic"] == "cheap-model"
    assert info["llm"] == {
        "provider": "openai-compatible",
        "endpoint": "https://api.example.com:8443",
        "model_file": None,
    }
    for secret in (LLM_KEY, "hunter2", "token=abc", "img-secret", "user:"):
        assert secret not in response.text


def test_info_names_the_embedded_model_file_when_no_endpoint_is_set(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    info = TestClient(app).get("/info").json()  # no lifespan: the model is not started

    assert info["llm"]["provider"] == "embedded"
    assert info["llm"]["endpoint"] is None
    model_file = info["llm"]["model_file"]
    assert model_file.endswith(".gguf") and "/" not in model_file
    assert set(info["models"].values()) == {model_file}
    assert info["limits"] == {"max_body_bytes": 1_048_576, "max_upload_bytes": 10_485_760}


def test_info_lists_the_graphs_the_app_serves(client: TestClient) -> None:
    client.app.state.graphs = {"atelier": object()}  # type: ignore[attr-defined]

    assert client.get("/info").json()["graphs"] == ["atelier"]


def test_metrics_are_served_in_prometheus_text_format(client: TestClient) -> None:
    response = client.get("/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "# TYPE atelier_runs_total counter" in response.text


def test_openapi_documents_the_operations_and_the_key_schemes(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()

    for path in ("/ok", "/health", "/ready", "/info", "/metrics"):
        assert path in spec["paths"], path
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"]["scheme"] == "bearer"
    assert schemes["apiKey"]["name"] == "X-Api-Key"
