"""The `atelier` command line: notes import/export, the progress view, serve, and run."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli.main import ProgressView, cli, parse_notes_jsonl, render_result
from core.settings import Settings
from knowledge.notes import KnowledgeNote
from knowledge.repository import SqliteNoteRepository

runner = CliRunner()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point DATA_DIR at a fresh directory, away from any .env of the developer."""
    monkeypatch.chdir(tmp_path)  # no .env here
    data = tmp_path / "data"
    monkeypatch.setenv("DATA_DIR", str(data))
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    return data


def _note(note_id: str, type_: str = "blocker", content: str = "禁止使用绝对化用语") -> str:
    return json.dumps({"id": note_id, "type": type_, "content": content}, ensure_ascii=False)


def _vault_ids(data_dir: Path) -> list[str]:
    async def ids() -> list[str]:
        async with SqliteNoteRepository(data_dir / "atelier.db") as repo:
            return [n.id for n in await repo.list()]

    return asyncio.run(ids())


# --------------------------------------------------------------------------- notes


def test_parse_notes_reports_every_bad_line_by_number() -> None:
    lines = [
        _note("a"),
        "",
        "{not json",
        json.dumps({"id": "b", "type": "rumour", "content": "x"}),
        "[1, 2]",
        _note("a", content="again"),
        json.dumps({"id": "c", "type": "reference", "content": "   "}),
        _note("d", "reference"),
    ]
    notes, errors = parse_notes_jsonl(lines)
    assert [(n, note.id) for n, note in notes] == [(1, "a"), (8, "d")]
    assert [e.split(":")[0] for e in errors] == ["line 3", "line 4", "line 5", "line 6", "line 7"]
    assert "type" in errors[1] and "repeats line 1" in errors[3] and "content" in errors[4]


def test_import_then_export_round_trips_the_vault(data_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "notes.jsonl"
    source.write_text(
        "\n".join([_note("rule1"), _note("ref1", "reference", "参考：清单式标题"), ""]),
        encoding="utf-8",
    )
    result = runner.invoke(cli, ["notes", "import", str(source)])
    assert result.exit_code == 0, result.output
    assert "Imported 2 note(s)" in result.output
    assert _vault_ids(data_dir) == ["rule1", "ref1"]

    out = tmp_path / "out.jsonl"
    result = runner.invoke(cli, ["notes", "export", str(out)])
    assert result.exit_code == 0, result.output
    exported = [KnowledgeNote.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [n.id for n in exported] == ["rule1", "ref1"]
    assert exported[1].content == "参考：清单式标题"
    assert not list(tmp_path.glob(".*.partial"))

    to_stdout = runner.invoke(cli, ["notes", "export"])
    assert to_stdout.exit_code == 0
    assert [json.loads(line)["id"] for line in to_stdout.stdout.splitlines()] == ["rule1", "ref1"]


def test_import_with_a_bad_line_imports_nothing(data_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "notes.jsonl"
    source.write_text("\n".join([_note("ok1"), '{"type": "blocker"}', _note("ok2")]))
    result = runner.invoke(cli, ["notes", "import", str(source)])
    assert result.exit_code == 1
    assert "Nothing imported" in result.output and "line 2: content" in result.output
    assert _vault_ids(data_dir) == []


def test_import_refuses_ids_already_in_the_vault(data_dir: Path, tmp_path: Path) -> None:
    first = tmp_path / "first.jsonl"
    first.write_text(_note("keep"))
    assert runner.invoke(cli, ["notes", "import", str(first)]).exit_code == 0
    second = tmp_path / "second.jsonl"
    second.write_text("\n".join([_note("new"), _note("keep", content="changed")]))
    result = runner.invoke(cli, ["notes", "import", str(second)])
    assert result.exit_code == 1
    assert "line 2: id 'keep' is already in the vault" in result.output
    assert _vault_ids(data_dir) == ["keep"]


def test_import_of_a_missing_file_is_a_usage_error(data_dir: Path) -> None:
    result = runner.invoke(cli, ["notes", "import", "nowhere.jsonl"])
    assert result.exit_code == 2


# --------------------------------------------------------------------------- progress view


def _printed(events: list[dict[str, Any]]) -> str:
    console = Console(record=True, width=120)
    view = ProgressView(console, None)
    for event in events:
        view(event)
    return console.export_text()


def test_progress_view_shows_stages_routes_fallbacks_verdicts_and_images() -> None:
    text = _printed(
        [
            {"type": "stage.started", "stage": "planner", "attempt": 0},
            {"type": "stage.completed", "stage": "planner", "attempt": 0, "duration_ms": 1234},
            {"type": "attempt.started", "attempt": 1, "max_attempts": 2},
            {"type": "supervisor.route", "next_agent": "writer_agent", "guidance": "写", "step": 1},
            {
                "type": "agent.fallback",
                "from": "writer_agent",
                "to": "brief_compiler_agent",
                "reason": "precondition",
                "detail": "no brief",
            },
            {
                "type": "critic.verdict",
                "verdict": "needs_improvement",
                "passed": False,
                "score": 0.4,
                "threshold": 0.7,
                "checks": [{"name": "title_length", "passed": False}],
                "attempt": 1,
                "max_attempts": 2,
                "next": "rag",
            },
            {"type": "asset.created", "asset_id": "abc", "url": "/assets/abc", "slot": 1},
            {"type": "something.new"},
        ]
    )
    # Ids are shown by their names (app.names), in English as in Chinese.
    assert "✓ Plan  1.2 s" in text
    assert "attempt 1/2" in text
    assert "step 1: Writer" in text
    assert "fallback Writer → Brief compiler (precondition: no brief)" in text
    assert "Needs work score 0.40/0.70 → Knowledge" in text and "title_length" in text
    assert "image 1: /assets/abc" in text


def test_render_result_shows_the_post_images_and_quality(tmp_path: Path) -> None:
    asset = "3c7027a489d0493f611995ade5493552"
    (tmp_path / f"{asset}.png").write_bytes(b"png")
    (tmp_path / f"{asset}.json").write_text("{}")
    result = {
        "outcome": "exhausted",
        "post": {
            "title": "学生党平价护肤",
            "blocks": [{"type": "text", "text": "第一段"}, {"type": "image", "slot": 1}],
            "tags": ["护肤", "学生党"],
        },
        "images": [{"asset_id": asset, "url": f"/assets/{asset}", "slot": 1, "alt": "封面"}],
        "quality": {"verdict": "needs_improvement", "score": 0.5, "exhausted": True, "attempts": 2},
    }
    console = Console(record=True, width=200)
    console.print(render_result(result, tmp_path))
    text = console.export_text()
    assert "学生党平价护肤" in text and "第一段" in text and "#护肤 #学生党" in text
    assert str(tmp_path / f"{asset}.png") in text
    assert "outcome exhausted" in text and "retries exhausted" in text


def test_a_verdict_no_judge_gave_shows_not_judged_never_a_score(tmp_path: Path) -> None:
    text = _printed(
        [
            {
                "type": "critic.verdict",
                "verdict": "not_judged",
                "passed": False,
                "score": None,
                "threshold": 0.7,
                "judge": "unavailable",
                "checks": [],
                "attempt": 1,
                "max_attempts": 1,
                "next": "finalize",
            }
        ]
    )
    assert "Not judged (judge unavailable) → Finalize" in text and "score" not in text
    zh = Console(record=True, width=120)
    zh.print(
        ProgressView.describe(
            {
                "type": "critic.verdict",
                "verdict": "not_judged",
                "score": None,
                "threshold": 0.7,
                "judge": "unavailable",
                "next": "finalize",
            },
            "zh",
        )
    )
    assert "评审：未评审（评审模型不可用） → 定稿" in zh.export_text()
    assert "得分" not in zh.export_text()
    result = {
        "outcome": "completed",
        "post": {"title": "学生党平价护肤", "blocks": [], "tags": []},
        "quality": {"verdict": "not_judged", "score": None, "judge": "unavailable", "attempts": 1},
    }
    console = Console(record=True, width=200)
    console.print(render_result(result, tmp_path))
    summary = console.export_text()
    assert "verdict Not judged  score not judged" in summary and "0.00" not in summary


# --------------------------------------------------------------------------- serve


def test_serve_runs_the_app_factory_and_announces_the_console(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    calls: dict[str, Any] = {}
    announced: list[str] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.update(app=app, **kw))
    monkeypatch.setattr("cli.main._announce_when_up", lambda url, **kw: announced.append(url))
    result = runner.invoke(cli, ["serve", "--host", "0.0.0.0", "--port", "8123"])
    assert result.exit_code == 0, result.output
    assert calls == {
        "app": "app.main:create_app",
        "factory": True,
        "host": "0.0.0.0",
        "port": 8123,
        "reload": False,
        "timeout_graceful_shutdown": 5,  # a stop does not wait for watched runs to end
        "timeout_keep_alive": 75,  # longer than clients keep idle connections (5 s, 60 s)
    }
    assert announced == ["http://127.0.0.1:8123/"]


def test_announce_waits_until_the_service_is_ready(capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: "Atelier is up" was printed once HTTP answered, before /ready said so."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cli.main import _announce_when_up

    answers = iter([503, 503, 200])
    asked: list[str] = []

    class Ready(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(next(answers, 200) if self.path == "/ready" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        _announce_when_up(url, interval=0.01)
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["/ready"] * 3
    assert "Atelier is up" in capsys.readouterr().err


def test_settings_are_read_from_the_environment(data_dir: Path) -> None:
    assert Settings().data_dir == data_dir


# --------------------------------------------------------------------------- clarification

QUESTION = {
    "type": "clarification",
    "question": "请补充：受众、目标",
    "options": [{"id": "defaults", "label": "按默认继续"}, {"id": "details", "label": "补充细节"}],
}


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        (["1"], {"action": "defaults"}),
        (["2", "给大学生看"], {"action": "details", "details": "给大学生看"}),
        (["2", ""], {"action": "defaults"}),
        (["面向新手妈妈"], {"action": "details", "details": "面向新手妈妈"}),
    ],
)
def test_clarification_is_asked_on_the_terminal(
    monkeypatch: pytest.MonkeyPatch, typed: list[str], expected: dict[str, str]
) -> None:
    from cli.main import _terminal_clarifier

    answers = iter(typed)
    monkeypatch.setattr("cli.main.Prompt.ask", lambda *a, **kw: next(answers))
    console = Console(record=True, width=100)
    assert _terminal_clarifier(console, interactive=True)(QUESTION) == expected
    text = console.export_text()
    assert "请补充：受众、目标" in text and "2. 补充细节" in text


def test_clarification_without_a_terminal_continues_with_defaults() -> None:
    from cli.main import _terminal_clarifier

    console = Console(record=True, width=100)
    assert _terminal_clarifier(console, interactive=False)(QUESTION) == {"action": "defaults"}
    assert "continuing with defaults" in console.export_text()

    chinese = Console(record=True, width=100)
    assert _terminal_clarifier(chinese, interactive=False, lang="zh")(QUESTION) == {
        "action": "defaults"
    }
    text = chinese.export_text()
    assert "按默认继续" in text and "需要确认" in text and "defaults" not in text


# --------------------------------------------------------------------------- run

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


async def test_execute_runs_the_pipeline_and_reports_its_events(tmp_path: Path) -> None:
    from cli.main import LLMCallCounter, execute
    from tests.graphs.pipeline_runs import judge_reply, models_for
    from tests.support.fake_models import fake_context

    models = models_for(judge_reply(), images=2)
    events: list[dict[str, Any]] = []
    asked: list[Any] = []
    counter = LLMCallCounter()
    result = await execute(
        fake_context(models, tmp_path),
        {"request": REQUEST, "auto_confirm": True, "image_count": 2},
        on_event=events.append,
        clarify=asked.append,
        callbacks=[counter],
    )
    assert result["outcome"] == "completed" and not asked
    assert len(result["images"]) == 2 and result["post"]["title"]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "stage.started" and kinds.count("asset.created") == 2
    assert {"supervisor.route", "critic.verdict", "stage.completed"} <= set(kinds)
    assert counter.calls == models.count() > 0


async def test_execute_asks_the_clarification_and_resumes(tmp_path: Path) -> None:
    from cli.main import execute
    from tests.graphs.pipeline_runs import judge_reply, models_for
    from tests.support.fake_models import fake_context

    asked: list[Any] = []

    def clarify(value: Any) -> Any:
        asked.append(value)
        return {"action": "details", "details": "写给大学生，讲清楚烟酰胺"}

    result = await execute(
        fake_context(models_for(judge_reply()), tmp_path),
        {"request": "写一篇笔记"},
        on_event=lambda _e: None,
        clarify=clarify,
    )
    assert [a["type"] for a in asked] == ["clarification"]
    assert asked[0]["question"] and asked[0]["options"]
    assert result["outcome"] == "completed"


def _scripted_env(monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    monkeypatch.setenv("LLM_BASE_URL", base_url)
    monkeypatch.setenv("LLM_API_KEY", "test-key")
    monkeypatch.setenv("LLM_MAX_RETRIES", "0")


def test_run_json_through_an_openai_compatible_endpoint(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.app.atelier_llm import atelier_responder
    from tests.support.scripted_openai import ScriptedOpenAIServer

    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        _scripted_env(monkeypatch, server.base_url)
        result = runner.invoke(
            cli, ["run", REQUEST, "--auto-confirm", "--json", "--image-count", "1"]
        )
        calls = server.call_count
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["outcome"] == "completed"
    (image,) = payload["images"]
    assert list((data_dir / "assets").glob(f"{image['asset_id']}*.png"))
    assert calls > 5  # planner, supervisor turns, agents, judge: all over the wire


def test_run_shows_progress_and_the_post(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.app.atelier_llm import atelier_responder
    from tests.support.fake_models import HAPPY_TITLE
    from tests.support.scripted_openai import ScriptedOpenAIServer

    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        _scripted_env(monkeypatch, server.base_url)
        result = runner.invoke(cli, ["run", REQUEST, "--image-count", "1"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    # A Chinese request: the CLI's own words are Chinese too.
    assert "✓ 规划" in out and "评审：通过" in out and "图 1：/assets/" in out
    assert HAPPY_TITLE in out and "结果 已完成" in out and "调用模型" in out
    assert "各角色的模型用量" in out and "写作" in out  # usage by role, agents by name
    assert "outcome" not in out and "critic:" not in out and "LLM calls" not in out


def test_an_english_request_gets_an_english_cli(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.app.atelier_llm import atelier_responder
    from tests.support.scripted_openai import ScriptedOpenAIServer

    request = "Write a Xiaohongshu note on budget skincare for students, ingredients explained"
    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        _scripted_env(monkeypatch, server.base_url)
        result = runner.invoke(cli, ["run", request, "--auto-confirm", "--image-count", "1"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "✓ Plan " in out and "critic: Passed" in out and "image 1: /assets/" in out
    assert "outcome completed" in out and "LLM calls" in out and "LLM usage by role" in out
    for chinese_label in ("规划", "评审：", "结果", "调用模型", "各角色"):
        assert chinese_label not in out, chinese_label


@pytest.mark.parametrize(
    ("request_", "lang"),
    [
        ("写一篇小红书笔记：平价护肤", "zh"),
        ("帮我写 a post about 护肤", "zh"),
        ("Write a post about budget skincare", "en"),
        ("Écris un article sur les soins", "en"),
    ],
)
def test_the_cli_language_follows_the_request(request_: str, lang: str) -> None:
    from cli.main import request_language

    assert request_language(request_) == lang


def test_run_rejects_a_bad_image_count(data_dir: Path) -> None:
    result = runner.invoke(cli, ["run", REQUEST, "--image-count", "12"])
    assert result.exit_code == 2


def test_run_failure_is_one_readable_line(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_MODEL_PATH", str(data_dir / "missing.gguf"))
    result = runner.invoke(cli, ["run", REQUEST, "--auto-confirm"])
    assert result.exit_code == 1
    assert "运行失败" in result.output and "LOCAL_MODEL_PATH" in result.output
    assert "Traceback" not in result.output
