"""Run preparation: everything decided before a run is recorded.

`RunPreparer.prepare` checks a `RunSpec` against its assistant, the caller and the
thread, and says what to record; nothing is written here, so a refused request
leaves no thread or run behind. First what the assistant's graph and contract allow
(`check_request`: input, command, breakpoints, options that need or exclude a
thread, a created assistant's config and context), then the idempotency key, the
thread (created, or the caller's), the multitask strategy, a chat message answering
a pending interrupt, a command or a run without input against the thread's state.
See docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Interrupt
from pydantic import TypeAdapter, ValidationError

from engine.assistants import Assistant, AssistantSpec
from engine.errors import Conflict, Invalid, InvalidFields, NotFound
from engine.execution import graph_config
from engine.protocols import RunExecutor, RunStorage
from engine.records import RunRecord, ThreadRecord, ThreadTTL, now
from engine.spec import RunOptions, RunSpec
from engine.tracing import RunTracing
from engine.webhooks import WebhookConfig, check_webhook

_INTERRUPT_ID = re.compile(r"^[0-9a-f]{32}$")


def check_context(
    spec: AssistantSpec, context: dict[str, Any], config: dict[str, Any]
) -> dict[str, Any]:
    """Check an assistant's context against its graph's context type; return it validated.

    The context fields `config.configurable` carries too (`AssistantSpec.context_in_config`)
    are checked as well.

    Raises:
        InvalidFields: Each fault, at `context.<field>` (or `config.configurable.<field>`).
    """
    adapter: TypeAdapter[Any] = TypeAdapter(spec.context_type)
    errors: list[dict[str, Any]] = []
    try:
        checked = adapter.validate_python(context)
    except ValidationError as exc:
        errors += [{**e, "loc": ("context", *e["loc"])} for e in exc.errors(include_url=False)]
    if spec.context_in_config is not None:
        try:
            adapter.validate_python(spec.context_in_config(config))
        except ValidationError as exc:
            errors += [
                {**e, "loc": ("config", "configurable", *e["loc"])}
                for e in exc.errors(include_url=False)
            ]
    if errors:
        raise InvalidFields(errors)
    return dict(checked)


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


class RunPreparer:
    """Check run requests and apply multitask strategies."""

    def __init__(
        self,
        *,
        storage: RunStorage,
        executor: RunExecutor,
        checkpointer: BaseCheckpointSaver,
        webhooks: WebhookConfig | None = None,
        tracing: RunTracing | None = None,
        default_ttl: ThreadTTL | None = None,
    ) -> None:
        """Read threads and runs from `storage`; cancel through `executor`.

        `webhooks` holds the rules a run's `webhook` URL is checked against; with
        `tracing`, a new run carries the context of its trace (`engine.tracing`); a
        thread a run creates gets `default_ttl` (`engine.retention`).
        """
        self.threads = storage.threads
        self.runs = storage.runs
        self.executor = executor
        self.checkpointer = checkpointer
        self.webhooks = webhooks or WebhookConfig()
        self.tracing = tracing
        self.default_ttl = default_ttl

    async def prepare(self, spec: RunSpec, assistant: Assistant) -> PreparedRun:
        """Check a run request and apply its thread's multitask strategy.

        Call it under the runs service's creation lock: the busy check and the
        strategy must not interleave with another creation.

        Raises:
            RunsError: NotFound, Conflict (busy thread, nothing to resume) or Invalid.
        """
        owner, thread_id, strategy = spec.owner, spec.thread_id, spec.multitask_strategy
        options = self.check_request(spec, assistant)
        if options.webhook is not None:
            options = dataclasses.replace(
                options, webhook=check_webhook(options.webhook, self.webhooks)
            )
        request_hash = spec.fingerprint() if spec.idempotency_key is not None else None
        if spec.idempotency_key is not None:
            existing = await self.runs.find_idempotent(owner, spec.idempotency_key)
            if existing is not None:
                if existing.request_hash != request_hash:
                    raise Invalid(
                        "Idempotency-Key was already used for a different request",
                        field="header:Idempotency-Key",
                    )
                return PreparedRun(existing, new=False)

        new_thread: ThreadRecord | None = None
        thread = await self.threads.get(owner, thread_id) if thread_id is not None else None
        labels = self.thread_labels(assistant, options)
        if thread is None:
            if thread_id is not None and spec.if_not_exists != "create":
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
                ttl=self.default_ttl.starting() if self.default_ttl is not None else None,
            )
        tid = new_thread.thread_id if new_thread else thread_id
        assert tid is not None

        after: list[str] = []
        checkpoint = dict(options.checkpoint) if options.checkpoint else None
        if new_thread is None:
            if checkpoint:  # before a strategy cancels anything
                await self.check_checkpoint(tid, checkpoint)
            busy = await self.runs.active(tid)
            if busy and strategy == "reject":
                raise Conflict(
                    f"thread {tid!r} is busy with run {busy[0].run_id!r} "
                    f"({busy[0].status}); multitask_strategy is reject"
                )
            if busy and strategy in ("interrupt", "rollback"):
                await self.executor.cancel_all([r.run_id for r in busy], strategy)
            elif busy:  # enqueue: start after every active run of the thread
                after = [r.run_id for r in busy if self.executor.is_active(r.run_id)]
            options = await self.chat_answer(assistant, tid, options)
            if options.command:
                await self.check_command(assistant, tid, dict(options.command), checkpoint)
            elif options.input is None:
                await self.check_continuation(assistant, tid, checkpoint)
        elif (options.command or {}).get("resume") is not None:
            raise Conflict(f"thread {tid!r} has no pending interrupt to resume")
        elif checkpoint:
            raise NotFound(f"checkpoint {checkpoint.get('checkpoint_id')!r} not found")
        elif options.input is None and not options.command:
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
            options=options,
            multitask_strategy=strategy,
            metadata=dict(spec.metadata),
            idempotency_key=spec.idempotency_key,
            request_hash=request_hash,
        )
        if self.tracing is not None:  # where it executes, the run continues this trace
            run = self.tracing.created(run, spec.trace_headers)
        known = thread.metadata if thread is not None else {}
        missing = {k: v for k, v in labels.items() if k not in known}
        return PreparedRun(run, new_thread=new_thread, after=after, thread_metadata=missing)

    @staticmethod
    def thread_labels(assistant: Assistant, options: RunOptions) -> dict[str, Any]:
        """Return the metadata a run gives its thread: its assistant, and a title.

        The title is the first line of the run's request (at most 80 characters),
        for a chat client's history list; a thread keeps the first one it got.
        """
        labels: dict[str, Any] = {
            "graph_id": assistant.graph_id,
            "assistant_id": assistant.assistant_id,
        }
        graph_input = options.input or {}
        request = graph_input.get("request") if isinstance(graph_input, dict) else None
        if not request and assistant.spec.chat_text is not None and graph_input:
            request = assistant.spec.chat_text(graph_input)
        line = next((ln.strip() for ln in str(request or "").splitlines() if ln.strip()), "")
        if line:
            labels["title"] = line if len(line) <= 80 else line[:79] + "…"
        return labels

    async def chat_answer(
        self, assistant: Assistant, thread_id: str, options: RunOptions
    ) -> RunOptions:
        """Return the run's options, a chat message to a waiting thread made its answer.

        A run whose input has `messages` (and no command), on a thread with a
        pending interrupt, resumes it: `command.resume` is the input's request (the
        last human message's text, `chat_text`, unless the input names one), and
        `command.update` adds the messages to the conversation. Any other run is
        returned as it is.
        """
        graph_input = options.input
        read = assistant.spec.chat_text
        if read is None or not isinstance(graph_input, dict) or not graph_input.get("messages"):
            return options
        checkpoint = dict(options.checkpoint) if options.checkpoint else None
        snapshot = await assistant.graph.aget_state(self.at_checkpoint(thread_id, checkpoint))
        if not snapshot.interrupts:
            return options
        answer = graph_input.get("request") or read(graph_input)  # an explicit request wins
        command = {"resume": answer, "update": {"messages": graph_input["messages"]}}
        return dataclasses.replace(options, input=None, command=command)

    @staticmethod
    def check_request(spec: RunSpec, assistant: Assistant) -> RunOptions:
        """Check a run request against its assistant's graph and contract; return its options.

        Nothing is read: a request the graph cannot run is refused before any
        thread or run is looked at. The options returned carry the input as the
        input model validated it (only the fields the client sent), the assistant's
        config and context for a created one, and the server's base URL.

        Raises:
            InvalidFields: What is wrong, field by field (the body paths of a run request).
        """
        # What the engine sets itself is never an adapter's to set.
        options = dataclasses.replace(spec.copy_options(), graph_id=None, trace_context=None)
        command = dict(options.command or {})
        goto = command.get("goto")
        if goto in ("__end__", ["__end__"]) and set(command) == {"goto"}:
            # A chat UI's "end here": the pending interrupt's HITL answer `reject`.
            command = {"resume": {"decisions": [{"type": "reject"}]}}
            options, goto = dataclasses.replace(options, command=command), None
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
        graph_input = options.input
        model = assistant.spec.input_model
        if graph_input is not None and model is not None:
            try:
                graph_input = model.model_validate(graph_input).model_dump(
                    mode="json", exclude_unset=True
                )
            except ValidationError as exc:
                errors = exc.errors(include_url=False)
                raise InvalidFields([{**e, "loc": ("input", *e["loc"])} for e in errors]) from None
        if options.checkpoint is not None and spec.thread_id is None:
            raise InvalidFields.at(
                "checkpoint",
                "a run from a checkpoint needs a thread (POST /threads/{thread_id}/runs…)",
            )
        if options.on_completion is not None and spec.thread_id is not None:
            raise InvalidFields.at(
                "on_completion",
                "on_completion applies to thread-less runs (POST /runs, /runs/stream, /runs/wait)",
            )
        for option, value in (
            ("interrupt_before", options.interrupt_before),
            ("interrupt_after", options.interrupt_after),
        ):
            named = sorted(set(value) - set(nodes)) if not isinstance(value, str | None) else []
            if named:
                raise InvalidFields.at(
                    option, f"{option} names unknown nodes {named}; nodes: {nodes}"
                )
        if assistant.record is not None:
            options, graph_input = RunPreparer.with_assistant(assistant, options, graph_input)
        if spec.base_url:
            config = dict(options.config)
            configurable = {**(config.get("configurable") or {}), "base_url": spec.base_url}
            options = dataclasses.replace(options, config={**config, "configurable": configurable})
        return dataclasses.replace(options, input=graph_input)

    @staticmethod
    def with_assistant(
        assistant: Assistant, options: RunOptions, graph_input: Any
    ) -> tuple[RunOptions, Any]:
        """Return a created assistant's run options and input.

        The assistant's `config` is under the run's (the run's keys win,
        `configurable` key by key), and the run records the graph it runs
        (`graph_id`). Its context reaches the input through its spec's
        `context_into_input` (checked against the context type first).

        Raises:
            InvalidFields: The assistant's context no longer passes its check (at
                `assistant_id`, naming the field).
        """
        record = assistant.record
        spec = assistant.spec
        assert record is not None
        own = dict(options.config)
        configurable = {
            **(record.config.get("configurable") or {}),
            **(own.get("configurable") or {}),
        }
        config = {**record.config, **own}
        if configurable:
            config["configurable"] = configurable
        options = dataclasses.replace(options, config=config, graph_id=assistant.graph_id)
        if spec.context_into_input is None or not isinstance(graph_input, dict):
            return options, graph_input
        in_config = spec.context_in_config(record.config) if spec.context_in_config else {}
        preset = {**in_config, **record.context}
        if spec.context_type is not None:
            try:
                check_context(dataclasses.replace(spec, context_in_config=None), preset, {})
            except InvalidFields as exc:
                raise InvalidFields.at(
                    "assistant_id", f"assistant {record.assistant_id!r}'s preset: {exc.message}"
                ) from None
        if preset:
            graph_input = spec.context_into_input(graph_input, preset)
        return options, graph_input

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
                f"checkpoint {checkpoint.get('checkpoint_id')!r} not found on thread {thread_id!r}",
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
