"""Run preparation: everything decided before a run is recorded.

`RunPreparer.prepare` checks a run request against its assistant, the caller and
the thread, and says what to record. First what the assistant's graph and contract
allow, before anything is read (`check_request`): the input (the assistant's input
model), the nodes and state keys a `command` names, the nodes to interrupt at, and
which options need or exclude a thread. Then: an `Idempotency-Key` repeat answers
the run it created; a thread the caller does not own is created
(`if_not_exists=create`) or refused; a busy thread is handled by the multitask
strategy (`reject` refuses, `interrupt` and `rollback` cancel its runs first,
`enqueue` queues after them); a `command` (resume, update), a start checkpoint and
a run without input are checked against the graph's state; a `webhook` URL against
the deployment's rules (`engine.webhooks.check_webhook`). Nothing is written
here, so a refused request leaves no thread or run behind; `RunManager.create`
records and starts what it returns.

Chat clients (Agent Chat UI, `useStream`) are met here too: a chat message
(`input.messages`, for an assistant with `chat_text`) on a thread waiting at an
interrupt answers it — the run becomes `command.resume` with the message's text,
the message added to the conversation; `command.goto: "__end__"` answers a
pending interrupt with a HITL `reject`; a thread gets a `title` (its first
request) and its assistant in its metadata; and the run's config carries the
server's base URL (`configurable.base_url`), which a graph links images with.

A run of an assistant a client created (`engine.assistants.AssistantRecord`, its
latest version, resolved by the run manager) runs the graph of its `graph_id`,
recorded in the run's kwargs (`RunRecord.graph_id`). The assistant's `config` is
under the run's (the run's keys win, `configurable` key by key). An `atelier`
assistant's context is a brand preset (`agentkit.brand`): checked again, it becomes the
input's `brand`, the fields of a `brand` the input sends itself winning; the graph
fills the input's unset fields from it when the run starts (`agentkit.brand.brand_fill`),
so the run's own input overrides the preset field by field. The preset is also the
`context` the Platform's clients read back; the graph's runtime context stays the
server's (its services), so no client value reaches a model endpoint or key.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Interrupt
from pydantic import TypeAdapter, ValidationError

from agentkit.brand import BrandPreset, preset_of, preset_with
from engine.assistants import Assistant
from engine.errors import Conflict, Invalid, InvalidFields, NotFound
from engine.execution import graph_config
from engine.protocols import RunExecutor, RunStorage
from engine.records import IfNotExists, MultitaskStrategy, RunRecord, ThreadRecord, now
from engine.serde import dumps
from engine.tracing import RunTracing
from engine.webhooks import WebhookConfig, check_webhook

_INTERRUPT_ID = re.compile(r"^[0-9a-f]{32}$")


def check_context(
    context_type: Any, context: dict[str, Any], config: dict[str, Any]
) -> dict[str, Any]:
    """Check an assistant's context against its graph's context type; return it validated.

    For a brand preset (`agentkit.brand.BrandPreset`), the preset fields of
    `config.configurable` are checked too (`agentkit.brand.preset_of`).

    Raises:
        InvalidFields: Each fault, at `context.<field>` (or `config.configurable.<field>`).
    """
    adapter: TypeAdapter[Any] = TypeAdapter(context_type)
    errors: list[dict[str, Any]] = []
    try:
        checked = adapter.validate_python(context)
    except ValidationError as exc:
        errors += [{**e, "loc": ("context", *e["loc"])} for e in exc.errors(include_url=False)]
    if context_type is BrandPreset:
        try:
            adapter.validate_python(preset_of(None, config))
        except ValidationError as exc:
            errors += [
                {**e, "loc": ("config", "configurable", *e["loc"])}
                for e in exc.errors(include_url=False)
            ]
    if errors:
        raise InvalidFields(errors)
    return dict(checked)


def request_fingerprint(thread_id: str | None, body: dict[str, Any]) -> str:
    """Return a stable hash of a run request (to tell a retried POST from a different one)."""
    return hashlib.sha256(dumps({"thread_id": thread_id, "body": body}).encode()).hexdigest()


@dataclass(frozen=True)
class RunRequest:
    """A validated request to start a run, as a route hands it to the run manager."""

    #: The caller's owner id.
    owner: str
    #: The thread, or None for a thread-less run (a new thread).
    thread_id: str | None
    #: The assistant to run.
    assistant: Assistant
    #: The run options, as the client sent them: `input` (graph input, checked here
    #: against the assistant's input model) or `command`, `stream_mode` (list),
    #: `stream_subgraphs`, `stream_resumable`, `on_disconnect`, `config`, and the
    #: Platform options (`checkpoint`, `interrupt_before`, `on_completion`, …).
    kwargs: dict[str, Any]
    #: Stored with the run.
    metadata: dict[str, Any] = field(default_factory=dict)
    #: What to do when the thread has a pending or running run.
    multitask_strategy: MultitaskStrategy = "reject"
    #: A missing thread: create it, or refuse (404).
    if_not_exists: IfNotExists = "reject"
    #: A retried POST with the same key returns the same run.
    idempotency_key: str | None = None
    #: Fingerprint of the request (`request_fingerprint`), to refuse a reused key.
    request_hash: str | None = None
    #: The server's base URL the client reached (absolute links in the run's output).
    base_url: str | None = None
    #: The caller's W3C Trace Context headers (`traceparent`, `tracestate`): with
    #: tracing on, the run's trace is a child of the caller's (`engine.tracing`).
    trace_headers: dict[str, str] = field(default_factory=dict)


@dataclass
class PreparedRun:
    """What to record for a run request, once every check passed."""

    #: The new run (status pending), or the run an idempotent repeat names.
    run: RunRecord
    #: False for an idempotent repeat: nothing is to be recorded or started.
    new: bool = True
    #: A thread to create with the run (a thread-less run, or `if_not_exists=create`).
    new_thread: ThreadRecord | None = None
    #: Runs of the thread this process executes that the run waits for (enqueue).
    after: list[str] = field(default_factory=list)
    #: Keys to merge into an existing thread's metadata with the run (title, assistant).
    thread_metadata: dict[str, Any] = field(default_factory=dict)


class RunPreparation(Protocol):
    """Decides, before anything is written, what a run request records."""

    async def prepare(self, request: RunRequest) -> PreparedRun:
        """Check the request and apply the thread's multitask strategy; raise `RunsError`."""
        ...

    async def check_checkpoint(self, thread_id: str, checkpoint: dict[str, Any]) -> None:
        """Refuse a checkpoint the thread does not have."""
        ...

    def check_state_update(self, assistant: Assistant, values: Any, as_node: str | None) -> None:
        """Refuse a state update naming nodes or keys the graph does not have."""
        ...


class RunPreparer:
    """Check run requests and apply multitask strategies (`RunPreparation`)."""

    def __init__(
        self,
        *,
        storage: RunStorage,
        executor: RunExecutor,
        checkpointer: BaseCheckpointSaver,
        webhooks: WebhookConfig | None = None,
        tracing: RunTracing | None = None,
    ) -> None:
        """Read threads and runs from `storage`; cancel through `executor`.

        `webhooks` holds the rules a run's `webhook` URL is checked against; with
        `tracing`, a new run carries the context of its trace (`engine.tracing`).
        """
        self.threads = storage.threads
        self.runs = storage.runs
        self.executor = executor
        self.checkpointer = checkpointer
        self.webhooks = webhooks or WebhookConfig()
        self.tracing = tracing

    async def prepare(self, request: RunRequest) -> PreparedRun:
        """Check a run request and apply its thread's multitask strategy.

        Call it under the run manager's creation lock: the busy check and the
        strategy must not interleave with another creation.

        Raises:
            RunsError: NotFound, Conflict (busy thread, nothing to resume) or Invalid.
        """
        owner, thread_id, assistant = request.owner, request.thread_id, request.assistant
        kwargs, multitask_strategy = self.check_request(request), request.multitask_strategy
        if kwargs.get("webhook") is not None:
            kwargs["webhook"] = check_webhook(kwargs["webhook"], self.webhooks)
        idempotency_key, request_hash = request.idempotency_key, request.request_hash
        if idempotency_key is not None:
            existing = await self.runs.find_idempotent(owner, idempotency_key)
            if existing is not None:
                if existing.request_hash != request_hash:
                    raise Invalid(
                        "Idempotency-Key was already used for a different request",
                        field="header:Idempotency-Key",
                    )
                return PreparedRun(existing, new=False)

        new_thread: ThreadRecord | None = None
        thread = await self.threads.get(owner, thread_id) if thread_id is not None else None
        labels = self.thread_labels(assistant, kwargs)
        if thread is None:
            if thread_id is not None and request.if_not_exists != "create":
                raise NotFound(f"thread {thread_id!r} not found")
            if thread_id is not None and await self.threads.exists(thread_id):
                raise NotFound(f"thread {thread_id!r} not found")  # another owner's
            stamp = now()
            new_thread = ThreadRecord(
                thread_id=thread_id or str(uuid.uuid4()),
                owner=owner,
                created_at=stamp,
                updated_at=stamp,
                metadata=labels,
            )
        tid = new_thread.thread_id if new_thread else thread_id
        assert tid is not None

        after: list[str] = []
        if new_thread is None:
            if kwargs.get("checkpoint"):  # before a strategy cancels anything
                await self.check_checkpoint(tid, kwargs["checkpoint"])
            busy = await self.runs.active(tid)
            if busy and multitask_strategy == "reject":
                raise Conflict(
                    f"thread {tid!r} is busy with run {busy[0].run_id!r} "
                    f"({busy[0].status}); multitask_strategy is reject"
                )
            if busy and multitask_strategy in ("interrupt", "rollback"):
                await self.executor.cancel_all([r.run_id for r in busy], multitask_strategy)
            elif busy:  # enqueue: start after every active run of the thread
                after = [r.run_id for r in busy if self.executor.is_active(r.run_id)]
            kwargs = await self.chat_answer(assistant, tid, kwargs)
            if kwargs.get("command"):
                await self.check_command(
                    assistant, tid, kwargs["command"], kwargs.get("checkpoint")
                )
            elif kwargs.get("input") is None:
                await self.check_continuation(assistant, tid, kwargs.get("checkpoint"))
        elif (kwargs.get("command") or {}).get("resume") is not None:
            raise Conflict(f"thread {tid!r} has no pending interrupt to resume")
        elif kwargs.get("checkpoint"):
            raise NotFound(f"checkpoint {kwargs['checkpoint']['checkpoint_id']!r} not found")
        elif kwargs.get("input") is None and not kwargs.get("command"):
            raise Invalid("a run on a new thread needs input or command", field="input")

        stamp = now()
        run = RunRecord(
            run_id=str(uuid.uuid4()),
            thread_id=tid,
            owner=owner,
            assistant_id=assistant.assistant_id,
            status="pending",
            created_at=stamp,
            updated_at=stamp,
            kwargs=kwargs,
            multitask_strategy=multitask_strategy,
            metadata=request.metadata,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
        )
        if self.tracing is not None:  # where it executes, the run continues this trace
            run = self.tracing.created(run, request.trace_headers)
        known = thread.metadata if thread is not None else {}
        missing = {k: v for k, v in labels.items() if k not in known}
        return PreparedRun(run, new_thread=new_thread, after=after, thread_metadata=missing)

    @staticmethod
    def thread_labels(assistant: Assistant, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Return the metadata a run gives its thread: its assistant, and a title.

        The title is the first line of the run's request (at most 80 characters),
        for a chat client's history list; a thread keeps the first one it got.
        """
        labels: dict[str, Any] = {
            "graph_id": assistant.graph_id,
            "assistant_id": assistant.assistant_id,
        }
        graph_input = kwargs.get("input") or {}
        request = graph_input.get("request") if isinstance(graph_input, dict) else None
        if not request and assistant.spec.chat_text is not None and graph_input:
            request = assistant.spec.chat_text(graph_input)
        line = next((ln.strip() for ln in str(request or "").splitlines() if ln.strip()), "")
        if line:
            labels["title"] = line if len(line) <= 80 else line[:79] + "…"
        return labels

    async def chat_answer(
        self, assistant: Assistant, thread_id: str, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """Return the run's kwargs, a chat message to a waiting thread made its answer.

        A run whose input has `messages` (and no command), on a thread with a
        pending interrupt, resumes it: `command.resume` is the input's request (the
        last human message's text, `chat_text`, unless the input names one), and
        `command.update` adds the messages to the conversation. Any other run is returned as it is.
        """
        graph_input = kwargs.get("input")
        read = assistant.spec.chat_text
        if read is None or not isinstance(graph_input, dict) or not graph_input.get("messages"):
            return kwargs
        config = self.at_checkpoint(thread_id, kwargs.get("checkpoint"))
        snapshot = await assistant.graph.aget_state(config)
        if not snapshot.interrupts:
            return kwargs
        answer = graph_input.get("request") or read(graph_input)  # an explicit request wins
        command = {"resume": answer, "update": {"messages": graph_input["messages"]}}
        return {**kwargs, "input": None, "command": command}

    @staticmethod
    def check_request(request: RunRequest) -> dict[str, Any]:
        """Check a run request against its assistant's graph and contract; return its kwargs.

        Nothing is read: a request the graph cannot run is refused before any
        thread or run is looked at. The kwargs returned carry the input as the input
        model validated it (only the fields the client sent).

        Raises:
            InvalidFields: What is wrong, field by field (the body paths of a run request).
        """
        assistant, kwargs = request.assistant, request.kwargs
        command = kwargs.get("command") or {}
        goto = command.get("goto")
        if goto in ("__end__", ["__end__"]) and set(command) == {"goto"}:
            # A chat UI's "end here": the pending interrupt's HITL answer `reject`.
            command = {"resume": {"decisions": [{"type": "reject"}]}}
            kwargs, goto = {**kwargs, "command": command}, None
        targets = [goto] if isinstance(goto, str) else list(goto or [])
        nodes = assistant.node_names
        unknown = sorted(set(targets) - set(nodes))
        if unknown:
            raise InvalidFields.at(
                "command.goto", f"command.goto names unknown nodes {unknown}; nodes: {nodes}"
            )
        update = command.get("update")
        written = list(update) if isinstance(update, dict) else [k for k, _ in update or []]
        keys = assistant.state_keys
        unknown = sorted(set(written) - set(keys))
        if unknown:
            raise InvalidFields.at(
                "command.update", f"command.update names unknown state keys {unknown}; keys: {keys}"
            )
        graph_input = kwargs.get("input")
        model = assistant.spec.input_model
        if graph_input is not None and model is not None:
            try:
                graph_input = model.model_validate(graph_input).model_dump(
                    mode="json", exclude_unset=True
                )
            except ValidationError as exc:
                errors = exc.errors(include_url=False)
                raise InvalidFields([{**e, "loc": ("input", *e["loc"])} for e in errors]) from None
        if kwargs.get("checkpoint") is not None and request.thread_id is None:
            raise InvalidFields.at(
                "checkpoint",
                "a run from a checkpoint needs a thread (POST /threads/{thread_id}/runs…)",
            )
        if kwargs.get("on_completion") is not None and request.thread_id is not None:
            raise InvalidFields.at(
                "on_completion",
                "on_completion applies to thread-less runs (POST /runs, /runs/stream, /runs/wait)",
            )
        for option in ("interrupt_before", "interrupt_after"):
            value = kwargs.get(option)
            unknown = sorted(set(value) - set(nodes)) if isinstance(value, list) else []
            if unknown:
                raise InvalidFields.at(
                    option, f"{option} names unknown nodes {unknown}; nodes: {nodes}"
                )
        if assistant.record is not None:
            kwargs, graph_input = RunPreparer.with_assistant(assistant, kwargs, graph_input)
        if request.base_url:
            config = dict(kwargs.get("config") or {})
            configurable = {**(config.get("configurable") or {}), "base_url": request.base_url}
            kwargs = {**kwargs, "config": {**config, "configurable": configurable}}
        return {**kwargs, "input": graph_input}

    @staticmethod
    def with_assistant(
        assistant: Assistant, kwargs: dict[str, Any], graph_input: Any
    ) -> tuple[dict[str, Any], Any]:
        """Return a created assistant's run kwargs and input (see the module docstring).

        Raises:
            InvalidFields: The assistant's preset no longer passes its check (at
                `assistant_id`, naming the preset's field).
        """
        record = assistant.record
        assert record is not None
        own = dict(kwargs.get("config") or {})
        configurable = {
            **(record.config.get("configurable") or {}),
            **(own.get("configurable") or {}),
        }
        config = {**record.config, **own}
        if configurable:
            config["configurable"] = configurable
        kwargs = {**kwargs, "config": config, "graph_id": assistant.graph_id}
        if assistant.spec.context_type is not BrandPreset or not isinstance(graph_input, dict):
            return kwargs, graph_input
        preset = preset_of(record.context, record.config)
        try:
            check_context(BrandPreset, preset, {})
        except InvalidFields as exc:
            raise InvalidFields.at(
                "assistant_id", f"assistant {record.assistant_id!r}'s preset: {exc.message}"
            ) from None
        if preset:
            graph_input = {**graph_input, "brand": preset_with(preset, graph_input.get("brand"))}
        return kwargs, graph_input

    def at_checkpoint(self, thread_id: str, checkpoint: dict[str, Any] | None) -> RunnableConfig:
        """Return the config of a thread's head, or of one of its checkpoints."""
        config = graph_config(thread_id)
        if checkpoint:
            config["configurable"].update(checkpoint)
        return config

    async def check_checkpoint(self, thread_id: str, checkpoint: dict[str, Any]) -> None:
        """Refuse a start checkpoint the thread does not have."""
        found = await self.checkpointer.aget_tuple(self.at_checkpoint(thread_id, checkpoint))
        if found is None:
            raise NotFound(
                f"checkpoint {checkpoint['checkpoint_id']!r} not found on thread {thread_id!r}",
                field="checkpoint",
            )

    async def check_continuation(
        self, assistant: Assistant, thread_id: str, checkpoint: dict[str, Any] | None
    ) -> None:
        """Refuse a run without input or command unless the thread has nodes left to run."""
        snapshot = await assistant.graph.aget_state(self.at_checkpoint(thread_id, checkpoint))
        if not snapshot.next:
            raise Invalid(
                "a run needs input or command; without them it continues a thread paused at "
                "a breakpoint, and this thread has nothing left to run",
                field="input",
            )

    async def check_command(
        self,
        assistant: Assistant,
        thread_id: str,
        command: dict,
        checkpoint: dict[str, Any] | None = None,
    ) -> None:
        """Refuse an update or a resume the thread's state does not allow.

        An update goes through the assistant's update check; a resume needs a pending
        interrupt, names only pending interrupt ids, and satisfies the resume check.
        """
        goto = command.get("goto")
        if assistant.spec.check_update is not None and command.get("resume") is None:
            goto_nodes = [goto] if isinstance(goto, str) else list(goto or [])
            update = command.get("update")
            await self.check_update(
                assistant,
                thread_id,
                update if isinstance(update, dict) else {},
                checkpoint,
                field="command.update",
                goto=goto_nodes,
            )
        if "resume" not in command or command["resume"] is None:
            return
        snapshot = await assistant.graph.aget_state(self.at_checkpoint(thread_id, checkpoint))
        pending: list[Interrupt] = list(snapshot.interrupts)
        if not pending:
            raise Conflict(f"thread {thread_id!r} has no pending interrupt to resume")
        resume = command["resume"]
        ids = {i.id for i in pending}
        if isinstance(resume, dict) and resume and all(_INTERRUPT_ID.match(k) for k in resume):
            unknown = sorted(set(resume) - ids)
            if unknown:
                raise Invalid(
                    f"command.resume names unknown interrupt ids {unknown}; pending: {sorted(ids)}",
                    field="command.resume",
                )
            answers = [(v, [i for i in pending if i.id == k]) for k, v in resume.items()]
        elif len(pending) > 1:
            raise Invalid(
                f"thread has {len(pending)} pending interrupts; resume with a map of "
                "interrupt id to answer",
                field="command.resume",
            )
        else:
            answers = [(resume, pending)]
        check_resume = assistant.spec.check_resume
        if check_resume is not None:
            for value, interrupts in answers:
                try:
                    check_resume(value, interrupts)
                except ValueError as exc:
                    raise Invalid(f"command.resume: {exc}", field="command.resume") from None

    async def check_update(
        self,
        assistant: Assistant,
        thread_id: str,
        update: dict[str, Any],
        checkpoint: dict[str, Any] | None,
        *,
        field: str,
        goto: list[str],
    ) -> None:
        """Refuse a state update the assistant's `check_update` finds wrong for this thread."""
        check_update = assistant.spec.check_update
        assert check_update is not None
        snapshot = await assistant.graph.aget_state(self.at_checkpoint(thread_id, checkpoint))
        try:
            check_update(update, snapshot.values or {}, goto)
        except ValueError as exc:
            where = str(exc).split(":", 1)[0]
            raise Invalid(f"{field}.{exc}", field=f"{field}.{where}") from None

    # -- state updates ----------------------------------------------------------------

    @staticmethod
    def check_state_update(assistant: Assistant, values: Any, as_node: str | None) -> None:
        """Refuse a state update naming a node or state keys the graph does not have."""
        # `__start__` is a node a state update may name: the update is then the input.
        if as_node is not None and as_node not in assistant.graph.nodes:
            raise Invalid(
                f"as_node {as_node!r} is not a node of the graph; nodes: {assistant.node_names}",
                field="as_node",
            )
        if isinstance(values, dict):
            keys = assistant.state_keys
            unknown = sorted(set(values) - set(keys))
            if unknown:
                raise Invalid(
                    f"values names keys {unknown} that are not in the state; keys: {keys}",
                    field="values",
                )
