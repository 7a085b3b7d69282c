"""docs/evaluate-internals.md stays true: its Python snippets run as written, print what it says."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.judges import content_judge, scoring_judge, wire_judges
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer
from tests.test_docs import NOTEBOOK

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = (REPO_ROOT / "docs" / "evaluate-internals.md").read_text(encoding="utf-8")


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    judges = wire_judges(pairwise=content_judge("氨基酸"), post=scoring_judge("氨基酸"))

    def respond(req: ChatRequest) -> Reply:
        handler = judges.get(req.forced_tool or "")
        return handler(req) if handler else Reply.error(500, "unscripted", retry=False)

    with ScriptedOpenAIServer(respond) as server:
        yield server


def test_the_snippets_run_with_only_llm_base_url_set(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    snippets = re.findall(r"```python\n(.*?)```", DOC, flags=re.DOTALL)
    assert len(snippets) == 3
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT),
        "LANGSMITH_TRACING": "false",
        "LLM_BASE_URL": llm.base_url,
    }
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, json.dumps(snippets)],
        cwd=tmp_path,  # no `.env`, a private DATA_DIR
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "False ['expectations.must_include']"
    assert lines[1] == "4 0 0 1.0 0.51"
    assert ast.literal_eval(lines[2]) == {
        "matches": 1,
        "n": 2,
        "rate": 0.5,
        "low": pytest.approx(0.0945, abs=1e-4),
        "high": pytest.approx(0.9055, abs=1e-4),
        "kappa": 0.0,
    }
    assert lines[3] == "a [('ab', '1'), ('ba', '2')]"
    assert lines[4] == "ok 0.9 True judge"
    assert [r.forced_tool for r in llm.requests] == ["PairwiseVerdict"] * 2 + ["PostScore"]
