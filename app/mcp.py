"""MCP: every assistant the caller can run is a tool at `/mcp` (its presets too).

MCP clients (desktop assistants, IDEs, other agents) reach Atelier over the Model
Context Protocol's Streamable HTTP transport at `POST /mcp`, served by the official
`mcp` SDK: its low-level `Server` with two handlers, behind its
`StreamableHTTPSessionManager`. `mcp_router(app, settings)` returns both as a router whose
lifespan runs the session manager inside the app's (so the manager stops taking
calls before the run engine closes).

* `tools/list`: one tool per assistant the caller can run: the built-in ones, then
  the ones the caller's API key created (brand presets, `POST /assistants`), oldest
  first; another key's never (without `AUTH_API_KEYS` every caller is the one owner
  `anonymous`, so all of them are everyone's). The listing is read for each request,
  from the caller's owner id (the server is stateless). It pages (`TOOLS_PAGE`
  created assistants a page; the cursor is an offset among them). A tool's
  `inputSchema` is the JSON schema of its graph's `input` (`AssistantSpec.input_model`,
  as `GET /assistants/{id}/schemas`); its title and description are the assistant's
  (`app.described`: for a preset its name, brand, platform and voice).
* Tool names (`tool_name`): MCP 2025-11-25 asks for 1–128 characters among letters,
  digits, `_`, `-` and `.`; the model APIs clients hand tools to take at most 64 and
  no dot. So an assistant id of letters, digits and `-` up to 64 characters (every
  generated UUID, `atelier`) is its own tool name; any other id (a `.` or `:` in it,
  or longer) is named by its characters with the others as `-`, cut to 51, then `_` and
  12 characters of its SHA-256 in base32: stable, and distinct from every plain id
  (no assistant id has a `_`) and from another such name unless two ids' 60-bit
  digests agree. `tools/call` takes the tool name (an id given as is works too).
* `tools/call`: runs the tool's assistant (a preset's fields fill the run's input as
  on `POST /threads/{id}/runs`, and its `brand` is recorded in the thread's values).
  The arguments are checked like a run's `input` on the HTTP API; a bad
  one is a tool error (`isError`) naming the field and the rule it broke. The run
  starts on a new thread owned by the caller's API key, with `auto_confirm` set
  where the input has it: nobody can answer the planner's question inside one tool
  call, so the planner goes on with its defaults. When the client sent a progress
  token, each pipeline stage and each supervisor decision is a progress notification
  (`progress` counts them, `message` names the stage or the agent, e.g.
  `writer_agent`). The answer is the post as Markdown text (title, body, `#tags`,
  the images as absolute links to `/assets/{id}`, signed when API keys are
  on so they load without one: `providers.asset_links`), with `structuredContent`
  carrying the thread and run ids, the outcome and the post; a run that ends
  without a post is a tool error saying how it ended.
* Stateless: every POST is served on its own, with no MCP session, so any replica
  answers any request (plain round robin, as deploy/nginx.conf), like the LangGraph
  Platform's `/mcp`. The call's progress and result ride its POST's response stream;
  GET (a stream for messages outside a request, which no session can have) and
  DELETE (ending a session) are answered 405, as the transport allows.
  Cancelling the call closes that stream (the cancellation of protocol 2026-07-28, and
  what a client that goes away does); then the run is cancelled too. A
  `notifications/cancelled` POSTed by a client of the older handshake protocols has
  no session to reach: that run goes on until the client disconnects (or to its end,
  its post staying on its thread). A body not declared JSON is answered 415 in the
  service's error shape (`JsonBodiesOnly`), where the SDK would send a bare 400.
* API keys apply as everywhere: `app.security.AuthMiddleware` answers 401 before
  the request reaches the SDK, and puts the caller's owner id in the ASGI scope,
  which the handlers read from the SDK's request context.
* `Origin` and `Host` are checked against DNS rebinding (`app.mcp_guard`): a
  browser's request from an origin outside CORS_ORIGINS gets 403, and so does,
  when the service runs open, one whose `Host` is neither loopback nor listed in
  MCP_ALLOWED_HOSTS.

The engine calls are the functions right below (`run_spec` builds the engine's run
request), so a change of the engine's door changes them only.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import mcp_types as types
from fastapi import APIRouter, FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from agentkit.chat import image_link
from app.access import Access, refusal
from app.deps import get_asset_links, get_engine, get_settings
from app.described import assistant_description, assistant_name
from app.errors import error_response, validation_message
from app.mcp_guard import McpOriginGuard
from app.routes.exports import post_markdown
from app.security import CALLER_STATE_KEY, PRINCIPAL_STATE_KEY, Caller, auth_mode
from core.settings import Settings
from engine import (
    Assistant,
    Engine,
    Frame,
    InvalidFields,
    NotFound,
    RunRecord,
    RunsError,
    RunSpec,
    Stopped,
    follow_frames,
)
from providers.asset_links import AssetLinks

log = logging.getLogger(__name__)

#: What the SDK hands a handler: the call's session, and its HTTP request.
Context = ServerRequestContext[Any, Any]

#: Where the MCP endpoint is served.
MCP_PATH = "/mcp"
#: The 415 of a POST whose body is not declared JSON.
UNSUPPORTED_BODY = "The body of an MCP request is a JSON-RPC message: send it as application/json."
#: Created assistants a page of `tools/list` lists (the first page has the built-in ones too).
TOOLS_PAGE = 100
#: An assistant id that is its own tool name (see the module docstring).
PLAIN_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
#: Characters of the digest that ends any other id's tool name.
DIGEST_CHARS = 12

# --- the run engine: every call this module makes to it --------------------------


def builtin_assistants(engine: Engine) -> list[Assistant]:
    """Return the built-in assistants the service serves, by id."""
    return engine.assistants.builtins()


async def created_assistants(
    engine: Engine, owner: str, offset: int
) -> tuple[list[Assistant], bool]:
    """Return a page of the assistants `owner` created, oldest first, and whether more follow."""
    return await engine.assistants.created(owner, limit=TOOLS_PAGE, offset=offset)


async def resolve_assistant(engine: Engine, owner: str, assistant_id: str) -> Assistant:
    """Return a built-in assistant or one `owner` created.

    Raises:
        NotFound: Neither.
    """
    return await engine.assistants.resolve(owner, assistant_id)


def run_spec(owner: str, assistant: Assistant, graph_input: dict[str, Any]) -> RunSpec:
    """Return the engine's run request of a tool call: the assistant on a new thread."""
    return RunSpec(
        assistant_id=assistant.assistant_id,
        owner=owner,
        input=graph_input,
        stream_mode=("custom",),
    )


async def start_run(
    engine: Engine, owner: str, assistant: Assistant, graph_input: dict[str, Any]
) -> RunRecord:
    """Record a run of `assistant` on a new thread of `owner` and start it.

    Raises:
        RunsError: The engine refused the run (e.g. the database takes no writes).
    """
    run, _ = await engine.runs.create(run_spec(owner, assistant, graph_input))
    return run


async def pipeline_events(
    engine: Engine, run: RunRecord, heartbeat: float
) -> AsyncIterator[dict[str, Any]]:
    """Yield the pipeline events (`custom` frames' data) of a run until it ends.

    Follows the run as a stream response does (`engine.follow_frames`: its log, then
    its live frames); a run that stops before its end ends the events.
    """
    followed = follow_frames(engine.runs, run.run_id, run.thread_id, idle=heartbeat)
    async with contextlib.aclosing(followed):
        async for item in followed:
            if isinstance(item, Stopped):
                return
            if isinstance(item, Frame) and item.mode == "custom":
                yield json.loads(item.data)


async def run_result(engine: Engine, run: RunRecord) -> tuple[RunRecord, dict[str, Any]]:
    """Wait for a run to end; return its record and what `/wait` answers for it."""
    ended = await engine.runs.wait(run.run_id) or run
    return ended, await engine.runs.result(ended)


def cancel_run(engine: Engine, run: RunRecord) -> None:
    """Cancel a run if it is still executing."""
    engine.runs.cancel_soon(run.run_id)


# --- tools ------------------------------------------------------------------------


def tool_name(assistant_id: str) -> str:
    """Return the name of the tool that runs an assistant (see the module docstring)."""
    if PLAIN_NAME.match(assistant_id):
        return assistant_id
    digest = hashlib.sha256(assistant_id.encode()).digest()
    suffix = base64.b32encode(digest).decode().lower()[:DIGEST_CHARS]
    readable = re.sub(r"[^A-Za-z0-9-]", "-", assistant_id)[: 64 - 1 - DIGEST_CHARS]
    return f"{readable}_{suffix}"


async def find_tool(engine: Engine, owner: str, name: str) -> Assistant | None:
    """Return the assistant the tool `name` runs for `owner`, or None.

    A plain name is the assistant's id (and so is any name without `_`: an id given
    as is); a name with a digest is looked for among the built-in assistants and the
    owner's created ones.
    """
    if "_" not in name:
        try:
            return await resolve_assistant(engine, owner, name)
        except NotFound:
            return None
    for builtin in builtin_assistants(engine):
        if tool_name(builtin.assistant_id) == name:
            return builtin
    offset, more = 0, True
    while more:
        page, more = await created_assistants(engine, owner, offset)
        for created in page:
            if tool_name(created.assistant_id) == name:
                return created
        offset += TOOLS_PAGE
    return None


def tool_of(assistant: Assistant) -> types.Tool:
    """Return the MCP tool that runs `assistant`."""
    return types.Tool(
        name=tool_name(assistant.assistant_id),
        title=assistant_name(assistant),
        description=(
            f"{assistant_description(assistant)} Runs the assistant to its end and answers "
            "the post (title, body, #tags, image links). The planner never asks a clarifying "
            "question here (auto_confirm): it goes on with its defaults."
        ),
        input_schema=input_schema(assistant),
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False
        ),
    )


def input_schema(assistant: Assistant) -> dict[str, Any]:
    """Return the JSON schema of the assistant's `input` (an object)."""
    if assistant.spec.input_model is not None:
        return assistant.spec.input_model.model_json_schema()
    try:
        schema = dict(assistant.graph.get_input_jsonschema())
    except Exception:  # a state LangGraph cannot describe: any object
        return {"type": "object"}
    return {**schema, "type": "object"}


def tool_input(assistant: Assistant, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Return the run input of a call's arguments; the engine checks it as HTTP `input`.

    `auto_confirm` is set wherever the input model has it (see the module docstring).
    """
    graph_input = dict(arguments)
    model = assistant.spec.input_model
    if model is not None and "auto_confirm" in model.model_fields:
        graph_input["auto_confirm"] = True
    return graph_input


def as_arguments(exc: InvalidFields) -> list[dict[str, Any]]:
    """Return the engine's field errors of a run's `input` as errors of the call's arguments."""
    return [
        {**error, "loc": ("arguments", *error["loc"][1:])}
        if error["loc"][:1] == ("input",)
        else error
        for error in exc.errors
    ]


def progress_label(event: Mapping[str, Any]) -> str | None:
    """Return what a progress notification says for a pipeline event (None: no step)."""
    if event.get("type") == "stage.started":
        return str(event.get("stage") or "") or None
    if event.get("type") == "supervisor.route":
        return str(event.get("next_agent") or "") or None
    return None


def error_result(message: str) -> types.CallToolResult:
    """Return a tool error: the call was understood and failed (the model may retry)."""
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def post_result(
    run: RunRecord,
    values: Mapping[str, Any],
    base_url: str,
    links: AssetLinks | None = None,
) -> types.CallToolResult:
    """Return the answer of a call from what the run left (see the module docstring)."""
    if "__error__" in values:
        error = values["__error__"] or {}
        return error_result(f"The run failed: {error.get('message') or error.get('error')}")
    if values.get("__interrupt__"):
        return error_result(
            "The run stopped at a question it cannot ask inside a tool call; answer it on "
            f"thread {run.thread_id} over the HTTP API (status {run.status})."
        )
    result = values.get("result") or {}
    post = result.get("post") or {}
    outcome = result.get("outcome") or run.status
    message = str(result.get("message") or "")
    if not (post.get("title") or post.get("blocks")):
        return error_result(f"The run ended without a post (outcome {outcome}). {message}".strip())
    images = [
        {**image, "url": image_link(str(image.get("url") or ""), base_url, links)}
        for image in result.get("images") or []
    ]
    text = post_markdown(post)
    if images:
        text += "\n" + "\n".join(f"![{image.get('alt') or ''}]({image['url']})" for image in images)
    if outcome != "completed":
        text += f"\n\n({outcome}: {message})"
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={
            "thread_id": run.thread_id,
            "run_id": run.run_id,
            "outcome": outcome,
            "message": message,
            "post": post,
            "images": images,
        },
    )


def http_request(ctx: Context) -> Request:
    """Return the HTTP request a handler answers (only HTTP serves this server)."""
    request = ctx.request
    if not isinstance(request, Request):
        raise MCPError(types.INVALID_REQUEST, "MCP requests are served over HTTP only.")
    return request


def page_offset(cursor: str | None) -> int:
    """Return the offset among the caller's created assistants a `tools/list` cursor names."""
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 9:
        raise MCPError(types.INVALID_PARAMS, f"Invalid cursor {cursor[:40]!r}: pass a nextCursor")
    return int(cursor)


def caller(request: Request) -> str:
    """Return the caller's owner id, which `AuthMiddleware` put in the request's scope."""
    owner = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
    if owner is None:  # an app without AuthMiddleware: refuse rather than guess
        raise MCPError(types.INVALID_REQUEST, "A valid API key is required.")
    return str(owner)


def write_refusal(request: Request) -> str | None:
    """Return why the caller may not start a run (a read-only key), or None."""
    found = request.scope.get("state", {}).get(CALLER_STATE_KEY)
    return refusal(found, Access.WRITE) if isinstance(found, Caller) else None


def mcp_server(app: FastAPI) -> Server[Any]:
    """Build the MCP server whose tools run the assistants of `app`'s engine.

    A call that fails unexpectedly is a tool error naming only the exception's type
    (the SDK would send the exception's text); the server log has the rest. The
    handlers reach the engine and the settings through `app.deps`, with the call's
    HTTP request.
    """

    async def list_tools(
        ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        request = http_request(ctx)
        engine = get_engine(request)
        owner = caller(request)
        cursor = params.cursor if params is not None else None
        offset = page_offset(cursor)
        builtins = builtin_assistants(engine) if cursor is None else []
        created, more = await created_assistants(engine, owner, offset)
        return types.ListToolsResult(
            tools=[tool_of(a) for a in [*builtins, *created]],
            next_cursor=str(offset + TOOLS_PAGE) if more else None,
        )

    async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            return await run_tool(ctx, params)
        except MCPError:
            raise
        except Exception as exc:
            log.exception("the MCP call of tool %r failed", params.name)
            return error_result(
                f"The call failed with {type(exc).__name__}; the server log has the details."
            )

    async def run_tool(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
        request = http_request(ctx)
        engine = get_engine(request)
        owner = caller(request)
        # A built-in assistant, or one the caller created (a brand preset).
        assistant = await find_tool(engine, owner, params.name)
        if assistant is None:
            known = ", ".join(tool_name(a.assistant_id) for a in builtin_assistants(engine))
            raise MCPError(
                types.INVALID_PARAMS,
                f"Unknown tool {params.name!r}; tools: {known}, and the assistants you created "
                "(tools/list)",
            )
        graph_input = tool_input(assistant, params.arguments or {})
        refused = write_refusal(request)  # a tool call starts a run: a write
        if refused is not None:
            return error_result(refused)
        try:
            run = await start_run(engine, owner, assistant, graph_input)
        except InvalidFields as exc:
            return error_result(validation_message(as_arguments(exc)))
        except RunsError as exc:
            return error_result(exc.message)
        finished = False
        try:
            step = 0
            heartbeat = get_settings(request).sse_heartbeat_interval
            async for event in pipeline_events(engine, run, heartbeat):
                label = progress_label(event)
                if label is not None:
                    step += 1
                    await ctx.session.report_progress(step, None, label)
            ended, values = await run_result(engine, run)
            finished = True
        finally:
            if not finished:  # the call was cancelled (or failed): so is its run
                cancel_run(engine, run)
        return post_result(ended, values, str(request.base_url), get_asset_links(request))

    return Server(
        "atelier",
        version=app.version,
        title="Atelier",
        description="Multi-agent content studio: every assistant is a tool.",
        instructions="Each tool runs one Atelier assistant to its end and answers the post.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


class JsonBodiesOnly:
    """Answer 415 in the service's error shape to a body not declared JSON; pass the rest on.

    The SDK answers such a POST a bare 400 without a body; every other answer of
    `/mcp` is JSON (a JSON-RPC error) or its event stream.
    """

    def __init__(self, app: ASGIApp) -> None:
        """Guard `app`."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the Content-Type of an HTTP request, then pass it on or answer 415."""
        content_type = Headers(scope=scope).get("content-type", "")
        if scope["type"] == "http" and not content_type.lower().startswith("application/json"):
            await error_response(415, UNSUPPORTED_BODY)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def mcp_router(app: FastAPI, settings: Settings) -> APIRouter:
    """Return the router serving `/mcp` for `app`, its lifespan running the session manager.

    Include it once per app (`create_app`): the session manager runs once.
    """
    sessions = StreamableHTTPSessionManager(
        mcp_server(app),
        stateless=True,
        max_request_body_size=settings.max_body_bytes,
    )
    # The transport logs the end of every stateless POST as "Terminating session: None"
    # at INFO: one misleading line per call in the service's log.
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)
    endpoint = McpOriginGuard(
        JsonBodiesOnly(StreamableHTTPASGIApp(sessions)),
        allowed_origins=settings.cors_origins,
        check_host=auth_mode(settings) == "open",
        allowed_hosts=settings.mcp_allowed_hosts,
    )
    router = APIRouter(lifespan=lambda _app: sessions.run())
    router.add_route(
        MCP_PATH,
        endpoint,  # type: ignore[arg-type]  # ASGI
        methods=["POST"],
        include_in_schema=False,
    )
    return router
