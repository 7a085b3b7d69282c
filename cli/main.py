"""The `atelier` command line: serve the service, run the pipeline here, move notes.

    atelier serve [--host H] [--port P] [--reload] [--workers N]
    atelier worker [--concurrency N]
    atelier run "写一篇小红书笔记：…" [--auto-confirm] [--json] [--image-count N] [--platform P]
    atelier run --resume RUN_ID [--auto-confirm] [--json]
    atelier notes import notes.jsonl
    atelier notes export [notes.jsonl]

`run` drives the embedded run engine on DATA_DIR, the one `atelier serve` opens
(the run store and checkpoints in `DATA_DIR/atelier.db`, the services of
`studio.services.open_services`): it creates a thread and a run through the run
manager, follows the run's stream as an API client would (the same frames, replayed
from the event log, then live), shows its `custom` events as they happen and
prints the finished post from the run's result. The planner's question is asked on
the terminal and answered by a resume run on the same thread. A run a killed
`atelier run` left behind is restarted by the engine's recovery and finished by
`run --resume RUN_ID`. One process owns a DATA_DIR (`engine.sqlite.ownership`):
while another holds it, `run` says who and exits with status 2. Exit status
otherwise: 0 when the run ended with a post (outcome completed or exhausted), 1
otherwise.

The notes commands read and write JSON Lines, one `KnowledgeNote` per line, the
format `export` writes; `import` checks every line first and imports all of them
or none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from langchain_core.callbacks import BaseCallbackHandler
from pydantic import ValidationError
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.prompt import Prompt
from rich.table import Table
from rich.text import Text

from app import names
from app.security import ANONYMOUS, owner_id_for
from core.settings import Settings
from engine.assistants import build_assistants
from engine.follow import Stopped, follow_frames
from engine.manager import RunManager
from engine.preparation import RunRequest
from engine.protocols import ExecutorSetup
from engine.records import Frame, RunRecord
from engine.sqlite.backend import open_sqlite_backend
from engine.sqlite.ownership import DataDirInUse
from graphs.assistants import ASSISTANTS
from knowledge.notes import KnowledgeNote
from providers.assets import AssetStore, is_valid_asset_id
from studio.services import open_services

cli = typer.Typer(
    name="atelier",
    help="Atelier, a multi-agent content studio: serve it, run a request, manage notes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
notes_cli = typer.Typer(
    help="Import and export the knowledge vault as JSON Lines.", no_args_is_help=True
)
cli.add_typer(notes_cli, name="notes")

#: Answer to a clarification when nobody can be asked (no TTY) or nothing was typed.
DEFAULTS_ANSWER: dict[str, str] = {"action": "defaults"}

EventHandler = Callable[[Mapping[str, Any]], None]
ClarificationHandler = Callable[[Any], Any]

# What `run` asks and prints follows the request's language: a request with Chinese in
# it gets Chinese (`request_language`), any other English. What models and people wrote
# (the post, the planner's question, feedback) is printed as written.
TEXT: dict[str, dict[str, str]] = {
    "en": {
        "status.stage": "{stage} (attempt {n})",
        "attempt": "── attempt {n}/{max} ──",
        "knowledge": "  knowledge: {n} note(s) injected",
        "step": "  → step {n}: ",
        "fallback": "  ↪ fallback {src} → {dst} ({reason}: {detail})",
        "ignored": "  ⚠ ignored notes {ids} ({severity}): {reason}",
        "critic": "  critic: ",
        "score": " score {score}/{threshold}",
        "judge.unavailable": " (judge unavailable)",
        "judge.skipped": " (nothing to judge)",
        "failed_checks": "  failed checks: {names}",
        "image": "  image {slot}: {url}",
        "not_judged": "not judged",
        "no_title": "(no title)",
        "images": "images",
        "col.slot": "slot",
        "col.file": "file",
        "col.alt": "alt",
        "summary": "outcome [bold]{outcome}[/]  verdict {verdict}  score {score}  "
        "attempts {attempts}",
        "exhausted": "  (retries exhausted)",
        "question": "question",
        "question.fallback": "The planner needs more details.",
        "not_interactive": "(not interactive: continuing with defaults)",
        "choose": "Choose an option's number, or type the details",
        "details": "Details",
        "finished": "finished in {s:.1f} s with {calls} LLM calls",
        "usage": "LLM usage by role",
        "col.role": "role",
        "col.calls": "calls",
        "col.prompt": "prompt tokens",
        "col.completion": "completion tokens",
        "col.seconds": "seconds",
        "total": "total",
        "unknown": "unknown",
        "cancelled": "cancelled",
        "failed": "run failed:",
        "invalid": "invalid input:",
        "ids": "run {run} · thread {thread} (should this process die: atelier run --resume {run})",
        "holder": "process {pid} ({what})",
        "in_use": "DATA_DIR {dir} is in use by {holder}: stop it, or run with another "
        "DATA_DIR (DATA_DIR=… atelier run …)",
    },
    "zh": {
        "status.stage": "{stage}（第 {n} 次尝试）",
        "attempt": "── 第 {n}/{max} 次尝试 ──",
        "knowledge": "  知识库：注入笔记 {n} 条",
        "step": "  → 第 {n} 步：",
        "fallback": "  ↪ 改派 {src} → {dst}（{reason}：{detail}）",
        "ignored": "  ⚠ 忽略了笔记 {ids}（{severity}）：{reason}",
        "critic": "  评审：",
        "score": " 得分 {score}/{threshold}",
        "judge.unavailable": "（评审模型不可用）",
        "judge.skipped": "（没有可评审的内容）",
        "failed_checks": "  未通过的检查：{names}",
        "image": "  图 {slot}：{url}",
        "not_judged": "未评审",
        "no_title": "（无标题）",
        "images": "配图",
        "col.slot": "序号",
        "col.file": "文件",
        "col.alt": "说明",
        "summary": "结果 [bold]{outcome}[/]  评审 {verdict}  得分 {score}  尝试 {attempts} 次",
        "exhausted": "  （重试已用尽）",
        "question": "需要确认",
        "question.fallback": "规划需要更多信息。",
        "not_interactive": "（非交互终端：按默认继续）",
        "choose": "输入选项编号，或直接输入补充细节",
        "details": "补充细节",
        "finished": "用时 {s:.1f} 秒，调用模型 {calls} 次",
        "usage": "各角色的模型用量",
        "col.role": "角色",
        "col.calls": "调用",
        "col.prompt": "输入词元",
        "col.completion": "输出词元",
        "col.seconds": "耗时（秒）",
        "total": "合计",
        "unknown": "未知",
        "cancelled": "已取消",
        "failed": "运行失败：",
        "invalid": "输入无效：",
        "ids": "运行 {run} · 会话 {thread}（进程意外退出后可用 atelier run --resume {run} 继续）",
        "holder": "进程 {pid}（{what}）",
        "in_use": "DATA_DIR {dir} 正被{holder}使用：请先停止它，或换一个 DATA_DIR 运行"
        "（DATA_DIR=… atelier run …）",
        "outcome.completed": "已完成",
        "outcome.exhausted": "未达标",
        "outcome.needs_clarification": "待补充",
        "outcome.failed": "失败",
    },
}


def request_language(request: str) -> str:
    """Return "zh" for a request with Chinese (CJK ideographs) in it, else "en"."""
    return "zh" if any("\u3400" <= ch <= "\u9fff" for ch in request) else "en"


def _t(lang: str, key: str, **values: Any) -> str:
    """Return the CLI's text `key` in `lang` (English when it has none), filled in."""
    text = TEXT.get(lang, TEXT["en"]).get(key, TEXT["en"].get(key, key))
    return text.format(**values) if values else text


def _name(lang: str, kind: str, value: Any) -> str:
    """Return the name of an id (a stage, agent, verdict, outcome, …) in `lang`.

    Stages, agents, verdicts and reasons are named by `app.names` (the console shows
    the same names); outcomes by `TEXT`. The id itself when it has no name.
    """
    if kind in names.CATALOGUES:
        return names.name(lang, kind, value)
    return TEXT.get(lang, {}).get(f"{kind}.{value}", str(value))


def main() -> None:
    """Run the `atelier` command line (the console script's entry point)."""
    cli()


def _settings() -> Settings:
    """Read settings, turning a configuration error into a clear message and exit 2."""
    try:
        return Settings()
    except ValidationError as exc:
        Console(stderr=True).print(f"[red]Invalid configuration:[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from None


# --------------------------------------------------------------------------- serve

GRACEFUL_SHUTDOWN_SECONDS = 5
#: Seconds an idle keep-alive connection stays open. Longer than any client or proxy
#: keeps one for reuse (httpx, which the official SDK uses: 5 s; nginx's upstream
#: keep-alive: 60 s): at uvicorn's default of 5 s, a request sent on a connection at the
#: moment it turned 5 s idle was reset unread whenever the server's loop ran late,
#: and the client saw a `ReadError` with no response and no run
#: (`bench/bench_scale.py`: one of 300 streams started at once).
KEEP_ALIVE_SECONDS = 75


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    reload: Annotated[bool, typer.Option(help="Restart on code changes (development).")] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=16,
            help="With DATABASE_URL: workers executing runs in this process (RUN_WORKERS, "
            "default 1); 0 serves the API only and leaves runs to `atelier worker`.",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API and the console, and print the console's URL once it is up."""
    import uvicorn

    if workers is not None:
        os.environ["RUN_WORKERS"] = str(workers)  # read by the app factory's Settings

    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    url = f"http://{shown_host}:{port}/"
    threading.Thread(target=_announce_when_up, args=(url,), daemon=True).start()
    if not reload:  # with --reload the app runs in a child process
        from app.heap import SERVER_MODULES, freeze_after_imports

        freeze_after_imports(SERVER_MODULES)
    # A stream lasts as long as the run it follows: without a bound, a stop would wait
    # for every watched run to finish. Runs cut short resume at the next start.
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        reload=reload,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )


def _announce_when_up(url: str, interval: float = 0.25) -> None:
    """Print the console URL once the service is ready (`/ready` answers 200).

    Start-up has by then opened the database and, without `LLM_BASE_URL`, made the
    embedded model answer a completion: a model that crashes makes start-up fail
    with its one-line reason instead, and this never prints.
    """
    while True:
        try:
            ready = httpx.get(f"{url}ready", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            ready = False
        if not ready:
            time.sleep(interval)
            continue
        Console(stderr=True).print(
            Panel.fit(f"Atelier is up — open the console at [bold link={url}]{url}[/]")
        )
        return


# --------------------------------------------------------------------------- run

#: The assistant `atelier run` runs: the content pipeline.
ASSISTANT = "atelier"
#: The stream modes of the runs `atelier run` starts: the pipeline's events and the values.
RUN_STREAM_MODES = ("custom", "values")


class RunFailed(RuntimeError):
    """A run ended without a post: it failed, timed out, was cancelled, or cannot go on."""

    def __init__(self, error: str, message: str) -> None:
        """Name the error as the run's `error` frame does (`error`, `message`)."""
        super().__init__(message)
        self.error = error
        self.message = message


def cli_owner(settings: Settings) -> str:
    """Return the owner of the threads `atelier run` creates.

    The first API key's owner when AUTH_API_KEYS is set, so the console opened with
    that key lists them; the open service's `anonymous` otherwise.
    """
    keys = settings.auth_api_keys
    return owner_id_for(keys[0].get_secret_value()) if keys else ANONYMOUS


@asynccontextmanager
async def open_embedded_engine(
    settings: Settings, *, callbacks: Sequence[BaseCallbackHandler] = ()
) -> AsyncIterator[RunManager]:
    """Own DATA_DIR and open the embedded run engine on it, as `atelier serve` does.

    The embedded run backend (`engine.sqlite.backend`: the run store and LangGraph's
    checkpoints in `DATA_DIR/atelier.db`, owned by this process), the studio's
    services from `studio.services.open_services`, the served assistants. Entering
    the manager restarts the runs a killed process left behind (`RunManager.recover`);
    leaving it stops the runs in flight without an outcome, for the next start.

    Args:
        settings: The deployment's settings.
        callbacks: LangChain callback handlers for every run (e.g. `LLMCallCounter`).

    Raises:
        DataDirInUse: Another process (`atelier serve`, another `atelier run`) owns
            DATA_DIR; nothing was opened.
    """
    async with AsyncExitStack() as stack:
        backend = await stack.enter_async_context(
            open_sqlite_backend(settings, owner="atelier run")
        )
        context = await stack.enter_async_context(open_services(settings))
        setup = ExecutorSetup(
            assistants=build_assistants(ASSISTANTS, backend.checkpointer),
            context=context,
            run_timeout=settings.run_timeout,
            callbacks=callbacks,
        )
        manager = RunManager(
            backend=backend,
            setup=setup,
            max_attempts=settings.run_max_attempts,
            event_retention_hours=settings.event_retention_hours,
        )
        yield await stack.enter_async_context(manager)


async def follow(manager: RunManager, run: RunRecord) -> AsyncIterator[tuple[str, Any]]:
    """Yield a run's frames from its first as `(event, data)`, up to its `end` frame.

    The frames a client of `GET /threads/{t}/runs/{r}/stream` without a cursor reads
    (`engine.follow.follow_frames`: replayed from the run's event log, then live as
    they are committed).

    Raises:
        RunFailed: The run stopped without an `end` frame (it stalled, or its log
            cannot be read now); it may be resumed later.
    """
    followed = follow_frames(manager, run.run_id, run.thread_id)
    async with contextlib.aclosing(followed):
        async for item in followed:
            if isinstance(item, Stopped):
                raise RunFailed(
                    "RunStalled" if item.reason == "stalled" else "StreamUnavailable",
                    f"run {run.run_id} stopped before its end ({item.reason}); "
                    f"finish it later with `atelier run --resume {run.run_id}`",
                )
            if isinstance(item, Frame):
                yield item.event, json.loads(item.data)
                if item.event == "end":
                    return


async def start_run(
    manager: RunManager,
    owner: str,
    *,
    inputs: Mapping[str, Any] | None = None,
    thread_id: str | None = None,
    command: Mapping[str, Any] | None = None,
) -> RunRecord:
    """Create a run of the `atelier` assistant, as `POST /runs` (or `/threads/{t}/runs`) would.

    Args:
        manager: The run engine.
        owner: The thread's owner (`cli_owner`).
        inputs: The pipeline input (PRODUCT.md §2.6), checked by the assistant's input model.
        thread_id: The thread to run on; None starts a new one.
        command: A command instead of input, e.g. `{"resume": answer}`.

    Raises:
        pydantic.ValidationError: The input is not the assistant's.
        RunsError: The engine refused the run (a busy thread, nothing to resume, …).
    """
    assistant = manager.assistant(ASSISTANT)
    kwargs: dict[str, Any] = {"stream_mode": list(RUN_STREAM_MODES), "config": {}}
    if inputs is not None:
        model = assistant.spec.input_model
        kwargs["input"] = (
            model.model_validate(dict(inputs)).model_dump(mode="json", exclude_unset=True)
            if model is not None
            else dict(inputs)
        )
    if command is not None:
        kwargs["command"] = dict(command)
    run, _ = await manager.create(
        RunRequest(owner=owner, thread_id=thread_id, assistant=assistant, kwargs=kwargs)
    )
    return run


async def execute(
    manager: RunManager,
    run: RunRecord,
    *,
    on_event: EventHandler,
    clarify: ClarificationHandler,
    on_run: Callable[[RunRecord], None] | None = None,
) -> dict[str, Any]:
    """Follow a run of the engine to its end and return its result payload.

    A run that ends waiting for the planner's answer (status interrupted, with an
    interrupt) has `clarify` asked, and the answer resumes the thread by a new run
    (`command: {"resume": answer}`), followed the same way. A task cancelled while it
    follows (Ctrl-C) cancels the run it follows (action interrupt) before it stops.

    Args:
        manager: The run engine executing the run.
        run: The run, as created or found in the store.
        on_event: Called with every `custom` frame's event, in order.
        clarify: Called with an interrupt's value (the planner's question); what it
            returns resumes the run.
        on_run: Called with each run before it is followed (the first, then resumes).

    Returns:
        The `result` the finalize node wrote, as the engine's run result holds it.

    Raises:
        RunFailed: A run ended with an error, was cancelled, or its stream closed early.
    """
    while True:
        if on_run is not None:
            on_run(run)
        try:
            async for event, data in follow(manager, run):
                if event.split("|", 1)[0] == "custom" and isinstance(data, Mapping):
                    on_event(data)
        except asyncio.CancelledError:
            manager.cancel_soon(run.run_id)
            await manager.wait(run.run_id)
            raise
        ended = await manager.wait(run.run_id) or run
        values = await manager.result(ended)
        error = values.get("__error__")
        if error:
            raise RunFailed(str(error.get("error")), str(error.get("message")))
        pending = values.get("__interrupt__") or []
        if ended.status == "interrupted" and pending:
            question = pending[0].get("value") if isinstance(pending[0], Mapping) else pending[0]
            command = {"resume": clarify(question)}
            run = await start_run(manager, ended.owner, thread_id=ended.thread_id, command=command)
            continue
        result = values.get("result")
        if ended.status != "success" or not isinstance(result, dict):
            if ended.status == "interrupted":  # no question pending: it was cancelled
                raise RunFailed("RunCancelled", f"run {ended.run_id} was cancelled")
            raise RunFailed("NoResult", f"run {ended.run_id} ended {ended.status} without a result")
        return result


async def run_request(
    settings: Settings,
    inputs: Mapping[str, Any],
    *,
    on_event: EventHandler,
    clarify: ClarificationHandler,
    on_run: Callable[[RunRecord], None] | None = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> dict[str, Any]:
    """Run one request on the embedded engine, on a new thread, and return its result."""
    async with open_embedded_engine(settings, callbacks=callbacks) as manager:
        run = await start_run(manager, cli_owner(settings), inputs=inputs)
        return await execute(manager, run, on_event=on_event, clarify=clarify, on_run=on_run)


async def resume_run(
    settings: Settings,
    run_id: str,
    *,
    on_found: Callable[[str], None],
    on_event: EventHandler,
    clarify: ClarificationHandler,
    on_run: Callable[[RunRecord], None] | None = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> dict[str, Any]:
    """Follow a run of DATA_DIR from its first frame to its end; return its result.

    Opening the engine restarts the run if a killed process left it pending or
    running (from its last checkpoint, attempt + 1); a run that already ended is
    replayed. `on_found` gets its request (for the language) before it is followed.

    Raises:
        RunFailed: DATA_DIR has no such run, or it ended without a post.
    """
    async with open_embedded_engine(settings, callbacks=callbacks) as manager:
        run = await manager.find_run(run_id)
        if run is None:
            raise RunFailed("NotFound", f"run {run_id} is not in {settings.database_path}")
        on_found(await _request_of(manager, run))
        return await execute(manager, run, on_event=on_event, clarify=clarify, on_run=on_run)


async def _request_of(manager: RunManager, run: RunRecord) -> str:
    """Return a run's request: its input's, or (a resume) its thread's."""
    request = (run.kwargs.get("input") or {}).get("request")
    if request is None:
        thread = await manager.get_thread(run.owner, run.thread_id)
        request = (thread.values or {}).get("request")
    return str(request or "")


class LLMCallCounter(BaseCallbackHandler):
    """Count the chat model calls of a run (a retry inside the client is not a call)."""

    def __init__(self) -> None:
        """Start at zero."""
        self.calls = 0
        self._lock = threading.Lock()

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        """Count one call."""
        with self._lock:
            self.calls += 1


class ProgressView:
    """Render pipeline events as a spinner line plus one printed line per notable event."""

    def __init__(self, console: Console, progress: Progress | None, lang: str = "en") -> None:
        """Print through `console` in `lang`; `progress` (may be None) shows the current stage."""
        self.console = console
        self.lang = lang
        self.progress = progress
        self.task = progress.add_task("starting", total=None) if progress else None
        self.stage = ""
        self.attempt = 0

    def _status(self, text: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=text)

    def __call__(self, event: Mapping[str, Any]) -> None:
        """Show one `custom` event."""
        kind = event.get("type")
        line = self.describe(event, self.lang)
        lang = self.lang
        if kind == "stage.started":
            self.stage = str(event.get("stage", ""))
            stage = _name(lang, "stage", self.stage)
            self._status(_t(lang, "status.stage", stage=stage, n=event.get("attempt", 0)))
        elif kind == "attempt.started":
            self.attempt = int(event.get("attempt") or 0)
        elif kind == "supervisor.route":
            executor = _name(lang, "stage", "executor")
            self._status(f"{executor} · {_name(lang, 'agent', event.get('next_agent'))}")
        if line is not None:
            self.console.print(line)

    @staticmethod
    def describe(event: Mapping[str, Any], lang: str = "en") -> Text | None:
        """Return the printed line for an event in `lang`, or None for status-only events."""
        kind = event.get("type")
        get = event.get

        def agent(value: Any) -> str:
            return _name(lang, "agent", value)

        if kind == "stage.completed":
            seconds = float(get("duration_ms") or 0) / 1000
            stage = _name(lang, "stage", get("stage"))
            return Text.assemble(("✓ ", "green"), stage, (f"  {seconds:.1f} s", "dim"))
        if kind == "attempt.started":
            line = _t(lang, "attempt", n=get("attempt"), max=get("max_attempts"))
            return Text(line, style="bold")
        if kind == "knowledge.injected":
            return Text(_t(lang, "knowledge", n=len(get("notes") or [])), style="cyan")
        if kind == "supervisor.route":
            guidance = str(get("guidance") or "")
            short = guidance if len(guidance) <= 60 else guidance[:59] + "…"
            return Text.assemble(
                (_t(lang, "step", n=get("step")), "dim"),
                (agent(get("next_agent")), "bold"),
                (f"  {short}" if short else "", "dim"),
            )
        if kind == "agent.fallback":
            line = _t(
                lang,
                "fallback",
                src=agent(get("from")),
                dst=agent(get("to")),
                reason=_name(lang, "reason", get("reason")),
                detail=get("detail", ""),
            )
            return Text(line, style="yellow")
        if kind == "knowledge.deviation":
            line = _t(
                lang,
                "ignored",
                ids=get("ignored_notes"),
                severity=get("severity"),
                reason=get("reason", ""),
            )
            return Text(line, style="yellow")
        if kind == "critic.verdict":
            failed = [c.get("name") for c in get("checks") or [] if not c.get("passed")]
            style = "green" if get("passed") else "red"
            judge = get("judge", "ok")
            judged = _t(lang, f"judge.{judge}") if judge in ("unavailable", "skipped") else ""
            threshold = f"{float(get('threshold') or 0):.2f}"
            # A verdict no judge gave has no score to set against the threshold.
            scored = (
                _t(lang, "score", score=_score(get("score"), lang), threshold=threshold)
                if get("score") is not None
                else ""
            )
            text = Text.assemble(
                (_t(lang, "critic"), "bold"),
                (_name(lang, "verdict", get("verdict")), style),
                scored + judged,
                f" → {_name(lang, 'stage', get('next'))}",
            )
            if failed:
                names = ", ".join(map(str, failed))
                text.append(_t(lang, "failed_checks", names=names), style="dim")
            return text
        if kind == "asset.created":
            return Text(_t(lang, "image", slot=get("slot"), url=get("url")), style="magenta")
        return None


def _score(score: Any, lang: str = "en") -> str:
    """Format a judge's score; without one (no judge gave it) say "not judged", not 0.00."""
    return f"{float(score):.2f}" if score is not None else _t(lang, "not_judged")


def render_usage(usage: Mapping[str, Any] | None, lang: str = "en") -> Table | None:
    """Render `result.usage` (calls, tokens, seconds by role); unknown tokens say so."""
    roles = (usage or {}).get("roles") or {}
    if not roles:
        return None

    def tokens(value: Any) -> str:
        return _t(lang, "unknown") if value is None else str(value)

    table = Table(
        *(_t(lang, f"col.{c}") for c in ("role", "calls", "prompt", "completion", "seconds")),
        box=None,
        title=_t(lang, "usage"),
        title_justify="left",
    )
    rows = [*((_name(lang, "agent", r), u) for r, u in roles.items())]
    rows.append((_t(lang, "total"), (usage or {}).get("total") or {}))
    for name, u in rows:
        table.add_row(
            name,
            str(u.get("calls", 0)),
            tokens(u.get("prompt_tokens")),
            tokens(u.get("completion_tokens")),
            f"{float(u.get('seconds') or 0):.1f}",
        )
    return table


def render_result(result: Mapping[str, Any], assets_dir: Path, lang: str = "en") -> Group:
    """Render the result payload as the finished post and its quality report."""
    post = result.get("post") or {}
    parts: list[Any] = []
    body = Text()
    for block in post.get("blocks") or []:
        if not isinstance(block, Mapping):
            body.append(f"{block}\n\n")
            continue
        text = block.get("text") or block.get("content") or block.get("desc") or ""
        if block.get("type") == "image":
            body.append(f"[image {block.get('slot', '')}] {text}\n\n", style="magenta")
        elif text:
            body.append(f"{text}\n\n")
    tags = " ".join(f"#{t}" for t in post.get("tags") or [])
    if tags:
        body.append(tags, style="cyan")
    title = str(post.get("title") or _t(lang, "no_title"))
    parts.append(Panel(body, title=Text(title, style="bold"), title_align="left"))

    images = result.get("images") or []
    if images:
        store = AssetStore(assets_dir)
        table = Table(
            *(_t(lang, f"col.{c}") for c in ("slot", "file", "alt")),
            box=None,
            title=_t(lang, "images"),
            title_justify="left",
        )
        for image in images:
            asset_id = str(image.get("asset_id", ""))
            path = store.path(asset_id) if is_valid_asset_id(asset_id) else None
            table.add_row(
                str(image.get("slot", "")),
                str(path or image.get("url", "")),
                str(image.get("alt") or ""),
            )
        parts.append(table)

    quality = result.get("quality") or {}
    summary = _t(
        lang,
        "summary",
        outcome=_name(lang, "outcome", result.get("outcome")),
        verdict=_name(lang, "verdict", quality.get("verdict")),
        score=_score(quality.get("score"), lang),
        attempts=quality.get("attempts"),
    ) + (_t(lang, "exhausted") if quality.get("exhausted") else "")
    parts.append(Text.from_markup(summary))
    usage = render_usage(result.get("usage"), lang)
    if usage is not None:
        parts.append(usage)
    return Group(*parts)


def _terminal_clarifier(
    console: Console, interactive: bool, lang: str = "en"
) -> ClarificationHandler:
    """Return a handler that asks the planner's question on the terminal, or answers it.

    Its own words (the panel's title, the prompts) are in `lang`; the question is the
    planner's, as it wrote it.

    The planner's interrupt value is ``{"question": str, "options": [{"id", "label"}]}``
    and it resumes with ``{"action": "defaults"}`` or ``{"action": "details",
    "details": text}`` (see `nodes.planner.parse_resume`).
    """

    def clarify(value: Any) -> Any:
        question = value.get("question") if isinstance(value, Mapping) else value
        options = value.get("options") or [] if isinstance(value, Mapping) else []
        shown = str(question or _t(lang, "question.fallback"))
        console.print(Panel(shown, title=_t(lang, "question")))
        if not interactive:
            console.print(f"[dim]{escape(_t(lang, 'not_interactive'))}[/dim]")
            return DEFAULTS_ANSWER
        for number, option in enumerate(options, 1):
            label = option.get("label", option) if isinstance(option, Mapping) else option
            console.print(f"  {number}. {label}")
        answer = Prompt.ask(_t(lang, "choose"), console=console, default="1").strip()
        if answer.isdigit() and 1 <= int(answer) <= len(options):
            option = options[int(answer) - 1]
            if not isinstance(option, Mapping) or option.get("id") != "details":
                return DEFAULTS_ANSWER
            answer = Prompt.ask(_t(lang, "details"), console=console, default="").strip()
        if not answer:
            return DEFAULTS_ANSWER
        return {"action": "details", "details": answer}

    return clarify


@cli.command()
def run(
    request: Annotated[
        str | None,
        typer.Argument(help="What to write, e.g. 写一篇小红书笔记：… (none with --resume)."),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="RUN_ID",
            help="Finish a run a killed `atelier run` left behind (or replay an ended one).",
        ),
    ] = None,
    auto_confirm: Annotated[
        bool, typer.Option("--auto-confirm", help="Never stop to ask; use defaults.")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print only the result payload as JSON.")
    ] = False,
    image_count: Annotated[
        int | None, typer.Option(min=1, max=9, help="Images to generate (1-9).")
    ] = None,
    platform: Annotated[str | None, typer.Option(help="Target platform.")] = None,
    image_provider: Annotated[
        str | None, typer.Option(help="Image provider: local or openai.")
    ] = None,
    fast: Annotated[bool, typer.Option("--fast", help="Fast mode (fewer steps).")] = False,
) -> None:
    """Run one request on the run engine here, showing its progress, then print the post.

    What it asks and prints is in the request's language (`request_language`).
    """
    optional = {
        "image_count": image_count,
        "platform": platform,
        "image_provider": image_provider,
        "fast_mode": fast or None,
    }
    inputs: dict[str, Any] = {}
    if resume is not None:
        if request is not None or any(v is not None for v in optional.values()):
            raise typer.BadParameter(
                "takes no request and no input option: the run has its own",
                param_hint="--resume",
            )
    elif request is None:
        raise typer.BadParameter("missing (or --resume RUN_ID)", param_hint="REQUEST")
    elif not request.strip() or len(request) > 4000:
        raise typer.BadParameter("must be 1-4000 characters", param_hint="REQUEST")
    else:
        inputs = {"request": request, "auto_confirm": auto_confirm}
        inputs.update({k: v for k, v in optional.items() if v is not None})
    settings = _settings()

    out = Console()
    err = Console(stderr=True)
    shown = err if json_output else out
    interactive = not auto_confirm and sys.stdin.isatty() and shown.is_terminal
    lang = request_language(request or "")  # --resume: once the run is found
    views: list[ProgressView] = []
    counter = LLMCallCounter()

    def found(run_request_text: str) -> None:
        nonlocal lang
        lang = request_language(run_request_text)
        for view in views:
            view.lang = lang

    def announce(started: RunRecord) -> None:
        line = _t(lang, "ids", run=started.run_id, thread=started.thread_id)
        err.print(f"[dim]{escape(line)}[/dim]", soft_wrap=True)

    def drive(on_event: EventHandler, clarify: ClarificationHandler) -> dict[str, Any]:
        handlers: dict[str, Any] = {
            "on_event": on_event,
            "clarify": clarify,
            "on_run": announce,
            "callbacks": [counter],
        }
        if resume is not None:
            return asyncio.run(resume_run(settings, resume, on_found=found, **handlers))
        return asyncio.run(run_request(settings, inputs, **handlers))

    def ask(value: Any) -> Any:
        return _terminal_clarifier(shown, interactive, lang)(value)

    started = time.monotonic()
    try:
        if json_output:
            result = drive(lambda _e: None, ask)
        else:
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=out,
                transient=True,
            ) as progress:

                def clarify(value: Any) -> Any:
                    progress.stop()  # the question needs the terminal, not a spinner
                    try:
                        return ask(value)
                    finally:
                        progress.start()

                views.append(ProgressView(out, progress, lang))
                result = drive(views[0], clarify)
    except KeyboardInterrupt:
        err.print(f"[yellow]{_t(lang, 'cancelled')}[/yellow]")
        raise typer.Exit(130) from None
    except DataDirInUse as exc:
        err.print(f"[red]{escape(_in_use(exc, lang))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    except ValidationError as exc:  # an input option the assistant's input model refuses
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        err.print(f"[red]{_t(lang, 'invalid')}[/red] {escape(problems)}")
        raise typer.Exit(2) from None
    except Exception as exc:  # one readable line, not a traceback, for a failed run
        failed = _t(lang, "failed")
        name = exc.error if isinstance(exc, RunFailed) else type(exc).__name__
        err.print(f"[red]{failed}[/red] {escape(name)}: {escape(str(exc))}")
        raise typer.Exit(1) from None

    if json_output:
        out.print_json(json.dumps(result, ensure_ascii=False, default=str))
    else:
        out.print(render_result(result, settings.assets_dir, lang))
        elapsed = time.monotonic() - started
        finished = _t(lang, "finished", s=elapsed, calls=counter.calls)
        out.print(f"[dim]{escape(finished)}[/dim]")
    raise typer.Exit(0 if result.get("outcome") in ("completed", "exhausted") else 1)


def _in_use(exc: DataDirInUse, lang: str) -> str:
    """Return the one line that says who owns DATA_DIR, and the two ways out."""
    pid = exc.pid if exc.pid is not None else "?"
    holder = _t(lang, "holder", pid=pid, what=exc.what or "atelier")
    return _t(lang, "in_use", dir=exc.data_dir, holder=holder)


# --------------------------------------------------------------------------- notes


def parse_notes_jsonl(lines: Sequence[str]) -> tuple[list[tuple[int, KnowledgeNote]], list[str]]:
    """Validate JSONL lines as notes; return (line number, note) pairs and the errors.

    Blank lines are skipped. An id that appears twice in the file is an error on
    its second line.
    """
    notes: list[tuple[int, KnowledgeNote]] = []
    errors: list[str] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON ({exc.msg})")
            continue
        if not isinstance(data, dict):
            errors.append(f"line {number}: expected a JSON object")
            continue
        try:
            note = KnowledgeNote.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'note'}: {e['msg']}" for e in exc.errors()
            )
            errors.append(f"line {number}: {problems}")
            continue
        if note.id in first_line:
            errors.append(f"line {number}: id {note.id!r} repeats line {first_line[note.id]}")
            continue
        first_line[note.id] = number
        notes.append((number, note))
    return notes, errors


async def import_notes(database: str, lines: Sequence[str]) -> tuple[int, list[str]]:
    """Import JSONL notes into the vault, all or none; return (imported, errors)."""
    from knowledge.repository import DuplicateNoteError, SqliteNoteRepository

    numbered, errors = parse_notes_jsonl(lines)
    async with SqliteNoteRepository(database) as repo:
        for number, note in numbered:
            if await repo.get(note.id) is not None:
                errors.append(f"line {number}: id {note.id!r} is already in the vault")
        if errors:
            return 0, sorted(errors, key=_line_number)
        try:
            await repo.add_many(note for _, note in numbered)
        except DuplicateNoteError as exc:  # another writer took an id meanwhile
            return 0, [str(exc)]
    return len(numbered), []


def _line_number(error: str) -> int:
    head = error.split(":", 1)[0].removeprefix("line ")
    return int(head) if head.isdigit() else 0


async def export_notes(database: str) -> list[str]:
    """Return every note of the vault (archived ones too) as JSONL lines, oldest first."""
    from knowledge.repository import MAX_PAGE, SqliteNoteRepository

    lines: list[str] = []
    async with SqliteNoteRepository(database) as repo:
        offset = 0
        while page := await repo.list(limit=MAX_PAGE, offset=offset):
            lines += [note.model_dump_json() for note in page]
            offset += len(page)
    return lines


@notes_cli.command("import")
def notes_import(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="JSONL file.")
    ],
) -> None:
    """Import notes from a JSONL file: every line is checked first; all or nothing."""

    settings = _settings()
    err = Console(stderr=True)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        err.print(f"[red]{escape(str(file))} is not UTF-8 text[/red]")
        raise typer.Exit(1) from None
    imported, errors = asyncio.run(import_notes(str(settings.database_path), lines))
    if errors:
        err.print(f"[red]Nothing imported: {len(errors)} bad line(s) in {escape(str(file))}[/red]")
        for error in errors[:50]:
            err.print(f"  {escape(error)}")
        if len(errors) > 50:
            err.print(f"  … and {len(errors) - 50} more")
        raise typer.Exit(1)
    Console().print(f"Imported {imported} note(s) into {escape(str(settings.database_path))}")


@notes_cli.command("export")
def notes_export(
    file: Annotated[
        Path | None, typer.Argument(dir_okay=False, help="Output file (default: stdout).")
    ] = None,
) -> None:
    """Export every note of the vault as JSONL, to a file or stdout."""

    settings = _settings()
    lines = asyncio.run(export_notes(str(settings.database_path)))
    text = "".join(f"{line}\n" for line in lines)
    if file is None:
        sys.stdout.write(text)
        return
    # Written beside the target and renamed, so a failed export leaves no half file.
    partial = file.with_name(f".{file.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(file)
    Console(stderr=True).print(f"Exported {len(lines)} note(s) to {escape(str(file))}")


# --------------------------------------------------------------------------- worker


@cli.command()
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1000,
            help="Runs executed at once (RUN_WORKER_CONCURRENCY, default 64).",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve this worker's Prometheus metrics at /metrics on this port "
            "(WORKER_METRICS_PORT; interface: WORKER_METRICS_HOST, default 127.0.0.1).",
        ),
    ] = None,
) -> None:
    """Execute runs of the shared queue (DATABASE_URL) until SIGTERM; no HTTP API."""
    import logging

    if metrics_port is not None:
        os.environ["WORKER_METRICS_PORT"] = str(metrics_port)  # read by Settings
    settings = _settings()
    if settings.database_url is None:
        Console(stderr=True).print(
            "[red]DATABASE_URL is not set[/red]: the embedded mode executes runs in "
            "`atelier serve`; a worker needs the shared PostgreSQL queue"
        )
        raise typer.Exit(2)
    from app.heap import WORKER_MODULES, freeze_after_imports
    from cli.worker import serve_worker

    freeze_after_imports(WORKER_MODULES)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # The event loop `atelier serve` runs on too (uvicorn's "auto" loop picks uvloop,
    # which `uvicorn[standard]` installs): a worker spends most of its CPU in the loop's
    # I/O, streaming LLM replies and writing frames. The stdlib loop where it is absent.
    run = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run
    run(serve_worker(settings, concurrency or settings.run_worker_concurrency))


# --------------------------------------------------------------------------- db

db_cli = typer.Typer(
    help="The PostgreSQL schema of the scale-out deployment.", no_args_is_help=True
)
cli.add_typer(db_cli, name="db")


@db_cli.command("upgrade")
def db_upgrade() -> None:
    """Apply the schema migrations DATABASE_URL lacks and print its version (idempotent)."""
    settings = _settings()
    err = Console(stderr=True)
    if settings.database_url is None:
        err.print(
            "[red]DATABASE_URL is not set[/red]: the embedded SQLite database needs no upgrade"
        )
        raise typer.Exit(2)
    try:
        from engine.db.migrations import upgrade_url
    except ImportError:
        err.print("[red]The scale-out backend is not installed[/red]: pip install 'atelier[scale]'")
        raise typer.Exit(1) from None
    try:
        version = asyncio.run(upgrade_url(settings.database_url.get_secret_value()))
    except Exception as exc:  # a database that cannot be reached or refuses the schema
        err.print(
            f"[red]Schema upgrade failed:[/red] {escape(type(exc).__name__)}: {escape(str(exc))}"
        )
        raise typer.Exit(1) from None
    Console().print(f"Database schema at version {version}")


if __name__ == "__main__":  # `python -m cli.main ...`, as the `atelier` script
    main()
