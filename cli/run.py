"""`atelier run`: a request run by the embedded run engine, its progress shown live.

It opens the embedded engine on DATA_DIR as `atelier serve` does
(`app.composition.open_product`, role `run`: the same services, webhooks and
tracing), starts a run of `atelier` (`run_spec` builds its request), follows its
stream as an API client would, shows its `custom` events as they happen and prints
the finished post. The planner's question is asked on the terminal and answered by
a resume run on the same thread; `--webhook URL` reports each run's end there, as a
served run's webhook does; `run --resume RUN_ID` finishes a run a killed `atelier
run` left behind. Exit status: 0 when the run ended with a post (outcome completed
or exhausted), 2 when DATA_DIR is another process's or an option is refused, 1
otherwise. See docs/cli.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from langchain_core.callbacks import BaseCallbackHandler
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.prompt import Prompt
from rich.table import Table
from rich.text import Text

from app.composition import open_product
from app.security import ANONYMOUS, owner_id_for
from app.texts import name_of, request_language, say
from cli.common import settings_or_exit
from core.settings import Settings
from engine import (
    DataDirInUse,
    Engine,
    Frame,
    InvalidFields,
    RunRecord,
    RunSpec,
    Stopped,
    follow_frames,
)
from providers.assets import AssetStore, is_valid_asset_id

#: Answer to a clarification when nobody can be asked (no TTY) or nothing was typed.
DEFAULTS_ANSWER: dict[str, str] = {"action": "defaults"}

EventHandler = Callable[[Mapping[str, Any]], None]
ClarificationHandler = Callable[[Any], Any]


#: The assistant `atelier run` runs: the content pipeline.
ASSISTANT = "atelier"
#: The stream modes of the runs `atelier run` starts: the pipeline's events and the values.
RUN_STREAM_MODES: tuple[str, ...] = ("custom", "values")


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
) -> AsyncIterator[Engine]:
    """Own DATA_DIR and open the embedded engine on it, as `atelier serve` does.

    `app.composition.open_product` with role `run`: the run store and LangGraph's
    checkpoints in `DATA_DIR/atelier.db` (owned by this process), the studio's
    services, the served assistants, webhooks and tracing. Opening it restarts the
    runs a killed process left behind; closing it stops the runs in flight without an
    outcome, for the next start.

    Args:
        settings: The deployment's settings.
        callbacks: LangChain callback handlers for every run (e.g. `LLMCallCounter`).

    Raises:
        DataDirInUse: Another process (`atelier serve`, another `atelier run`) owns
            DATA_DIR; nothing was opened.
    """
    async with open_product(settings, role="run", callbacks=callbacks) as engine:
        yield engine


async def follow(engine: Engine, run: RunRecord) -> AsyncIterator[tuple[str, Any]]:
    """Yield a run's frames from its first as `(event, data)`, up to its `end` frame.

    The frames a client of `GET /threads/{t}/runs/{r}/stream` without a cursor reads
    (`engine.follow_frames`: replayed from the run's event log, then live as they are
    committed).

    Raises:
        RunFailed: The run stopped without an `end` frame (it stalled, or its log
            cannot be read now); it may be resumed later.
    """
    followed = follow_frames(engine.runs, run.run_id, run.thread_id)
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


def run_spec(
    owner: str,
    *,
    inputs: Mapping[str, Any] | None = None,
    thread_id: str | None = None,
    command: Mapping[str, Any] | None = None,
    webhook: str | None = None,
) -> RunSpec:
    """Return the engine's run request of the `atelier` assistant, as `POST /runs` makes it.

    Args:
        owner: The thread's owner (`cli_owner`).
        inputs: The pipeline input (PRODUCT.md §2.6), checked by the assistant's input model.
        thread_id: The thread to run on; None starts a new one.
        command: A command instead of input, e.g. `{"resume": answer}`.
        webhook: The URL told about the run's end, or None.
    """
    return RunSpec(
        assistant_id=ASSISTANT,
        owner=owner,
        thread_id=thread_id,
        input=dict(inputs) if inputs is not None else None,
        command=dict(command) if command is not None else None,
        stream_mode=RUN_STREAM_MODES,
        webhook=webhook,
    )


async def start_run(
    engine: Engine,
    owner: str,
    *,
    inputs: Mapping[str, Any] | None = None,
    thread_id: str | None = None,
    command: Mapping[str, Any] | None = None,
    webhook: str | None = None,
) -> RunRecord:
    """Create a run of the `atelier` assistant (see `run_spec`); return it.

    Raises:
        RunsError: The engine refused the run (its input or webhook, a busy thread,
            nothing to resume, …); an `InvalidFields` names each field at fault.
    """
    spec = run_spec(owner, inputs=inputs, thread_id=thread_id, command=command, webhook=webhook)
    run, _ = await engine.runs.create(spec)
    return run


async def execute(
    engine: Engine,
    run: RunRecord,
    *,
    on_event: EventHandler,
    clarify: ClarificationHandler,
    on_run: Callable[[RunRecord], None] | None = None,
) -> dict[str, Any]:
    """Follow a run of the engine to its end and return its result payload.

    A run that ends waiting for the planner's answer (status interrupted, with an
    interrupt) has `clarify` asked, and the answer resumes the thread by a new run
    (`command: {"resume": answer}`, with the same webhook), followed the same way. A
    task cancelled while it follows (Ctrl-C) cancels the run it follows (action
    interrupt) before it stops.

    Args:
        engine: The engine executing the run.
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
    runs = engine.runs
    while True:
        if on_run is not None:
            on_run(run)
        try:
            async for event, data in follow(engine, run):
                if event.split("|", 1)[0] == "custom" and isinstance(data, Mapping):
                    on_event(data)
        except asyncio.CancelledError:
            runs.cancel_soon(run.run_id)
            await runs.wait(run.run_id)
            raise
        ended = await runs.wait(run.run_id) or run
        values = await runs.result(ended)
        error = values.get("__error__")
        if error:
            raise RunFailed(str(error.get("error")), str(error.get("message")))
        pending = values.get("__interrupt__") or []
        if ended.status == "interrupted" and pending:
            question = pending[0].get("value") if isinstance(pending[0], Mapping) else pending[0]
            run = await start_run(
                engine,
                ended.owner,
                thread_id=ended.thread_id,
                command={"resume": clarify(question)},
                webhook=ended.options.webhook,
            )
            continue
        result = values.get("result")
        if ended.status != "success" or not isinstance(result, dict):
            if ended.status == "interrupted":  # no question pending: it was cancelled
                raise RunFailed("RunCancelled", f"run {ended.run_id} was cancelled")
            raise RunFailed("NoResult", f"run {ended.run_id} ended {ended.status} without a result")
        return result


async def _reported(
    engine: Engine,
    settings: Settings,
    run: RunRecord,
    on_run: Callable[[RunRecord], None] | None,
    **handlers: Any,
) -> dict[str, Any]:
    """Execute a run; then wait (briefly) until the webhooks of the runs followed were tried.

    A process that exits at once would leave its runs' deliveries to the next one;
    a delivery not tried within the wait stays in the outbox for it.
    """
    followed: list[str] = []

    def each(started: RunRecord) -> None:
        followed.append(started.run_id)
        if on_run is not None:
            on_run(started)

    wait = settings.webhook_connect_timeout + 2 * settings.webhook_read_timeout + 2
    try:
        result = await execute(engine, run, on_run=each, **handlers)
    except RunFailed:
        await engine.webhooks.settle(followed, wait)
        raise
    await engine.webhooks.settle(followed, wait)
    return result


async def run_request(
    settings: Settings,
    inputs: Mapping[str, Any],
    *,
    on_event: EventHandler,
    clarify: ClarificationHandler,
    on_run: Callable[[RunRecord], None] | None = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
    webhook: str | None = None,
) -> dict[str, Any]:
    """Run one request on the embedded engine, on a new thread, and return its result."""
    async with open_embedded_engine(settings, callbacks=callbacks) as engine:
        run = await start_run(engine, cli_owner(settings), inputs=inputs, webhook=webhook)
        return await _reported(engine, settings, run, on_run, on_event=on_event, clarify=clarify)


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
    async with open_embedded_engine(settings, callbacks=callbacks) as engine:
        run = await engine.runs.find(run_id)
        if run is None:
            raise RunFailed("NotFound", f"run {run_id} is not in {settings.database_path}")
        on_found(await _request_of(engine, run))
        return await _reported(engine, settings, run, on_run, on_event=on_event, clarify=clarify)


async def _request_of(engine: Engine, run: RunRecord) -> str:
    """Return a run's request: its input's, or (a resume) its thread's."""
    graph_input = run.options.input
    request = graph_input.get("request") if isinstance(graph_input, dict) else None
    if request is None:
        thread = await engine.threads.get(run.owner, run.thread_id)
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
            stage = name_of(lang, "stage", self.stage)
            self._status(say(lang, "status.stage", stage=stage, n=event.get("attempt", 0)))
        elif kind == "attempt.started":
            self.attempt = int(event.get("attempt") or 0)
        elif kind == "supervisor.route":
            executor = name_of(lang, "stage", "executor")
            self._status(f"{executor} · {name_of(lang, 'agent', event.get('next_agent'))}")
        if line is not None:
            self.console.print(line)

    @staticmethod
    def describe(event: Mapping[str, Any], lang: str = "en") -> Text | None:
        """Return the printed line for an event in `lang`, or None for status-only events."""
        kind = event.get("type")
        get = event.get

        def agent(value: Any) -> str:
            return name_of(lang, "agent", value)

        if kind == "stage.completed":
            seconds = float(get("duration_ms") or 0) / 1000
            stage = name_of(lang, "stage", get("stage"))
            return Text.assemble(("✓ ", "green"), stage, (f"  {seconds:.1f} s", "dim"))
        if kind == "attempt.started":
            line = say(lang, "attempt", n=get("attempt"), max=get("max_attempts"))
            return Text(line, style="bold")
        if kind == "knowledge.injected":
            return Text(say(lang, "knowledge", n=len(get("notes") or [])), style="cyan")
        if kind == "supervisor.route":
            guidance = str(get("guidance") or "")
            short = guidance if len(guidance) <= 60 else guidance[:59] + "…"
            return Text.assemble(
                (say(lang, "step", n=get("step")), "dim"),
                (agent(get("next_agent")), "bold"),
                (f"  {short}" if short else "", "dim"),
            )
        if kind == "agent.fallback":
            line = say(
                lang,
                "fallback",
                src=agent(get("from")),
                dst=agent(get("to")),
                reason=name_of(lang, "reason", get("reason")),
                detail=get("detail", ""),
            )
            return Text(line, style="yellow")
        if kind == "knowledge.deviation":
            line = say(
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
            judged = say(lang, f"judge.{judge}") if judge in ("unavailable", "skipped") else ""
            threshold = f"{float(get('threshold') or 0):.2f}"
            # A verdict no judge gave has no score to set against the threshold.
            scored = (
                say(lang, "score", score=_score(get("score"), lang), threshold=threshold)
                if get("score") is not None
                else ""
            )
            text = Text.assemble(
                (say(lang, "critic"), "bold"),
                (name_of(lang, "verdict", get("verdict")), style),
                scored + judged,
                f" → {name_of(lang, 'stage', get('next'))}",
            )
            if failed:
                names = ", ".join(map(str, failed))
                text.append(say(lang, "failed_checks", names=names), style="dim")
            return text
        if kind == "asset.created":
            return Text(say(lang, "image", slot=get("slot"), url=get("url")), style="magenta")
        return None


def _score(score: Any, lang: str = "en") -> str:
    """Format a judge's score; without one (no judge gave it) say "not judged", not 0.00."""
    return f"{float(score):.2f}" if score is not None else say(lang, "not_judged")


def render_usage(usage: Mapping[str, Any] | None, lang: str = "en") -> Table | None:
    """Render `result.usage` (calls, tokens, seconds by role); unknown tokens say so."""
    roles = (usage or {}).get("roles") or {}
    if not roles:
        return None

    def tokens(value: Any) -> str:
        return say(lang, "unknown") if value is None else str(value)

    table = Table(
        *(say(lang, f"col.{c}") for c in ("role", "calls", "prompt", "completion", "seconds")),
        box=None,
        title=say(lang, "usage"),
        title_justify="left",
    )
    rows = [*((name_of(lang, "agent", r), u) for r, u in roles.items())]
    rows.append((say(lang, "total"), (usage or {}).get("total") or {}))
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
    title = str(post.get("title") or say(lang, "no_title"))
    parts.append(Panel(body, title=Text(title, style="bold"), title_align="left"))

    images = result.get("images") or []
    if images:
        store = AssetStore(assets_dir)
        table = Table(
            *(say(lang, f"col.{c}") for c in ("slot", "file", "alt")),
            box=None,
            title=say(lang, "images"),
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
    summary = say(
        lang,
        "summary",
        outcome=name_of(lang, "outcome", result.get("outcome")),
        verdict=name_of(lang, "verdict", quality.get("verdict")),
        score=_score(quality.get("score"), lang),
        attempts=quality.get("attempts"),
    ) + (say(lang, "exhausted") if quality.get("exhausted") else "")
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
        shown = str(question or say(lang, "question.fallback"))
        console.print(Panel(shown, title=say(lang, "question")))
        if not interactive:
            console.print(f"[dim]{escape(say(lang, 'not_interactive'))}[/dim]")
            return DEFAULTS_ANSWER
        for number, option in enumerate(options, 1):
            label = option.get("label", option) if isinstance(option, Mapping) else option
            console.print(f"  {number}. {label}")
        answer = Prompt.ask(say(lang, "choose"), console=console, default="1").strip()
        if answer.isdigit() and 1 <= int(answer) <= len(options):
            option = options[int(answer) - 1]
            if not isinstance(option, Mapping) or option.get("id") != "details":
                return DEFAULTS_ANSWER
            answer = Prompt.ask(say(lang, "details"), console=console, default="").strip()
        if not answer:
            return DEFAULTS_ANSWER
        return {"action": "details", "details": answer}

    return clarify


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
    webhook: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Report the run's end to this URL (signed with WEBHOOK_SECRET), as a "
            "served run's webhook does.",
        ),
    ] = None,
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
        if (
            request is not None
            or webhook is not None
            or any(v is not None for v in optional.values())
        ):
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
    settings = settings_or_exit()

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
        line = say(lang, "ids", run=started.run_id, thread=started.thread_id)
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
        return asyncio.run(run_request(settings, inputs, webhook=webhook, **handlers))

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
        err.print(f"[yellow]{say(lang, 'cancelled')}[/yellow]")
        raise typer.Exit(130) from None
    except DataDirInUse as exc:
        err.print(f"[red]{escape(_in_use(exc, lang))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    except InvalidFields as exc:  # an input option (or the webhook) the engine refuses
        problems = "; ".join(f"{_option_of(e['loc'])}: {e['msg']}" for e in exc.errors)
        err.print(f"[red]{say(lang, 'invalid')}[/red] {escape(problems)}")
        raise typer.Exit(2) from None
    except Exception as exc:  # one readable line, not a traceback, for a failed run
        failed = say(lang, "failed")
        name = exc.error if isinstance(exc, RunFailed) else type(exc).__name__
        err.print(f"[red]{failed}[/red] {escape(name)}: {escape(str(exc))}")
        raise typer.Exit(1) from None

    if json_output:
        out.print_json(json.dumps(result, ensure_ascii=False, default=str))
    else:
        out.print(render_result(result, settings.assets_dir, lang))
        elapsed = time.monotonic() - started
        finished = say(lang, "finished", s=elapsed, calls=counter.calls)
        out.print(f"[dim]{escape(finished)}[/dim]")
    raise typer.Exit(0 if result.get("outcome") in ("completed", "exhausted") else 1)


def _option_of(loc: Sequence[Any]) -> str:
    """Return what the command line calls a run request's field (`input.x` is `x`)."""
    parts = [str(p) for p in loc]
    return ".".join(parts[1:] if parts[:1] == ["input"] and len(parts) > 1 else parts)


def _in_use(exc: DataDirInUse, lang: str) -> str:
    """Return the one line that says who owns DATA_DIR, and the two ways out."""
    pid = exc.pid if exc.pid is not None else "?"
    holder = say(lang, "holder", pid=pid, what=exc.what or "atelier")
    return say(lang, "in_use", dir=exc.data_dir, holder=holder)
