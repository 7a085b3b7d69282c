"""The names people read for ids are declared once (app.names) and name every id there is."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import get_args

from fastapi.testclient import TestClient

from agentkit.state import QUALITY_DIMENSIONS
from app import names
from app.main import STATIC_DIR, create_app
from app.texts import name_of
from core.agents import AGENT_TABLE
from core.events import FallbackReason, VerdictLabel
from core.settings import LLM_ROLES
from graphs.pipeline import build_pipeline
from tests.app.harness import service_settings

CJK = re.compile(r"[\u3400-\u9fff]")


def test_each_catalogue_names_exactly_the_ids_it_is_for() -> None:
    nodes = set(build_pipeline().get_graph().nodes) - {"__start__", "__end__"}
    assert set(names.STAGES) == nodes
    assert set(LLM_ROLES) <= set(names.AGENTS)
    assert all(names.AGENTS[a] == AGENT_TABLE[a].names for a in AGENT_TABLE)
    assert tuple(names.VERDICTS) == get_args(VerdictLabel)
    assert tuple(names.REASONS) == get_args(FallbackReason)
    assert tuple(names.DIMENSIONS) == QUALITY_DIMENSIONS


def test_every_name_is_in_its_language() -> None:
    for catalogue in names.CATALOGUES.values():
        for key, pair in catalogue.items():
            assert CJK.search(pair.zh), (key, pair)
            assert pair.en and not CJK.search(pair.en), (key, pair)


def test_the_cli_and_the_console_read_the_same_names(tmp_path: Path) -> None:
    assert name_of("zh", "agent", "writer_agent") == "写作"
    assert name_of("en", "agent", "writer_agent") == "Writer"
    assert name_of("en", "stage", "no_such_stage") == "no_such_stage"

    with TestClient(create_app(service_settings(tmp_path, "http://127.0.0.1:9/v1"))) as client:
        response = client.get("/console/names.js")
        page = client.get("/").text
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    prefix = "window.ATELIER_NAMES = "
    assert response.text.startswith(prefix)
    assert json.loads(response.text[len(prefix) :].rstrip().rstrip(";")) == names.labels()
    assert page.index("/console/names.js") < page.index("/console/console.js")

    # The console declares none of them again.
    script = (STATIC_DIR / "console.js").read_text()
    for label in names.labels()["en"]:
        assert f'"{label}":' not in script, label
