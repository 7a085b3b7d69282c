"""The `atelier` command line: notes import/export, the progress view, serve, and run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli.main import cli
from cli.notes import parse_notes_jsonl
from cli.run import ProgressView, render_result
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
    monkeypatch.setattr("cli.serve._announce_when_up", lambda url, **kw: announced.append(url))
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

    from cli.serve import _announce_when_up

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
    from cli.run import _terminal_clarifier

    answers = iter(typed)
    monkeypatch.setattr("cli.run.Prompt.ask", lambda *a, **kw: next(answers))
    console = Console(record=True, width=100)
    assert _terminal_clarifier(console, interactive=True)(QUESTION) == expected
    text = console.export_text()
    assert "请补充：受众、目标" in text and "2. 补充细节" in text


def test_clarification_without_a_terminal_continues_with_defaults() -> None:
    from cli.run import _terminal_clarifier

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


def _engine_settings(data_dir: Path, base_url: str) -> Settings:
    from tests.app.harness import service_settings

    return service_settings(data_dir, base_url)


async def test_execute_follows_an_engine_run_and_reports_its_events(tmp_path: Path) -> None:
    from cli.run import LLMCallCounter, cli_owner, execute, open_embedded_engine, start_run
    from tests.app.atelier_llm import atelier_responder
    from tests.support.scripted_openai import ScriptedOpenAIServer

    events: list[dict[str, Any]] = []
    asked: list[Any] = []
    started: list[Any] = []
    counter = LLMCallCounter()
    with ScriptedOpenAIServer(atelier_responder(images=2)) as llm:
        settings = _engine_settings(tmp_path / "data", llm.base_url)
        async with open_embedded_engine(settings, callbacks=[counter]) as manager:
            inputs = {"request": REQUEST, "auto_confirm": True, "image_count": 2}
            run = await start_run(manager, cli_owner(settings), inputs=inputs)
            result = await execute(
                manager, run, on_event=events.append, clarify=asked.append, on_run=started.append
            )
            record = await manager.runs.find(run.run_id)
        calls = llm.call_count
    assert result["outcome"] == "completed" and not asked
    assert len(result["images"]) == 2 and result["post"]["title"]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "stage.started" and kinds.count("asset.created") == 2
    assert {"supervisor.route", "critic.verdict", "stage.completed"} <= set(kinds)
    assert counter.calls == calls > 0
    # An engine run like any other: recorded, its thread the anonymous owner's.
    assert [r.run_id for r in started] == [run.run_id]
    assert record is not None and record.status == "success" and record.attempt == 1
    assert record.owner == "anonymous" and record.options.stream_mode == ("custom", "values")


async def test_execute_asks_the_clarification_and_resumes_the_thread(tmp_path: Path) -> None:
    from cli.run import cli_owner, execute, open_embedded_engine, start_run
    from tests.app.atelier_llm import atelier_responder
    from tests.support.scripted_openai import ScriptedOpenAIServer

    asked: list[Any] = []
    started: list[Any] = []

    def clarify(value: Any) -> Any:
        asked.append(value)
        return {"action": "details", "details": "写给大学生，讲清楚烟酰胺"}

    with ScriptedOpenAIServer(atelier_responder()) as llm:
        settings = _engine_settings(tmp_path / "data", llm.base_url)
        async with open_embedded_engine(settings) as manager:
            run = await start_run(manager, cli_owner(settings), inputs={"request": "写一篇笔记"})
            result = await execute(
                manager, run, on_event=lambda _e: None, clarify=clarify, on_run=started.append
            )
            first = await manager.runs.find(run.run_id)
    assert [a["type"] for a in asked] == ["clarification"]
    assert asked[0]["question"] and asked[0]["options"]
    assert result["outcome"] == "completed"
    # The question ended the first run; a resume run on the same thread answered it.
    assert first is not None and first.status == "interrupted"
    assert [r.thread_id for r in started] == [run.thread_id] * 2
    assert started[1].options.command == {
        "resume": {"action": "details", "details": "写给大学生，讲清楚烟酰胺"}
    }


def writer_asked(llm: Any) -> bool:
    """Whether the scripted model has had the writer's request (the one without tools)."""
    return any(not r.tools for r in llm.requests)


async def test_a_cancelled_execute_cancels_its_run(tmp_path: Path) -> None:
    """Ctrl-C: the run is cancelled (checkpoints kept), not left for a later recovery."""
    from cli.run import cli_owner, execute, open_embedded_engine, start_run
    from tests.app.atelier_llm import atelier_responder
    from tests.app.harness import wait_until
    from tests.support.scripted_openai import ScriptedOpenAIServer

    with ScriptedOpenAIServer(atelier_responder(writer_delay=60)) as llm:
        settings = _engine_settings(tmp_path / "data", llm.base_url)
        async with open_embedded_engine(settings) as manager:
            inputs = {"request": REQUEST, "auto_confirm": True}
            run = await start_run(manager, cli_owner(settings), inputs=inputs)
            following = asyncio.create_task(
                execute(manager, run, on_event=lambda _e: None, clarify=lambda _v: None)
            )
            await asyncio.to_thread(wait_until, lambda: writer_asked(llm), 30)
            following.cancel()
            with pytest.raises(asyncio.CancelledError):
                await following
            record = await manager.runs.find(run.run_id)
    assert record is not None and record.status == "interrupted"
    assert record.cancel_reason == "interrupt"


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
    from app.texts import request_language

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


# --------------------------------------------------------------------------- one driver


def _sequence(events: list[Any]) -> list[tuple[Any, ...]]:
    """The pipeline's course in its events: types, stages, routes and verdicts."""
    keys = ("type", "stage", "next_agent", "verdict", "slot")
    return [tuple(event.get(key) for key in keys) for event in events]


def test_run_shows_the_custom_frames_the_api_streams_for_the_same_run(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    from cli import run as main
    from tests.app.atelier_llm import atelier_responder
    from tests.app.harness import LiveServer, read_sse, service_settings
    from tests.support.scripted_openai import ScriptedOpenAIServer

    shown: list[dict[str, Any]] = []

    class Recording(ProgressView):
        def __call__(self, event: Any) -> None:
            shown.append(dict(event))
            super().__call__(event)

    monkeypatch.setattr(main, "ProgressView", Recording)
    inputs = {"request": REQUEST, "auto_confirm": True, "image_count": 1}
    with ScriptedOpenAIServer(atelier_responder(images=1)) as llm:
        with LiveServer(service_settings(tmp_path / "api", llm.base_url), None) as api:
            body = {"assistant_id": "atelier", "input": inputs, "stream_mode": ["custom"]}
            streamed = httpx.post(f"{api.url}/runs/stream", json=body, timeout=60)
        _scripted_env(monkeypatch, llm.base_url)
        result = runner.invoke(cli, ["run", REQUEST, "--auto-confirm", "--image-count", "1"])
    assert result.exit_code == 0, result.output
    frames = read_sse(streamed.text)
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
    api_events = [f.data for f in frames if f.event == "custom"]
    assert {"stage.started", "supervisor.route", "critic.verdict"} <= {e["type"] for e in shown}
    assert _sequence(shown) == _sequence(api_events)
    # Every event the view prints is on the terminal, in order.
    lines = [ProgressView.describe(e, "zh") for e in shown]
    printed = [line.plain for line in lines if line is not None]
    at = 0
    for line in printed:
        at = result.stdout.find(line, at)
        assert at >= 0, line
        at += len(line)
    # The ids of the run and its thread come first, on stderr, as one line.
    ids = result.stderr.splitlines()[0]
    resume = f"atelier run --resume {UUID}"
    assert re.fullmatch(rf"运行 {UUID} · 会话 {UUID}（进程意外退出后可用 {resume} 继续）", ids)


UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _run_record(data_dir: Path, run_id: str) -> Any:
    from engine.sqlite import SqliteRunStorage

    async def get() -> Any:
        async with SqliteRunStorage(str(data_dir / "atelier.db")) as storage:
            return await storage.runs.get(run_id), await storage.events.read(run_id, 0, 10_000)

    return asyncio.run(get())


def test_a_killed_run_is_finished_by_run_resume(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.app.atelier_llm import atelier_responder
    from tests.app.harness import REPO_ROOT, wait_until
    from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer

    happy = atelier_responder(images=1)
    hold = {"writer": 60.0}

    def responder(req: ChatRequest) -> Reply:
        reply = happy(req)
        return Reply.delay(hold["writer"], reply) if not req.tools else reply

    with ScriptedOpenAIServer(responder) as llm:
        env = {
            **os.environ,
            "DATA_DIR": str(data_dir),
            "LLM_BASE_URL": llm.base_url,
            "LLM_API_KEY": "test-key",
            "LLM_MAX_RETRIES": "0",
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        env.pop("PYTEST_CURRENT_TEST", None)
        err_path = tmp_path / "first.err"
        command = [sys.executable, "-m", "cli.main", "run", REQUEST, "--auto-confirm", "--json"]
        with err_path.open("wb") as err:
            child = subprocess.Popen(
                command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err
            )
        try:
            wait_until(lambda: writer_asked(llm) or child.poll() is not None, 60, 0.05)
            assert child.poll() is None, err_path.read_text()
            run_id = re.findall(UUID, err_path.read_text())[0]

            # While it runs, the DATA_DIR is its own: another run is refused, naming it.
            _scripted_env(monkeypatch, llm.base_url)
            refused = runner.invoke(cli, ["run", REQUEST, "--auto-confirm"])
            assert refused.exit_code == 2, refused.output
            assert f"进程 {child.pid}（atelier run）" in refused.stderr
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)

        left, _ = _run_record(data_dir, run_id)
        assert left.status == "running" and left.attempt == 1
        hold["writer"] = 0.0
        resumed = runner.invoke(cli, ["run", "--resume", run_id, "--json"])
        planner_calls = [r for r in llm.requests if r.forced_tool == "PlannerIntent"]
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["outcome"] == "completed"
    assert run_id in resumed.stderr.splitlines()[0]
    record, frames = _run_record(data_dir, run_id)
    assert record.status == "success" and record.attempt == 2
    # Resumed from its last checkpoint (the planner is not asked again), its log continued.
    assert len(planner_calls) == 1
    attempts = [json.loads(f.data)["attempt"] for f in frames if f.event == "metadata"]
    assert attempts == [1, 2] and [f.id for f in frames] == list(range(1, len(frames) + 1))


def test_one_process_owns_a_data_dir(tmp_path: Path) -> None:
    from engine.sqlite.ownership import DataDirInUse, own_data_dir

    with own_data_dir(tmp_path / "data", "atelier serve") as lock:
        assert lock.read_text() == f"{os.getpid()} atelier serve\n"
        with pytest.raises(DataDirInUse) as refused, own_data_dir(tmp_path / "data", "atelier run"):
            pass
    assert refused.value.pid == os.getpid() and refused.value.what == "atelier serve"
    assert str(refused.value) == (
        f"DATA_DIR {tmp_path / 'data'} is in use by process {os.getpid()} (atelier serve)"
    )
    with own_data_dir(tmp_path / "data", "atelier run"):  # released when its owner left
        pass


def test_run_is_refused_while_the_server_owns_the_data_dir(data_dir: Path) -> None:
    from engine.sqlite.ownership import own_data_dir

    english = "Write a post about budget skincare"
    with own_data_dir(data_dir, "atelier serve"):
        result = runner.invoke(cli, ["run", english, "--auto-confirm"])
        resumed = runner.invoke(cli, ["run", "--resume", "a-run-id"])
    assert result.exit_code == resumed.exit_code == 2
    assert result.stderr.strip() == (
        f"DATA_DIR {data_dir} is in use by process {os.getpid()} (atelier serve): stop it, "
        "or run with another DATA_DIR (DATA_DIR=… atelier run …)"
    )
    assert "Traceback" not in result.output and not list(data_dir.glob("atelier.db*"))


@pytest.mark.parametrize(
    "args",
    [["run"], ["run", REQUEST, "--resume", "r1"], ["run", "--resume", "r1", "--image-count", "2"]],
)
def test_run_takes_a_request_or_resume(data_dir: Path, args: list[str]) -> None:
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    assert "REQUEST" in result.output or "--resume" in result.output
