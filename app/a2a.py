"""A2A (Agent2Agent): other agents delegate to an assistant at `/a2a/{assistant_id}`.

Built on the `a2a-sdk` package: its JSON-RPC dispatcher parses and answers the
protocol (A2A 1.0 `SendMessage`…, and the 0.3 names `message/send`,
`message/stream`, `tasks/get`, `tasks/cancel`, `tasks/resubscribe` on the same URL,
through the SDK's compatibility adapter), its types describe tasks, and
`AtelierRequestHandler` (the SDK's `RequestHandler`) answers each method from the
run engine. There is no SDK task store: every answer is read from the thread and
run records, so any API replica answers for a task another one started.

    GET  /a2a/{assistant_id}/.well-known/agent-card.json   the agent card (public)
    POST /a2a/{assistant_id}                                JSON-RPC 2.0 (JSON or SSE)

The mapping:

* **A task is a thread and its run.** The task id is the thread id. The context id
  is the client's `contextId` when its first message carries one, else the thread
  id; it is kept in the run's metadata (`a2a_context_id`).
* **A message starts a run**: its text parts, joined, become the run's `request`.
* **The planner's question is `input-required`**: when the request is too vague the
  task waits with the question as its status message (text, and the interrupt's
  value as a data part). The next message on the task (`taskId`) answers it: its
  text resumes the run (`command.resume`; "defaults" goes on with defaults, any
  other text adds details). A message naming a task in any other state is refused:
  a finished task takes no more input, and a new request is a new task (it may carry
  the same `contextId`).
* **Progress**: the run's `custom` frames (stages, attempts, images) become
  `working` status updates with a short text in `message/stream`.
* **The post is the artifact**: a `text/markdown` part (title, body, `#tags`, and
  the images as absolute links to `/assets/{id}`, signed when API keys are
  on so they load without one: `providers.asset_links`) and a data part with the run's
  `result` payload. A run that ends without a post ends `failed`, with the
  reason as the status message; a cancelled one `canceled`.
* `tasks/cancel` cancels the thread's active run; `tasks/get` reads the thread's
  latest run. A stream that disconnects leaves the run going (read it later with
  `tasks/get` or `tasks/resubscribe`).
* **Ownership**: a task belongs to the API key that created it (the thread's
  owner); another key gets "task not found".
* **Created assistants** (brand presets, `POST /assistants`) are served at
  `/a2a/{their id}` to the key that created them, like any run of theirs (another
  key: 404). Their card is not public: agent cards are read without a key, and a
  preset, its name, brand and voice are its owner's alone. It is the authenticated
  extended card instead (`GetExtendedAgentCard`, A2A 0.3's
  `agent/getAuthenticatedExtendedCard`, on the JSON-RPC URL, behind the API key):
  a client that knows the URL starts from the SDK's `minimal_agent_card(url,
  ["JSONRPC"])` and asks for it. The extended card of a built-in assistant is its
  public card, which therefore does not announce one (`extendedAgentCard` false).

The engine calls sit in the few functions right below (`run_spec` builds the
engine's run request), so a change of the run engine's door is made here in one place.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_0_3, TransportProtocol
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value
from starlette.requests import Request as StarletteRequest

from agentkit.chat import image_link
from app.access import PUBLIC, READ, Access, refusal
from app.deps import (
    AssetLinksDep,
    AssistantsDep,
    CallerDep,
    RunsDep,
    SettingsDep,
    ThreadsDep,
)
from app.described import assistant_description, assistant_name
from app.routes.exports import post_markdown
from engine import (
    Assistant,
    Conflict,
    Frame,
    Invalid,
    NotFound,
    RunRecord,
    RunsError,
    RunSpec,
    RunsService,
    Stopped,
    ThreadsService,
    follow_frames,
    loads,
)
from providers.asset_links import AssetLinks

#: Where the JSON-RPC endpoint and the agent card are served.
RPC_PATH = "/a2a/{assistant_id}"
CARD_PATH = RPC_PATH + AGENT_CARD_WELL_KNOWN_PATH
#: Seconds a task's stream waits for a frame before it checks that its run is still going.
FRAME_WAIT = 15.0
#: Run metadata key holding the task's context id.
CONTEXT_KEY = "a2a_context_id"
#: The longest `contextId` a client may give a new task (it is stored with the run).
MAX_CONTEXT_ID = 256
#: The runs of a task its history tells (a request, then each answer to a question).
MAX_RUNS = 20
#: How to answer the planner's question, after the question itself.
ANSWER_HINT = 'Reply with the missing details, or "defaults" to go on with sensible defaults.'

# --------------------------------------------------------------------------- engine calls


def run_spec(
    owner: str,
    assistant: Assistant,
    context_id: str,
    *,
    graph_input: dict[str, Any] | None = None,
    resume_on: tuple[str, str] | None = None,
) -> RunSpec:
    """Return the engine's run request of a message: a new task, or an answer to one.

    Args:
        owner: The caller's owner id.
        assistant: What to run.
        context_id: The task's context id (kept in the run's metadata).
        graph_input: The input of a run on a new thread.
        resume_on: (thread id, answer): resume the thread's pending interrupt instead.
    """
    thread_id, answer = resume_on if resume_on else (None, None)
    return RunSpec(
        assistant_id=assistant.assistant_id,
        owner=owner,
        thread_id=thread_id,
        input=graph_input,
        command={"resume": answer} if resume_on else None,
        stream_mode=("custom",),
        stream_subgraphs=True,  # the team's events come from the executor subgraph
        stream_resumable=True,
        metadata={CONTEXT_KEY: context_id} if context_id else {},
    )


async def start_run(runs: RunsService, spec: RunSpec) -> RunRecord:
    """Record and start a run; return it.

    Raises:
        RunsError: The engine refused it (nothing to resume, an invalid answer, an
            unavailable database, shutting down).
    """
    run, _ = await runs.create(spec)
    return run


async def task_runs(call: Call, thread_id: str) -> list[RunRecord]:
    """Return the runs of the caller's thread served by the call's assistant, oldest first."""
    try:
        thread = await call.threads.get(call.owner, thread_id)
    except NotFound:
        return []
    if thread.metadata.get("assistant_id") != call.assistant.assistant_id:
        return []
    return list(reversed(await call.runs.for_thread(call.owner, thread_id, limit=MAX_RUNS)))


async def run_frames(runs: RunsService, run: RunRecord) -> AsyncIterator[Frame]:
    """Yield a run's frames from the first until its `end` frame (`engine.follow_frames`).

    A run that stops without `end` (it stalled: its storage failed and it waits for
    recovery) ends the iteration too; the task's state is then read again.
    """
    followed = follow_frames(runs, run.run_id, run.thread_id, idle=FRAME_WAIT)
    async with contextlib.aclosing(followed):
        async for item in followed:
            if isinstance(item, Stopped):
                return
            if isinstance(item, Frame):
                yield item
                if item.event == "end":
                    return


async def run_outcome(
    runs: RunsService, owner: str, thread_id: str, run_id: str
) -> tuple[RunRecord, dict[str, Any]] | None:
    """Return a run's record and what it left (the thread's values), or None when gone."""
    try:
        run = await runs.get(owner, thread_id, run_id)
    except NotFound:
        return None
    return run, await runs.result(run)


async def cancel_run(runs: RunsService, run: RunRecord) -> RunRecord:
    """Cancel an active run (its checkpoints kept) and wait for it to stop; return it.

    Raises:
        Conflict: The run is no longer active.
    """
    return await runs.cancel(run, "interrupt", wait=True)


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Call:
    """What one A2A request is about: the engine's services, the caller, the assistant, …"""

    runs: RunsService
    threads: ThreadsService
    owner: str
    assistant: Assistant
    base_url: str  # e.g. http://127.0.0.1:8000, for absolute links to assets
    links: AssetLinks | None = None  # signs those links when API keys are on
    version: str = ""  # the service's version, which its cards state
    keyed: bool = False  # API keys are on: the card says how to present one
    #: Why the caller may not start or cancel a task (a read-only key), or None.
    write_refusal: str | None = None


def _call(context: ServerCallContext) -> Call:
    call = context.state.get("atelier")
    assert isinstance(call, Call), "the A2A route puts its Call in the context"
    return call


def _writing(context: ServerCallContext) -> Call:
    """Return the call of a method that starts or cancels a run; refuse a read-only key."""
    call = _call(context)
    if call.write_refusal is not None:
        raise InvalidRequestError(message=call.write_refusal)
    return call


def _agent_message(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


def _context_id(run: RunRecord) -> str:
    return str(run.metadata.get(CONTEXT_KEY) or run.thread_id)


def request_text(message: Message) -> str:
    """Return the request a message carries: its text parts, joined by blank lines."""
    texts = [part.text.strip() for part in message.parts if part.HasField("text")]
    return "\n\n".join(text for text in texts if text)


def post_artifact(
    result: Mapping[str, Any], base_url: str, links: AssetLinks | None = None
) -> Artifact | None:
    """Return the finished post as an artifact, or None when the result has no post.

    One `text/markdown` part (the post as Markdown, then its images as absolute
    links, signed with `links` so they load without a key) and one data part with
    the whole `result` payload.
    """
    post = result.get("post") or {}
    if not (post.get("title") or post.get("blocks")):
        return None
    lines = [post_markdown(post)]
    for image in result.get("images") or []:
        asset_id = str(image.get("asset_id") or "")
        if asset_id:
            url = image_link(f"/assets/{asset_id}", base_url, links)
            lines.append(f"![{image.get('alt') or ''}]({url})\n")
    return Artifact(
        artifact_id="post",
        name=str(post.get("title") or "post"),
        description="The finished post: Markdown, and the run's result payload.",
        parts=[
            Part(text="\n".join(lines), media_type="text/markdown"),
            Part(data=ParseDict(dict(result), Value()), media_type="application/json"),
        ],
    )


def task_state(run: RunRecord, values: Mapping[str, Any]) -> tuple[TaskState, str]:
    """Return the A2A state of a task whose latest run is `run`, and what to tell the client."""
    result = values.get("result") or {}
    message = str(result.get("message") or "")
    if run.status == "pending":
        return TaskState.TASK_STATE_SUBMITTED, "queued"
    if run.status == "running":
        return TaskState.TASK_STATE_WORKING, "working"
    if run.status == "interrupted" and run.cancel_reason is not None:
        return TaskState.TASK_STATE_CANCELED, "the run was cancelled"
    if run.status in ("error", "timeout"):
        error = values.get("__error__") or run.error or {}
        return TaskState.TASK_STATE_FAILED, str(error.get("message") or f"the run {run.status}")
    if values.get("__interrupt__"):
        question = _question(values["__interrupt__"])
        return TaskState.TASK_STATE_INPUT_REQUIRED, f"{question}\n\n{ANSWER_HINT}"
    post = result.get("post") or {}
    if post.get("title") or post.get("blocks"):
        return TaskState.TASK_STATE_COMPLETED, message or "the post is ready"
    return TaskState.TASK_STATE_FAILED, message or "the run ended without a post"


def _question(interrupts: list[Any]) -> str:
    """Return the text of the first pending question (the planner's `question`)."""
    value = interrupts[0].get("value") if isinstance(interrupts[0], Mapping) else None
    if isinstance(value, Mapping) and value.get("question"):
        return str(value["question"])
    return "The run is waiting for your answer."


def _said(run: RunRecord) -> str:
    """Return what the client said to start a run: its request, or its answer."""
    graph_input = run.options.input
    request = graph_input.get("request") if isinstance(graph_input, dict) else None
    if request:
        return str(request)
    answer = (run.options.command or {}).get("resume")
    return answer if isinstance(answer, str) else ""


def build_task(
    call: Call, run: RunRecord, values: Mapping[str, Any], earlier: list[RunRecord] | None = None
) -> Task:
    """Return the task whose latest run is `run`, with its artifact once it has a post.

    Its history is what the client said to start each run (`earlier` runs first).
    """
    state, why = task_state(run, values)
    context_id = _context_id(run)
    status = TaskStatus(state=state, message=_agent_message(why, run.thread_id, context_id))
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        interrupt = values["__interrupt__"][0]
        status.message.parts.append(Part(data=ParseDict(dict(interrupt), Value())))
    task = Task(id=run.thread_id, context_id=context_id, status=status)
    for said in [*(earlier or []), run]:
        text = _said(said)
        if text:
            task.history.append(
                Message(
                    message_id=f"{said.run_id}-user",
                    role=Role.ROLE_USER,
                    parts=[Part(text=text)],
                    task_id=run.thread_id,
                    context_id=context_id,
                )
            )
    if state == TaskState.TASK_STATE_COMPLETED:
        artifact = post_artifact(values.get("result") or {}, call.base_url, call.links)
        if artifact is not None:
            task.artifacts.append(artifact)
    return task


def progress_text(event: Mapping[str, Any]) -> str | None:
    """Return a short line for a pipeline event worth a status update, else None."""
    kind = event.get("type")
    if kind == "stage.started":
        return f"{event.get('stage')} started"
    if kind == "attempt.started":
        return f"attempt {event.get('attempt')} of {event.get('max_attempts')} started"
    if kind == "attempt.completed":
        return f"attempt {event.get('attempt')}: {event.get('verdict')}"
    if kind == "supervisor.route":
        return f"supervisor: {event.get('next_agent')} next"
    if kind == "asset.created":
        return "an image is ready"
    return None


def _state_name(state: TaskState) -> str:
    """Return a state as A2A 0.3 spells it (TASK_STATE_INPUT_REQUIRED → input-required)."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _engine_error(exc: RunsError) -> Exception:
    """Return the A2A error for an engine refusal (its message is safe to show)."""
    if isinstance(exc, NotFound):
        return TaskNotFoundError(message=str(exc))
    if isinstance(exc, Invalid | Conflict):
        return InvalidParamsError(message=str(exc))
    return InternalError(message=str(exc))


class AtelierRequestHandler(RequestHandler):
    """Answer A2A requests from the run engine (see the module docstring)."""

    async def _start(self, params: SendMessageRequest, call: Call) -> RunRecord:
        message = params.message
        text = request_text(message)
        if not text:
            raise InvalidParamsError(message="the message has no text part")
        if len(message.context_id) > MAX_CONTEXT_ID:
            raise InvalidParamsError(
                message=f"contextId is longer than {MAX_CONTEXT_ID} characters"
            )
        try:
            if message.task_id:
                return await self._answer(call, message.task_id, text)
            spec = run_spec(
                call.owner,
                call.assistant,
                message.context_id,
                graph_input={"request": text},  # checked by the engine's preparation
            )
            return await start_run(call.runs, spec)
        except RunsError as exc:
            raise _engine_error(exc) from None

    async def _answer(self, call: Call, task_id: str, text: str) -> RunRecord:
        """Resume a task waiting at the planner's question with the client's answer."""
        run = await self._latest(call, task_id)
        state, _ = task_state(run, await call.runs.result(run))
        if state != TaskState.TASK_STATE_INPUT_REQUIRED:
            raise InvalidParamsError(
                message=f"task {task_id!r} is {_state_name(state)}: only a task waiting for "
                "input takes another message; send a new message without taskId"
            )
        spec = run_spec(call.owner, call.assistant, _context_id(run), resume_on=(task_id, text))
        return await start_run(call.runs, spec)

    async def _latest(self, call: Call, task_id: str) -> RunRecord:
        """Return the latest run of the caller's task, or raise TaskNotFoundError."""
        runs = await task_runs(call, task_id)
        if not runs:
            raise TaskNotFoundError()
        return runs[-1]

    async def _task(self, call: Call, run: RunRecord) -> Task:
        """Return the task whose latest run is `run`, read from the run store."""
        found = await run_outcome(call.runs, call.owner, run.thread_id, run.run_id)
        if found is None:
            raise TaskNotFoundError()
        runs = await task_runs(call, run.thread_id)
        earlier = [r for r in runs if r.run_id != run.run_id]
        return build_task(call, *found, earlier)

    async def _follow(self, call: Call, run: RunRecord) -> AsyncGenerator[Event]:
        """Yield the task, its progress, then its artifact and final status."""
        context_id = _context_id(run)
        yield build_task(call, run, {})
        async for frame in run_frames(call.runs, run):
            if frame.mode != "custom":
                continue
            text = progress_text(loads(frame.data))
            if text:
                yield TaskStatusUpdateEvent(
                    task_id=run.thread_id,
                    context_id=context_id,
                    status=TaskStatus(
                        state=TaskState.TASK_STATE_WORKING,
                        message=_agent_message(text, run.thread_id, context_id),
                    ),
                )
        task = await self._task(call, run)
        for artifact in task.artifacts:
            yield TaskArtifactUpdateEvent(
                task_id=task.id, context_id=context_id, artifact=artifact, last_chunk=True
            )
        yield TaskStatusUpdateEvent(task_id=task.id, context_id=context_id, status=task.status)

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Start a run and answer its task once it ended (at once with `returnImmediately`)."""
        call = _writing(context)
        run = await self._start(params, call)
        if params.configuration.return_immediately:
            return build_task(call, run, {})
        async for _frame in run_frames(call.runs, run):
            pass
        return await self._task(call, run)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """Start a run and stream its task's progress until it ends."""
        call = _writing(context)
        run = await self._start(params, call)
        async for event in self._follow(call, run):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """Answer the task from its thread's latest run."""
        call = _call(context)
        return await self._task(call, await self._latest(call, params.id))

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """Cancel the task's run and answer the task, now `canceled`."""
        call = _writing(context)
        run = await self._latest(call, params.id)
        try:
            run = await cancel_run(call.runs, run)
        except Conflict:
            state, _ = task_state(run, await call.runs.result(run))
            raise TaskNotCancelableError(
                message=f"task {params.id!r} is not working ({_state_name(state)})"
            ) from None
        return await self._task(call, run)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """Stream a task's progress again, from its run's first frame until it ends."""
        call = _call(context)
        run = await self._latest(call, params.id)
        async for event in self._follow(call, run):
            yield event

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """Refuse: tasks are listed as threads (`POST /threads/search`)."""
        raise UnsupportedOperationError()

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Refuse: push notifications are not offered (follow with message/stream)."""
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Refuse: push notifications are not offered."""
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """Refuse: push notifications are not offered."""
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        """Refuse: push notifications are not offered."""
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        """Answer the card of the assistant at this URL, for its caller (see the module docstring).

        The only card of an assistant the caller created; a built-in one's public card.
        """
        call = _call(context)
        return agent_card(call.assistant, call.base_url, call.version, keyed=call.keyed)


# --------------------------------------------------------------------------- the card


def agent_card(assistant: Assistant, base_url: str, version: str, *, keyed: bool) -> AgentCard:
    """Return an assistant's agent card: what it does, where to call it, how to authenticate.

    A created assistant's card is an extended card (`extendedAgentCard`: asking again
    with the key answers it); a built-in one's is public and whole.
    """
    url = base_url + RPC_PATH.format(assistant_id=assistant.assistant_id)
    name, description = assistant_name(assistant), assistant_description(assistant)
    examples: list[str] = []
    if (
        assistant.spec.input_model is not None
        and "request" in assistant.spec.input_model.model_fields
    ):
        examples = [
            str(e) for e in assistant.spec.input_model.model_fields["request"].examples or []
        ]
    card = AgentCard(
        name=name,
        description=description,
        version=version,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=v)
            for v in ("1.0", PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=not assistant.builtin
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/markdown", "application/json"],
        skills=[
            AgentSkill(
                id=assistant.assistant_id,
                name=name,
                description=description,
                tags=["content", "writing", assistant.graph_id],
                examples=examples,
            )
        ],
    )
    if keyed:
        card.security_schemes["apiKey"].CopyFrom(
            SecurityScheme(
                api_key_security_scheme=APIKeySecurityScheme(
                    name="X-Api-Key", location="header", description="An AUTH_API_KEYS key."
                )
            )
        )
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="An AUTH_API_KEYS key as a bearer token."
                )
            )
        )
        for scheme in ("apiKey", "bearer"):  # either one
            card.security_requirements.append(SecurityRequirement(schemes={scheme: StringList()}))
    return card


# --------------------------------------------------------------------------- routes


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with this request's `Call` under `state["atelier"]`."""

    def build(self, request: StarletteRequest) -> ServerCallContext:
        context = super().build(request)
        context.state["atelier"] = request.state.a2a_call
        return context


_dispatcher = JsonRpcDispatcher(
    AtelierRequestHandler(), context_builder=_ContextBuilder(), enable_v0_3_compat=True
)

router = APIRouter(tags=["a2a"])

AssistantId = Annotated[str, Path(min_length=1, max_length=128, description="Assistant id.")]

_JSON_RPC_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["jsonrpc", "method"],
                "properties": {
                    "jsonrpc": {"type": "string", "enum": ["2.0"]},
                    "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    "method": {
                        "type": "string",
                        "description": "message/send, message/stream, tasks/get, tasks/cancel, "
                        "tasks/resubscribe (A2A 0.3), or SendMessage, SendStreamingMessage, "
                        "GetTask, CancelTask, SubscribeToTask (A2A 1.0, with the header "
                        "`A2A-Version: 1.0`).",
                        "examples": ["message/send"],
                    },
                    "params": {"type": "object", "description": "The method's parameters."},
                },
            },
            "example": {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {
                    "message": {
                        "kind": "message",
                        "messageId": "9b1d0c1e-4f39-4d1c-9a57-2d1f0f4c1a77",
                        "role": "user",
                        "parts": [
                            {"kind": "text", "text": "写一篇小红书笔记：平价护肤，学生党友好"}
                        ],
                    }
                },
            },
        }
    },
}


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


@router.get(
    CARD_PATH,
    summary="An assistant's A2A agent card",
    responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}},
    dependencies=[PUBLIC],
)
async def get_agent_card(
    assistant_id: AssistantId, request: Request, assistants: AssistantsDep, settings: SettingsDep
) -> Response:
    """Describe the assistant to A2A clients: skills, JSON-RPC URL, streaming, auth.

    Public, like any A2A agent card: it is how a client learns where to call and
    which key to present; it names nothing a caller owns.
    """
    assistant = assistants.builtin(assistant_id)
    card = agent_card(
        assistant,
        _base_url(request),
        request.app.version,
        keyed=bool(settings.auth_api_keys),
    )
    return JSONResponse(agent_card_to_dict(card))


@router.post(
    RPC_PATH,
    summary="Delegate to an assistant over A2A (JSON-RPC 2.0)",
    openapi_extra={"requestBody": _JSON_RPC_BODY},
    responses={
        200: {
            "description": "A JSON-RPC response (errors too are 200, with `error`), or for "
            "message/stream and tasks/resubscribe a Server-Sent Events stream of JSON-RPC "
            "responses: the task, `working` status updates, the post's artifact, the final status.",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        }
    },
    dependencies=[READ],
)
async def a2a_rpc(
    assistant_id: AssistantId,
    request: Request,
    runs: RunsDep,
    threads: ThreadsDep,
    assistants: AssistantsDep,
    settings: SettingsDep,
    links: AssetLinksDep,
    caller: CallerDep,
) -> Response:
    """Answer one A2A JSON-RPC request (see the module docstring for the mapping).

    The assistant may be one the caller created (a brand preset); its card is the
    extended card this endpoint answers (`GetExtendedAgentCard`), never a public one.
    """
    owner = caller.owner
    assistant = await assistants.resolve(owner, assistant_id)
    request.state.a2a_call = Call(
        runs,
        threads,
        owner,
        assistant,
        _base_url(request),
        links,
        version=request.app.version,
        keyed=bool(settings.auth_api_keys),
        write_refusal=refusal(caller, Access.WRITE),
    )
    return await _dispatcher.handle_requests(request)


__all__ = ["AtelierRequestHandler", "agent_card", "router"]
