"""A scripted, OpenAI-compatible chat server on loopback for tests.

Tests point the real `langchain_openai.ChatOpenAI` client (and thus the real
`openai` SDK and `httpx` transport) at `ScriptedOpenAIServer.base_url`, and a
Python *responder* decides what the "model" says. That exercises the genuine
client path — request payloads, tool calling, forced `tool_choice`, structured
output via function calling, SSE streaming with tool-call deltas, usage and
HTTP errors — without any network model or API key.

Typical use::

    responder = (
        ScriptedResponder()
        .on_tool("SupervisorDecision", Reply.tool_call("SupervisorDecision", {"next": "writer"}))
        .on_text(lambda req: Reply.text(f"echo: {req.last_user_text}"))
    )
    with ScriptedOpenAIServer(responder) as srv:
        llm = srv.chat_model()  # ChatOpenAI(base_url=srv.base_url, max_retries=0, ...)
        assert llm.invoke("hi").content == "echo: hi"
        assert srv.call_count == 1

The server runs uvicorn on its own event loop in a daemon thread, so it works the
same from sync tests and from async tests (whose loop it never touches). It only
ever binds 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import http.client
import inspect
import itertools
import json
import logging
import math
import socket
import struct
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias, cast

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

__all__ = [
    "ChatRequest",
    "Reply",
    "Responder",
    "ScriptedOpenAIServer",
    "ScriptedResponder",
    "ToolCallSpec",
    "delayed",
    "scripted_openai_server",
    "scripted_server",
]

logger = logging.getLogger(__name__)

_HOST = "127.0.0.1"  # loopback only, by design
_DEFAULT_MODEL = "scripted"


# --------------------------------------------------------------------------- request


def _content_text(content: Any) -> str:
    """Flatten an OpenAI message `content` (str, None or a list of parts) to plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


@dataclass(frozen=True)
class ChatRequest:
    """One recorded POST /v1/chat/completions call, with convenience accessors.

    Attributes:
        body: The parsed JSON request body, exactly as the client sent it.
        index: 0-based order of arrival at this server.
        headers: Request headers (lower-cased names).
    """

    body: dict[str, Any]
    index: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str:
        """The requested model name."""
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request messages as OpenAI-format dicts."""
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[str]:
        """Names of the bound function tools, in request order."""
        names: list[str] = []
        for tool in self.body.get("tools") or []:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and fn.get("name"):
                names.append(str(fn["name"]))
        return names

    def tool_parameters(self, name: str) -> dict[str, Any] | None:
        """Return the JSON-schema `parameters` the client sent for tool `name`, if bound."""
        for tool in self.body.get("tools") or []:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and fn.get("name") == name:
                return dict(fn.get("parameters") or {})
        return None

    @property
    def tool_choice(self) -> Any:
        """The raw `tool_choice` value (str, dict or None)."""
        return self.body.get("tool_choice")

    @property
    def forced_tool(self) -> str | None:
        """The function name if `tool_choice` forces one specific function, else None.

        `"required"`/`"auto"`/`"none"` are not a specific function and give None,
        even when only one tool is bound.
        """
        choice = self.tool_choice
        if isinstance(choice, dict) and choice.get("type") == "function":
            fn = choice.get("function")
            if isinstance(fn, dict) and fn.get("name"):
                return str(fn["name"])
        return None

    @property
    def stream(self) -> bool:
        """Whether the client asked for an SSE stream."""
        return bool(self.body.get("stream"))

    @property
    def include_usage(self) -> bool:
        """Whether a streaming client asked for a final usage chunk."""
        opts = self.body.get("stream_options")
        return isinstance(opts, dict) and bool(opts.get("include_usage"))

    @property
    def last_user_text(self) -> str:
        """Text of the last `user` message ('' if there is none)."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                return _content_text(msg.get("content"))
        return ""

    @property
    def system_text(self) -> str:
        """All `system`/`developer` message texts joined by newlines."""
        return "\n".join(
            _content_text(m.get("content"))
            for m in self.messages
            if m.get("role") in ("system", "developer")
        )

    @property
    def all_text(self) -> str:
        """Every message's text content joined by newlines (for substring checks)."""
        return "\n".join(_content_text(m.get("content")) for m in self.messages)

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The `tool` role messages (results of earlier tool calls)."""
        return [m for m in self.messages if m.get("role") == "tool"]


# --------------------------------------------------------------------------- reply


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call the scripted model makes.

    Attributes:
        name: Function name.
        arguments: Arguments as the JSON string put on the wire (may be invalid JSON on purpose).
        id: Tool call id (`call_...`).
    """

    name: str
    arguments: str
    id: str


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _spec(name: str, args: dict[str, Any] | str, call_id: str | None) -> ToolCallSpec:
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCallSpec(name=name, arguments=arguments, id=call_id or _new_call_id())


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers to one request. Build with the classmethods.

    Attributes:
        content: Assistant text (None when only tool calls are made).
        calls: Tool calls in the assistant message (built by `tool_call`/`tool_calls`).
        status: HTTP status; non-200 means an OpenAI-style error body.
        error_message: Error message for non-200 replies.
        error_type: OpenAI error `type` for non-200 replies.
        should_retry: Sent as `x-should-retry` (True/False), which openai-python obeys;
            None leaves the SDK's default retry policy in charge.
        delay_s: Seconds to wait before answering (cut short when the server stops).
        chunk_delay_s: Seconds to wait between streamed chunks.
        chunk_chars: Characters per streamed content/argument delta.
        finish_reason: Override of the computed finish reason ("stop"/"tool_calls").
        garbage: Answer 200 with a body that is not valid JSON (a broken upstream).
        cut_after: Drop the connection after this many bytes of the body (a stream or
            a response cut short); None sends it whole.
        report_usage: Send token usage (`usage`, and the final usage chunk of a stream
            that asks for one); False answers as servers that report none do.
        usage_chunk: Where a stream's usage goes: "separate", a final chunk with no
            choices (OpenAI; Atelier's embedded llama-cpp-python server), or
            "on_finish", on the chunk that carries the finish reason (llama.cpp's
            `llama-server`); both only when the client asks for usage.
    """

    content: str | None = None
    calls: tuple[ToolCallSpec, ...] = ()
    status: int = 200
    error_message: str | None = None
    error_type: str | None = None
    should_retry: bool | None = None
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    chunk_chars: int = 8
    finish_reason: str | None = None
    garbage: bool = False
    cut_after: int | None = None
    report_usage: bool = True
    usage_chunk: Literal["separate", "on_finish"] = "separate"

    @classmethod
    def text(cls, content: str, *, chunk_chars: int = 8, finish_reason: str = "stop") -> Reply:
        """Answer with plain assistant text.

        Args:
            content: The text.
            chunk_chars: Characters per SSE delta when streamed.
            finish_reason: E.g. "length" to simulate truncation.
        """
        return cls(content=content, chunk_chars=chunk_chars, finish_reason=finish_reason)

    @classmethod
    def tool_call(
        cls,
        name: str,
        args: dict[str, Any] | str,
        id: str | None = None,
        *,
        content: str | None = None,
    ) -> Reply:
        """Answer with one tool call.

        Args:
            name: Function name.
            args: Arguments dict (JSON-encoded for the wire) or a raw JSON string.
            id: Tool call id; generated when None.
            content: Optional assistant text alongside the call.
        """
        return cls(content=content, calls=(_spec(name, args, id),))

    @classmethod
    def tool_calls(
        cls,
        calls: Iterable[tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str]],
        *,
        content: str | None = None,
    ) -> Reply:
        """Answer with several tool calls in one assistant message.

        Args:
            calls: `(name, args)` or `(name, args, id)` tuples.
            content: Optional assistant text alongside the calls.
        """
        specs = tuple(_spec(c[0], c[1], c[2] if len(c) > 2 else None) for c in calls)
        return cls(content=content, calls=specs)

    @classmethod
    def error(
        cls,
        status: int,
        message: str,
        *,
        type: str | None = None,
        retry: bool | None = None,
    ) -> Reply:
        """Answer with an HTTP error carrying an OpenAI error body.

        Args:
            status: HTTP status code (e.g. 400, 429, 500).
            message: `error.message`.
            type: `error.type`; defaults by status class.
            retry: Force the SDK to retry (True) or not (False) via `x-should-retry`.
        """
        return cls(status=status, error_message=message, error_type=type, should_retry=retry)

    @classmethod
    def delay(cls, seconds: float, reply: Reply, *, per_chunk: float = 0.0) -> Reply:
        """Wrap `reply` so the server sleeps `seconds` before answering (timeout tests).

        Args:
            seconds: Delay before the response (or before the first SSE chunk).
            reply: The reply to send after the delay.
            per_chunk: Extra delay between streamed chunks.
        """
        return dataclasses.replace(reply, delay_s=seconds, chunk_delay_s=per_chunk)

    @classmethod
    def garbled(cls) -> Reply:
        """Answer HTTP 200 with a body that is not valid JSON (nor valid SSE data)."""
        return cls(garbage=True)

    @classmethod
    def cut(cls, reply: Reply, after_bytes: int = 200) -> Reply:
        """Send `reply` but drop the connection after `after_bytes` bytes of its body."""
        return dataclasses.replace(reply, cut_after=after_bytes)

    @property
    def is_error(self) -> bool:
        """True for non-200 replies."""
        return self.status != 200


Responder: TypeAlias = Callable[[ChatRequest], Reply | str | Awaitable[Reply | str]]
"""A function from request to reply; sync or async; a bare str means `Reply.text(str)`.

Sync responders run on the server's event loop: they must not block (use `Reply.delay`).
"""


# --------------------------------------------------------------------------- wire format


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4)) if text else 0


def usage_of(req: ChatRequest, reply: Reply) -> dict[str, int]:
    """Return the token usage the server reports for `reply` to `req` (tests check sums)."""
    return _usage(req, reply)


def _usage(req: ChatRequest, reply: Reply) -> dict[str, int]:
    prompt = max(1, _estimate_tokens(req.all_text))
    out_text = (reply.content or "") + "".join(c.name + c.arguments for c in reply.calls)
    completion = _estimate_tokens(out_text)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(reply: Reply) -> str:
    if reply.finish_reason and not (reply.calls and reply.finish_reason == "stop"):
        return reply.finish_reason
    return "tool_calls" if reply.calls else "stop"


def _split(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _completion_body(req: ChatRequest, reply: Reply, completion_id: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content,
        "refusal": None,
        "annotations": [],
    }
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in reply.calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model or _DEFAULT_MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(reply),
            }
        ],
        "usage": _usage(req, reply) if reply.report_usage else None,
        "service_tier": "default",
        "system_fingerprint": "fp_scripted",
    }


def _stream_chunks(req: ChatRequest, reply: Reply, completion_id: str) -> list[dict[str, Any]]:
    """Build the `chat.completion.chunk` sequence for a reply, mirroring OpenAI's order."""
    created = int(time.time())
    include_usage = req.include_usage

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": req.model or _DEFAULT_MODEL,
            "service_tier": "default",
            "system_fingerprint": "fp_scripted",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            body["usage"] = None
        return body

    # Role first; OpenAI sends content "" for text replies and null before tool calls.
    first_content = None if (reply.calls and not reply.content) else ""
    chunks = [chunk({"role": "assistant", "content": first_content, "refusal": None})]
    chunks += [
        chunk({"content": piece}) for piece in _split(reply.content or "", reply.chunk_chars)
    ]
    for index, call in enumerate(reply.calls):
        # First delta names the call; arguments then arrive in several fragments.
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        chunks += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _split(call.arguments, reply.chunk_chars)
        ]
    chunks.append(chunk({}, _finish_reason(reply)))
    if include_usage and reply.report_usage and reply.usage_chunk == "on_finish":
        chunks[-1]["usage"] = _usage(req, reply)
    elif include_usage and reply.report_usage:
        usage_chunk = chunk({})
        usage_chunk["choices"] = []
        usage_chunk["usage"] = _usage(req, reply)
        chunks.append(usage_chunk)
    return chunks


class _CutConnection(Exception):
    """Raised inside a response body to make uvicorn drop the connection mid-body."""


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def _cut(body: AsyncIterator[bytes], after: int) -> AsyncIterator[bytes]:
    """Yield the first `after` bytes of a body, then break the connection."""
    sent = 0
    async for piece in body:
        if sent + len(piece) >= after:
            yield piece[: max(0, after - sent)]
            break
        sent += len(piece)
        yield piece
    raise _CutConnection("scripted server: connection cut on purpose")


def _error_response(
    status: int, message: str, *, type_: str | None = None, retry: bool | None = None
) -> JSONResponse:
    default_type = "invalid_request_error" if 400 <= status < 500 else "server_error"
    headers = {} if retry is None else {"x-should-retry": "true" if retry else "false"}
    body = {
        "error": {
            "message": message,
            "type": type_ or default_type,
            "param": None,
            "code": None,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


# --------------------------------------------------------------------------- server


class ScriptedOpenAIServer:
    """An OpenAI-compatible HTTP server on 127.0.0.1 whose answers come from a responder.

    Serves `POST /v1/chat/completions` (JSON or SSE) and `GET /v1/models`; any other
    path answers 404 with an OpenAI error body. Every chat request is recorded.

    Args:
        responder: `(ChatRequest) -> Reply` (sync or async; a str means text). May be
            swapped later through the `responder` attribute.
        model_ids: Model ids listed by `GET /v1/models`.
        startup_timeout: Seconds to wait for the port to answer in `start()`.
        shutdown_grace: Seconds uvicorn waits for in-flight responses in `stop()`.
        loop_factory: Makes the server thread's event loop (default: asyncio's);
            benchmarks pass `uvloop.new_event_loop` to keep the model's own CPU low.
        embedder: `(text) -> vector`, which serves `POST /v1/embeddings` (float or
            base64 `encoding_format`, as the `openai` SDK asks); None: that path is
            not served. Each request's inputs are recorded (`embedding_inputs`).
    """

    def __init__(
        self,
        responder: Responder,
        *,
        model_ids: Sequence[str] = (_DEFAULT_MODEL,),
        startup_timeout: float = 10.0,
        shutdown_grace: float = 2.0,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
        embedder: Callable[[str], list[float]] | None = None,
    ) -> None:
        self.responder: Responder = responder
        self.embedder = embedder
        self._embedding_inputs: list[list[str]] = []
        self.loop_factory = loop_factory
        self.model_ids = tuple(model_ids)
        self.startup_timeout = startup_timeout
        self.shutdown_grace = shutdown_grace
        self._lock = threading.Lock()
        self._requests: list[ChatRequest] = []
        self._errors: list[str] = []
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._port: int | None = None

    # -- recording ---------------------------------------------------------------------

    @property
    def requests(self) -> list[ChatRequest]:
        """A snapshot of all chat requests received, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def call_count(self) -> int:
        """Number of chat requests received."""
        with self._lock:
            return len(self._requests)

    @property
    def last_request(self) -> ChatRequest:
        """The most recent chat request (AssertionError if none arrived)."""
        with self._lock:
            assert self._requests, "the scripted server received no chat requests"
            return self._requests[-1]

    @property
    def errors(self) -> list[str]:
        """Messages of responder exceptions and unknown routes (each answered with an error)."""
        with self._lock:
            return list(self._errors)

    @property
    def embedding_inputs(self) -> list[list[str]]:
        """The texts of each `POST /v1/embeddings` received, in arrival order."""
        with self._lock:
            return [list(texts) for texts in self._embedding_inputs]

    def reset(self) -> None:
        """Forget recorded requests and errors."""
        with self._lock:
            self._requests.clear()
            self._errors.clear()
            self._embedding_inputs.clear()

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> ChatRequest:
        with self._lock:
            req = ChatRequest(body=body, index=len(self._requests), headers=headers)
            self._requests.append(req)
            return req

    def _record_error(self, message: str) -> None:
        with self._lock:
            self._errors.append(message)

    # -- addresses / clients -------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port (after `start()`)."""
        if self._port is None:
            raise RuntimeError("ScriptedOpenAIServer is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, for `ChatOpenAI(base_url=...)`."""
        return f"http://{_HOST}:{self.port}/v1"

    def chat_model(self, **kwargs: Any) -> ChatOpenAI:
        """Return a real `ChatOpenAI` aimed at this server.

        Defaults: `model="scripted"`, `api_key="test"`, `max_retries=0`, `timeout=10`;
        any keyword overrides them.
        """
        from langchain_openai import ChatOpenAI

        params: dict[str, Any] = {
            "model": _DEFAULT_MODEL,
            "api_key": "test",
            "max_retries": 0,
            "timeout": 10.0,
            **kwargs,
        }
        params["base_url"] = self.base_url
        return ChatOpenAI(**params)

    # -- HTTP app --------------------------------------------------------------------------

    def _build_app(self) -> Starlette:
        routes = [
            Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            Route(
                "/{path:path}",
                self._not_found,
                methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            ),
        ]
        return Starlette(routes=routes)

    async def _models(self, _request: Request) -> Response:
        data = [
            {"id": mid, "object": "model", "created": 0, "owned_by": "scripted"}
            for mid in self.model_ids
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _embeddings(self, request: Request) -> Response:
        """Answer `POST /v1/embeddings` with the embedder's vectors (404 without one)."""
        if self.embedder is None:
            return await self._not_found(request)
        body = await request.json()
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else list(raw or [])
        if not all(isinstance(text, str) for text in texts):
            return _error_response(400, "scripted server: input must be text", retry=False)
        with self._lock:
            self._embedding_inputs.append(texts)
        data = []
        for index, text in enumerate(texts):
            vector = [float(x) for x in self.embedder(text)]
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                packed = struct.pack(f"<{len(vector)}f", *vector)
                embedding = base64.b64encode(packed).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(_estimate_tokens(text) for text in texts)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", _DEFAULT_MODEL),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _not_found(self, request: Request) -> Response:
        msg = f"scripted server: no route for {request.method} {request.url.path}"
        self._record_error(msg)
        return _error_response(404, msg, retry=False)

    async def _chat_completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError as exc:
            return _error_response(400, f"invalid JSON body: {exc}", retry=False)
        if not isinstance(body, dict):
            return _error_response(400, "request body must be a JSON object", retry=False)
        req = self._record(body, {k.lower(): v for k, v in request.headers.items()})

        try:
            reply = await self._call_responder(req)
        except Exception as exc:
            # Fail loudly (and without SDK retries) instead of hanging the test.
            tb = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            msg = f"scripted responder raised on request #{req.index}: {tb}"
            logger.error("%s\n%s", msg, traceback.format_exc())
            self._record_error(msg)
            return _error_response(500, msg, retry=False)

        if reply.delay_s > 0 and not await self._sleep(reply.delay_s):
            return _error_response(503, "scripted server is shutting down", retry=False)
        if reply.is_error:
            return _error_response(
                reply.status,
                reply.error_message or f"scripted error {reply.status}",
                type_=reply.error_type,
                retry=reply.should_retry,
            )

        completion_id = f"chatcmpl-scripted-{next(self._ids)}"
        if reply.garbage:
            if req.stream:
                return Response(
                    b'data: {"id": "chatcmpl-garbage", "choices": [{"del\n\n',
                    media_type="text/event-stream",
                )
            return Response(
                b'{"id": "chatcmpl-garbage", "choices": [{"mess', media_type="application/json"
            )
        if not req.stream:
            whole = JSONResponse(_completion_body(req, reply, completion_id))
            if reply.cut_after is None:
                return whole
            return StreamingResponse(
                _cut(_once(bytes(whole.body)), reply.cut_after),
                media_type="application/json",
                headers={"content-length": str(len(whole.body))},
            )
        chunks = _stream_chunks(req, reply, completion_id)
        stream = self._sse(chunks, reply.chunk_delay_s)
        if reply.cut_after is not None:
            stream = _cut(stream, reply.cut_after)
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    async def _call_responder(self, req: ChatRequest) -> Reply:
        result: Any = self.responder(req)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return Reply.text(result)
        if not isinstance(result, Reply):
            raise TypeError(f"responder must return Reply or str, got {type(result).__name__}")
        return result

    async def _sse(self, chunks: list[dict[str, Any]], chunk_delay: float) -> AsyncIterator[bytes]:
        for i, payload in enumerate(chunks):
            if i and chunk_delay > 0 and not await self._sleep(chunk_delay):
                return
            yield f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def _sleep(self, seconds: float) -> bool:
        """Sleep on the server loop; return False if the server began stopping meanwhile."""
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            return True
        return False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind a free loopback port, serve in a daemon thread, and wait until it answers."""
        if self._thread is not None:
            raise RuntimeError("ScriptedOpenAIServer already started")
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only for a
        # socket whose `proto` says TCP. Without it, the second write of a response waits
        # for the client's delayed ACK (~40 ms on every reused keep-alive connection).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((_HOST, 0))  # the OS picks a free port; no probe-then-bind race
        self._port = sock.getsockname()[1]

        config = uvicorn.Config(
            self._build_app(),
            lifespan="off",
            log_config=None,  # leave the test process's logging configuration alone
            log_level="warning",
            access_log=False,
            ws="none",
            # uvicorn closes an idle keep-alive connection after 5 s by default; a
            # loaded client reusing it just then gets a reset (ReadError) that no
            # real provider's long keep-alive would cause, failing runs with retries off.
            timeout_keep_alive=300,
            timeout_graceful_shutdown=math.ceil(self.shutdown_grace),
        )
        server = uvicorn.Server(config)
        self._server = server

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._stopping = asyncio.Event()
                await server.serve(sockets=[sock])

            with asyncio.Runner(loop_factory=self.loop_factory) as runner:
                runner.run(main())

        self._thread = threading.Thread(
            target=run, name=f"scripted-openai-{self._port}", daemon=True
        )
        self._thread.start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            sock.close()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._server is not None and self._thread is not None
        deadline = time.monotonic() + self.startup_timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("scripted OpenAI server thread died during startup")
            if time.monotonic() > deadline:
                raise TimeoutError("scripted OpenAI server did not start in time")
            time.sleep(0.005)
        # `started` is set once listening; still prove the port answers HTTP.
        while True:
            conn = http.client.HTTPConnection(_HOST, self.port, timeout=1.0)
            try:
                conn.request("GET", "/v1/models")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise TimeoutError("scripted OpenAI server did not answer GET /v1/models")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving: abort pending delays, let uvicorn exit, and join the thread."""
        server, thread, loop = self._server, self._thread, self._loop
        if server is None or thread is None:
            return
        if loop is not None and self._stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed in between
                loop.call_soon_threadsafe(self._stopping.set)
        server.should_exit = True
        thread.join(timeout=self.shutdown_grace + 5.0)
        if thread.is_alive():
            server.force_exit = True
            thread.join(timeout=5.0)
        self._server = self._thread = self._loop = self._stopping = None
        if thread.is_alive():
            raise RuntimeError("scripted OpenAI server thread did not stop")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def delayed(responder: Responder, seconds: float) -> Callable[[ChatRequest], Awaitable[Reply]]:
    """Wrap `responder` so that every answer comes `seconds` later than it says (a slow model).

    Delays a reply already asks for (`Reply.delay`) add up with this one.
    """

    async def respond(req: ChatRequest) -> Reply:
        result: Any = responder(req)
        if inspect.isawaitable(result):
            result = await result
        reply = Reply.text(result) if isinstance(result, str) else result
        return dataclasses.replace(reply, delay_s=reply.delay_s + seconds)

    return respond


@contextlib.contextmanager
def scripted_openai_server(responder: Responder, **kwargs: Any) -> Iterator[ScriptedOpenAIServer]:
    """Plain context manager: start a `ScriptedOpenAIServer`, yield it, stop it.

    Args:
        responder: See `ScriptedOpenAIServer`.
        **kwargs: Passed to `ScriptedOpenAIServer`.
    """
    with ScriptedOpenAIServer(responder, **kwargs) as srv:
        yield srv


@pytest.fixture
def scripted_server() -> Iterator[Callable[..., ScriptedOpenAIServer]]:
    """Pytest fixture: a factory `scripted_server(responder, **kw)` returning a started server.

    Every server made through it is stopped at teardown. Import it into a test module
    (or a conftest) with `from tests.support.scripted_openai import scripted_server`.
    """
    servers: list[ScriptedOpenAIServer] = []

    def make(responder: Responder, **kwargs: Any) -> ScriptedOpenAIServer:
        srv = ScriptedOpenAIServer(responder, **kwargs).start()
        servers.append(srv)
        return srv

    yield make
    for srv in reversed(servers):
        srv.stop()


# --------------------------------------------------------------------------- routing


Action: TypeAlias = Reply | str | Responder
"""One scripted answer: a fixed `Reply`/str, or a responder called with the request."""


@dataclass
class _Rule:
    label: str
    match: Callable[[ChatRequest], bool]
    single: Action | None = None
    queue: deque[Action] | None = None

    @property
    def exhausted(self) -> bool:
        return self.queue is not None and not self.queue


class ScriptedResponder:
    """A responder that routes requests to scripted answers; first matching rule wins.

    Each rule's action is one of:

    * a `Reply` (or str) — answered every time the rule matches;
    * a callable `(ChatRequest) -> Reply | str` (sync or async) — called every time;
    * a list/tuple of the above — a queue consumed one per match; an exhausted queue
      stops matching, so later rules (or the fallback) see the request.

    A request no rule matches gets HTTP 500 with `x-should-retry: false` and a message
    naming what was unscripted, so a test fails loudly instead of hanging or retrying.
    The object is itself a `Responder`: pass it to `ScriptedOpenAIServer`.
    """

    def __init__(self) -> None:
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self.unmatched: list[ChatRequest] = []

    def on(
        self,
        predicate: Callable[[ChatRequest], bool],
        action: Action | Sequence[Action],
        *,
        label: str = "",
    ) -> Self:
        """Add a rule for any predicate over the request."""
        rule = _Rule(label=label or getattr(predicate, "__name__", "predicate"), match=predicate)
        if isinstance(action, list | tuple):
            rule.queue = deque(action)
        else:
            rule.single = cast(Action, action)
        self._rules.append(rule)
        return self

    def on_tool(self, name: str, action: Action | Sequence[Action]) -> Self:
        """Match when `tool_choice` forces `name`, or nothing is forced and `name` is bound."""

        def match(req: ChatRequest) -> bool:
            forced = req.forced_tool
            return forced == name if forced is not None else name in req.tools

        return self.on(match, action, label=f"on_tool({name!r})")

    def on_forced_tool(self, name: str, action: Action | Sequence[Action]) -> Self:
        """Match only when `tool_choice` forces function `name` (e.g. structured output)."""
        return self.on(lambda r: r.forced_tool == name, action, label=f"on_forced_tool({name!r})")

    def on_system(self, substring: str, action: Action | Sequence[Action]) -> Self:
        """Match when the system/developer prompt contains `substring`."""
        return self.on(
            lambda r: substring in r.system_text, action, label=f"on_system({substring!r})"
        )

    def on_text(self, action: Action | Sequence[Action]) -> Self:
        """Match plain chat requests: no tools bound."""
        return self.on(lambda r: not r.tools, action, label="on_text()")

    def on_any(self, action: Action | Sequence[Action]) -> Self:
        """Match every request (a catch-all; register it last)."""
        return self.on(lambda _r: True, action, label="on_any()")

    async def __call__(self, req: ChatRequest) -> Reply:
        """Answer `req` from the first matching rule, or a loud 500 if none matches."""
        chosen: Action | None = None
        with self._lock:
            for rule in self._rules:
                if rule.exhausted or not rule.match(req):
                    continue
                chosen = rule.queue.popleft() if rule.queue is not None else rule.single
                break
            else:
                self.unmatched.append(req)
                exhausted = [r.label for r in self._rules if r.exhausted]
        if chosen is None:
            return self._unscripted(req, exhausted)
        result: Any = chosen(req) if callable(chosen) else chosen
        if inspect.isawaitable(result):
            result = await result
        return Reply.text(result) if isinstance(result, str) else result

    @staticmethod
    def _unscripted(req: ChatRequest, exhausted: list[str]) -> Reply:
        snippet = req.last_user_text[:120]
        msg = (
            f"ScriptedResponder: unscripted request #{req.index} "
            f"(model={req.model!r}, forced_tool={req.forced_tool!r}, tools={req.tools}, "
            f"stream={req.stream}, last_user_text={snippet!r}"
            + (f", exhausted queues={exhausted}" if exhausted else "")
            + ")"
        )
        logger.error(msg)
        return Reply.error(500, msg, retry=False)
