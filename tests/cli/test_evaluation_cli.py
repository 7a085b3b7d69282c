"""`atelier datasets` and `atelier eval` on the embedded engine, the model scripted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.eval import parse_arm
from cli.main import cli
from engine import Arm
from tests.app.atelier_llm import atelier_responder
from tests.support.judges import position_biased_judge, wire_judges
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer

runner = CliRunner()

BRIEFS = [
    {"input": {"request": "写一篇小红书笔记：平价护肤", "auto_confirm": True, "fast_mode": True}},
    {
        "input": {"request": "写一篇小红书笔记：早八护肤", "auto_confirm": True, "fast_mode": True},
        "expectations": {"must_include": ["氨基酸"], "title_max": 30},
    },
]


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point DATA_DIR at a fresh directory, away from any .env of the developer."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    monkeypatch.setenv("DATA_DIR", str(data))
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    monkeypatch.delenv("AUTH_API_KEYS", raising=False)
    return data


def _jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    return path


def test_arms_are_an_assistant_with_an_optional_name_and_version() -> None:
    assert parse_arm("atelier") == Arm(name="", assistant_id="atelier")
    assert parse_arm("v3=preset-1@3") == Arm(name="v3", assistant_id="preset-1", version=3)
    assert parse_arm("preset-1@v2").version == 2
    for wrong in ("", "a@b", "a b", "=x", "x@"):
        with pytest.raises(Exception, match="NAME"):
            parse_arm(wrong)


def test_import_list_export_round_trip_and_a_bad_line_adds_nothing(
    data_dir: Path, tmp_path: Path
) -> None:
    good = _jsonl(tmp_path / "briefs.jsonl", BRIEFS)
    imported = runner.invoke(cli, ["datasets", "import", str(good)])
    assert imported.exit_code == 0, imported.output
    dataset_id, message = imported.stdout.strip().split("\t")
    assert message == "2 examples added (2 in all)"
    listed = runner.invoke(cli, ["datasets", "list"])
    assert listed.stdout == f"{dataset_id}\t2\tbriefs\n"
    exported = runner.invoke(cli, ["datasets", "export", dataset_id])
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert lines[0] == {**BRIEFS[0], "expectations": None}
    assert lines[1] == BRIEFS[1]

    bad = _jsonl(tmp_path / "bad.jsonl", [BRIEFS[0], {"input": {"request": ""}}])
    refused = runner.invoke(cli, ["datasets", "import", str(bad)])
    assert refused.exit_code == 1
    assert "examples.1.input.request" in refused.stderr
    after = runner.invoke(cli, ["datasets", "list"])
    assert "bad" not in after.stdout  # no dataset was left behind
    more = runner.invoke(cli, ["datasets", "import", str(good), "--dataset", dataset_id])
    assert more.stdout.strip().endswith("2 examples added (4 in all)")
    missing = runner.invoke(cli, ["datasets", "export", "no-such-dataset"])
    assert missing.exit_code == 1 and "not found" in missing.stderr


def test_eval_runs_an_experiment_here_and_prints_its_summary(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = atelier_responder()
    judges = wire_judges(pairwise=position_biased_judge("2"))

    def respond(req: ChatRequest) -> Reply:
        judge = judges.get(req.forced_tool or "")
        return judge(req) if judge is not None else pipeline(req)

    briefs = _jsonl(tmp_path / "briefs.jsonl", BRIEFS)
    with ScriptedOpenAIServer(respond) as server:
        monkeypatch.setenv("LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("LLM_API_KEY", "test-key")
        monkeypatch.setenv("LLM_MAX_RETRIES", "0")
        monkeypatch.setenv("COLUMNS", "200")  # the table is not wrapped
        table = runner.invoke(
            cli, ["eval", str(briefs), "--arm", "one=atelier", "--arm", "two=atelier"]
        )
        assert table.exit_code == 0, table.output
        assert "pass rate [95%]" in table.stdout and "0/2/0" in table.stdout
        assert "judged 2/2" in table.stderr  # its progress
        listed = runner.invoke(cli, ["datasets", "list"])
        dataset_id = listed.stdout.split("\t")[0]
        as_json = runner.invoke(
            cli,
            ["eval", dataset_id, "--arm", "atelier", "--arm", "two=atelier", "--json"],
        )
    assert as_json.exit_code == 0, as_json.output
    detail = json.loads(as_json.stdout)
    assert detail["status"] == "success"
    names = [arm["name"] for arm in detail["summary"]["arms"]]
    assert names == ["atelier", "two"]
    assert all(arm["ties"] == 2 and arm["pass_rate"] == 1.0 for arm in detail["summary"]["arms"])
    assert [len(r["posts"]) for r in detail["results"]] == [2, 2]

    nothing = runner.invoke(cli, ["eval", "missing.jsonl", "--arm", "a", "--arm", "b"])
    assert nothing.exit_code == 2 and "no such file" in nothing.stderr
    one = runner.invoke(cli, ["eval", dataset_id, "--arm", "atelier"])
    assert one.exit_code == 2
