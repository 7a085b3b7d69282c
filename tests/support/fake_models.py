"""Scripted fake chat models for tests: a `ModelFactory` whose replies are written per role.

`FakeModels` is a drop-in `providers.llm.ModelFactory` (`ctx.models(role)`): each
role gets a *responder* that decides what the "LLM" answers, and every call is
recorded, so tests can count calls, read prompts and measure prompt sizes. The
models are real `BaseChatModel`s (LangChain callbacks, tags, `bind_tools`,
`with_structured_output(..., method="function_calling")`, sync/async, token
streaming), so graphs run unchanged; nothing touches a network.

API
---
Responders (one per role), in the forms ``FakeModels`` accepts:

* a list/tuple of replies — consumed one per call; running out raises
  `ScriptExhausted` naming the role (a test asked for more than it scripted);
* a callable ``(messages) -> reply`` — called on every call with the prompt's
  `BaseMessage` list (the `FakeCall` being made is ``models.calls[-1]``);
* a single reply — answered on every call.

A reply is an `AIMessage` or a plain ``str`` (text). Build tool-calling replies
with `tool_call(name, **args)` / `tool_calls([(name, args), ...])`, a supervisor
decision with `decision("writer_agent", guidance=...)`; `garbage()` is a reply
no parser accepts.

``FakeModels``::

    models = FakeModels({"supervisor": [decision("writer_agent")], "writer_agent": "# 标题\\n正文"})
    models.script("critic", [tool_call("JudgeVerdict", verdict="passed", score=0.9)])  # add a role
    ctx = fake_context(models, tmp_path)     # an AtelierContext using them
    ...
    models.count("supervisor")               # calls made by a role
    models.calls_for("writer_agent")[0].prompt_chars
    models.calls[-1].tools                   # tool names bound on that call
    models.calls[-1].forced_tool             # the tool a forced tool_choice named

Every call is a `FakeCall`: ``role``, ``messages``, ``tools`` (bound tool names),
``tool_choice`` (raw), ``forced_tool``, ``streamed`` (tokens went out as chunks),
``prompt_chars`` (characters of all message contents) and ``reply``.

Each role's model carries the same tags the real factory gives it
(`providers.llm.role_tags`: ``nostream`` for every role but ``writer_agent``), and
streams its text in chunks of ``chunk_chars`` characters whenever LangChain asks
it to (a graph streamed in ``messages`` mode), so the writer's tokens reach the
stream exactly as with ``ChatOpenAI(streaming=True)``.

``happy_team(image_count=3, ...)`` returns responders for the eight team roles
plus the supervisor that script the normal path — brief → research (one
``search_knowledge`` call) → reference → layout → image planner → writer → image
(one ``generate_image`` call per plan, all in one reply) → review (approved) →
END. They are callables that read the prompt rather than fixed lists, so they
answer the same way on every team run (a pipeline retrying calls the team again):
the supervisor picks the first ❌ stage of the stage status in its prompt, the
research and image responders call their tool until a tool result is in the
prompt. Add pipeline roles by merging dicts::

    models = FakeModels({**happy_team(2), "planner": [...], "critic": [...]})
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from knowledge.notes import KnowledgeNote
from providers.llm import role_tags

__all__ = [
    "FakeCall",
    "FakeModels",
    "Reply",
    "Responder",
    "ScriptExhausted",
    "ScriptedChatModel",
    "decision",
    "fake_context",
    "garbage",
    "happy_team",
    "tool_call",
    "tool_calls",
]

Reply: TypeAlias = AIMessage | str
"""What a responder answers: an `AIMessage`, or plain text."""

Responder: TypeAlias = Reply | Sequence[Reply] | Callable[[list[BaseMessage]], Reply]
"""A role's script: one reply for every call, a list consumed in order, or a callable."""

_GENERIC_CHOICES = frozenset({"auto", "none", "any", "required"})


class ScriptExhausted(AssertionError):
    """A role was called more often than its scripted list of replies allows."""


@dataclass
class FakeCall:
    """One recorded call of a fake model."""

    role: str
    messages: list[BaseMessage]
    tools: list[str]
    tool_choice: Any
    streamed: bool
    reply: AIMessage | None = None

    @property
    def prompt_chars(self) -> int:
        """Return the characters of every message's content (the prompt's size)."""
        return sum(len(_text(m.content)) for m in self.messages)

    @property
    def prompt(self) -> str:
        """Return every message's content, joined by blank lines (for substring checks)."""
        return "\n\n".join(_text(m.content) for m in self.messages)

    @property
    def forced_tool(self) -> str | None:
        """Return the tool a forced `tool_choice` names (or the only tool under "any")."""
        choice = self.tool_choice
        if isinstance(choice, dict):
            function = choice.get("function") or {}
            return function.get("name") or choice.get("name")
        if isinstance(choice, str) and choice not in _GENERIC_CHOICES:
            return choice
        if choice in ("any", "required") and len(self.tools) == 1:
            return self.tools[0]
        return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part if isinstance(part, str) else str(part.get("text", ""))
            for part in content
            if isinstance(part, str | dict)
        )
    return str(content or "")


class FakeModels:
    """A `ModelFactory` of scripted fake chat models that records every call."""

    def __init__(
        self, responders: Mapping[str, Responder] | None = None, *, chunk_chars: int = 4
    ) -> None:
        """Script the given roles; `chunk_chars` is the size of streamed text chunks."""
        self.chunk_chars = chunk_chars
        self.calls: list[FakeCall] = []
        self._scripts: dict[str, Callable[[list[BaseMessage]], Reply]] = {}
        self._models: dict[str, ScriptedChatModel] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        for role, responder in (responders or {}).items():
            self.script(role, responder)

    def script(self, role: str, responder: Responder) -> FakeModels:
        """Set (or replace) the responder of `role`; returns self for chaining."""
        self._scripts[role] = _as_callable(role, responder)
        return self

    def __call__(self, role: str) -> BaseChatModel:
        """Return the fake model of `role` (one per role, like the real factory)."""
        with self._lock:
            model = self._models.get(role)
            if model is None:
                model = ScriptedChatModel(role=role, tags=role_tags(role), metadata={"role": role})
                model._factory = self
                self._models[role] = model
        return model

    def calls_for(self, role: str) -> list[FakeCall]:
        """Return the recorded calls of `role`, in order."""
        return [c for c in self.calls if c.role == role]

    def count(self, role: str | None = None) -> int:
        """Return how many calls `role` (or every role, when None) made."""
        return len(self.calls) if role is None else len(self.calls_for(role))

    def roles_called(self) -> list[str]:
        """Return the roles in call order (consecutive repeats kept)."""
        return [c.role for c in self.calls]

    def respond(
        self,
        role: str,
        messages: list[BaseMessage],
        options: Mapping[str, Any],
        *,
        streamed: bool,
    ) -> AIMessage:
        """Record a call of `role` and return its scripted reply (used by the models)."""
        tools = [_tool_name(t) for t in options.get("tools") or []]
        call = FakeCall(
            role=role,
            messages=list(messages),
            tools=tools,
            tool_choice=options.get("tool_choice"),
            streamed=streamed,
        )
        with self._lock:
            self.calls.append(call)
            number = next(self._ids)
            responder = self._scripts.get(role)
        if responder is None:
            scripted = ", ".join(sorted(self._scripts)) or "none"
            raise ScriptExhausted(f"role {role!r} is not scripted (scripted: {scripted})")
        reply = _normalise(responder(list(messages)), role, number)
        call.reply = reply
        return reply


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and function.get("name"):
            return str(function["name"])
        return str(tool.get("name", ""))
    return str(getattr(tool, "name", getattr(tool, "__name__", tool)))


def _as_callable(role: str, responder: Responder) -> Callable[[list[BaseMessage]], Reply]:
    if isinstance(responder, AIMessage | str):
        fixed = responder
        return lambda _messages: fixed
    if callable(responder):
        return responder
    queue: deque[Reply] = deque(responder)
    total = len(queue)
    lock = threading.Lock()

    def next_reply(_messages: list[BaseMessage]) -> Reply:
        with lock:
            if not queue:
                raise ScriptExhausted(
                    f"role {role!r} has no scripted reply left (all {total} were used)"
                )
            return queue.popleft()

    return next_reply


def _normalise(reply: Reply, role: str, number: int) -> AIMessage:
    """Give a reply (and each of its tool calls) an id; text becomes an `AIMessage`."""
    message = AIMessage(content=reply) if isinstance(reply, str) else reply
    calls = [
        {**c, "id": c.get("id") or f"call_{role}_{number}_{i}", "type": "tool_call"}
        for i, c in enumerate(message.tool_calls)
    ]
    return message.model_copy(
        update={"id": message.id or f"fake-{role}-{number}", "tool_calls": calls}
    )


class ScriptedChatModel(BaseChatModel):
    """A chat model answering from its `FakeModels` script; see the module docstring."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    role: str = Field(description="The role this model serves (its script's key).")
    _factory: FakeModels = PrivateAttr()

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (any form `convert_to_openai_tool` takes) and an optional tool choice."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def _reply(
        self, messages: list[BaseMessage], options: Mapping[str, Any], streamed: bool
    ) -> AIMessage:
        return self._factory.respond(self.role, messages, options, streamed=streamed)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._reply(messages, kwargs, streamed=False)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._reply(messages, kwargs, streamed=False)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _chunks(self, reply: AIMessage) -> Iterator[ChatGenerationChunk]:
        text = _text(reply.content)
        size = max(1, self._factory.chunk_chars)
        pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        for piece in pieces:
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=reply.id))
        if reply.tool_calls:
            tool_call_chunks = [
                {
                    "name": c["name"],
                    "args": json.dumps(c["args"], ensure_ascii=False),
                    "id": c["id"],
                    "index": i,
                    "type": "tool_call_chunk",
                }
                for i, c in enumerate(reply.tool_calls)
            ]
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    id=reply.id,
                    tool_call_chunks=tool_call_chunks,  # type: ignore[arg-type]
                )
            )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._reply(messages, kwargs, streamed=True)
        for chunk in self._chunks(reply):
            if run_manager is not None and chunk.text:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        reply = self._reply(messages, kwargs, streamed=True)
        for chunk in self._chunks(reply):
            if run_manager is not None and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


# --------------------------------------------------------------------------- replies


def tool_call(name: str, /, **args: Any) -> AIMessage:
    """Return a reply that calls tool `name` once with `args`."""
    return tool_calls([(name, args)])


def tool_calls(calls: Iterable[tuple[str, Mapping[str, Any]]], *, content: str = "") -> AIMessage:
    """Return a reply that makes several tool calls in one message."""
    return AIMessage(
        content=content,
        tool_calls=[
            {"name": name, "args": dict(args), "id": None, "type": "tool_call"}
            for name, args in calls
        ],
    )


def decision(
    next_agent: str,
    *,
    guidance: str = "",
    focus_areas: Sequence[str] = (),
    context_from_previous: str = "",
) -> AIMessage:
    """Return a supervisor reply deciding `next_agent` (an agent name or "END")."""
    return tool_call(
        "SupervisorDecision",
        next_agent=next_agent,
        guidance=guidance,
        context_from_previous=context_from_previous,
        focus_areas=list(focus_areas),
    )


def garbage() -> AIMessage:
    """Return a reply no structured parser accepts: text, no tool call."""
    return AIMessage(content="}}{{ 我不知道 ~~ not json")


# --------------------------------------------------------------------------- happy path

#: The stage-status line the supervisor's prompt shows per agent: "❌ field（agent）".
_MISSING_STAGE = re.compile(r"❌[^\n（]*（(\w+)）")

#: The README's request, which the happy scripts answer.
README_REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
#: An approved vault note the happy path's research finds for that request.
STUDENT_NOTE = KnowledgeNote(
    id="note_students",
    type="conclusion",
    status="approved",
    content="学生党平价护肤：先讲清楚成分，再推荐产品",
    tags=["护肤"],
)
HAPPY_TITLE = "学生党平价护肤：3步搞定"
HAPPY_BODY = (
    "预算有限也能把皮肤照顾好。\n\n"
    "## 第一步：温和清洁\n选氨基酸洁面，早晚各一次，洗完不紧绷才是对的。\n\n"
    "## 第二步：补水保湿\n含透明质酸、甘油的保湿乳足够日常，价格几十元就能买到。\n\n"
    "## 第三步：认真防晒\n白天出门前涂足量防晒，这是很划算的抗老方式。\n\n"
    "成分看懂了，就不会被营销牵着走。"
)
HAPPY_TAGS = ("平价护肤", "学生党", "护肤成分")


def _last_human(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return _text(message.content)
    return ""


def _has_tool_result(messages: Sequence[BaseMessage]) -> bool:
    return any(isinstance(m, ToolMessage) for m in messages)


def happy_supervisor(messages: list[BaseMessage]) -> AIMessage:
    """Decide the first missing stage of the prompt's stage status, or END when none is."""
    match = _MISSING_STAGE.search(_last_human(messages))
    if match is None:
        return decision("END", guidance="全部完成。")
    agent = match.group(1)
    return decision(agent, guidance=f"请完成 {agent} 的工作。", focus_areas=["学生党", "成分"])


def happy_team(
    image_count: int = 3,
    *,
    title: str = HAPPY_TITLE,
    body: str = HAPPY_BODY,
    tags: Sequence[str] = HAPPY_TAGS,
    topic: str = "平价护肤",
    palette: Sequence[str] = ("#f7e6d7", "#e07a5f", "#3d405b"),
    scores: Mapping[str, float] | None = None,
) -> dict[str, Responder]:
    """Return responders scripting the team's normal path for `image_count` images.

    Args:
        image_count: Plans, and thus images, the path makes.
        title: The writer's title.
        body: The writer's body (Markdown).
        tags: The writer's tags (written as a last line of #tags).
        topic: The brief's topic.
        palette: The reference analysis's palette.
        scores: The review's dimension scores (all 0.85 by default, approved).
    """
    dims = dict(
        scores
        or dict.fromkeys(
            ("infoDensity", "textImageAlignment", "styleConsistency", "readability", "platformFit"),
            0.85,
        )
    )
    slots = range(1, image_count + 1)

    def research(messages: list[BaseMessage]) -> AIMessage:
        if not _has_tool_result(messages):
            return tool_call("search_knowledge", query=f"{topic} 学生党")
        return tool_call(
            "EvidencePack",
            summary=f"{topic}的关键是温和清洁、保湿和防晒。",
            items=[
                {"fact": "氨基酸洁面对皮肤刺激较小", "source": "常识"},
                {"fact": "防晒是性价比最高的护肤步骤", "source": "常识"},
            ],
            body_blocks=[
                {"heading": "温和清洁", "text": "氨基酸洁面，早晚各一次。"},
                {"heading": "补水保湿", "text": "透明质酸、甘油保湿乳足够日常。"},
                {"heading": "认真防晒", "text": "白天足量防晒。"},
            ],
        )

    def images(messages: list[BaseMessage]) -> AIMessage:
        if _has_tool_result(messages):
            return AIMessage(content="全部图片已生成。")
        return tool_calls(
            ("generate_image", {"slot": slot, "prompt": f"第{slot}张：{topic}，柔和自然光"})
            for slot in slots
        )

    plans = [
        {
            "slot": slot,
            "type": "cover" if slot == 1 else "content",
            "desc": "封面：标题与产品平铺" if slot == 1 else f"第{slot}张：要点卡片",
            "prompt": f"{topic}产品平铺，奶油色背景，柔和自然光（第{slot}张）",
        }
        for slot in slots
    ]
    layout_blocks = [{"type": "cover", "desc": "封面"}] + [
        block
        for slot in slots
        if slot > 1
        for block in (
            {"type": "text", "desc": f"要点{slot - 1}"},
            {"type": "image", "desc": f"配图{slot}"},
        )
    ]
    post = f"# {title}\n\n{body}\n\n" + " ".join(f"#{t}" for t in tags)
    return {
        "supervisor": happy_supervisor,
        "brief_compiler_agent": tool_call(
            "CreativeBrief",
            topic=topic,
            audience="预算有限的大学生",
            goal="讲清楚平价护肤的关键成分和步骤",
            constraints=["不夸大功效"],
            keywords=[topic, "学生党", "成分"],
        ),
        "research_evidence_agent": research,
        "reference_intelligence_agent": tool_call(
            "ReferenceAnalysis",
            style="清新",
            tone="亲切",
            palette=list(palette),
            layout_cues=["封面大标题"],
            writing_cues=["短段落", "少量 emoji"],
        ),
        "layout_planner_agent": tool_call(
            "LayoutSpec", blocks=layout_blocks, total_images=image_count
        ),
        "image_planner_agent": tool_call("ImagePlans", plans=plans),
        "writer_agent": post,
        "image_agent": images,
        "review_agent": tool_call(
            "ReviewResult",
            approved=True,
            score=0.88,
            issues=[],
            suggestions=["可以再加一个使用场景"],
            dimensions=dims,
        ),
    }


# --------------------------------------------------------------------------- context


def fake_context(models: Any, root: Path, **overrides: Any) -> Any:
    """Return an `AtelierContext` using `models` (any model factory), assets under `root`, no notes.

    Image providers default to the real local card renderer. Keyword arguments
    override context fields (e.g. ``notes=``, ``image_providers=``, ``limits=``).
    """
    from agentkit.context import AtelierContext
    from knowledge.repository import InMemoryNoteRepository
    from providers.assets import AssetStore
    from providers.images import LocalCardProvider

    fields: dict[str, Any] = {
        "models": models,
        "assets": AssetStore(Path(root) / "assets"),
        "notes": InMemoryNoteRepository(),
        "image_providers": {"local": LocalCardProvider()},
    }
    fields.update(overrides)
    return AtelierContext(**fields)
