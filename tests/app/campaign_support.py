"""What the campaign tests talk to: a scripted model for campaigns and a recording publisher.

`CampaignLLM` answers the real `atelier` pipeline's normal path (`tests.app.atelier_llm`)
and the campaign planner's forced `CampaignTopics` call: its first answer repeats a
topic (so the planner rejects it and asks again), its second answer fills the gap.
Its writer can be told to put 最 in every title (`zui_titles`).

`PublishingServer` is an MCP server built with the `mcp` SDK's own server
(`MCPServer`, Streamable HTTP, on 127.0.0.1 in a thread) with one tool named and
shaped like xiaohongshu-mcp's `publish_content(title, content, images, tags)`; it
records every call (and when it came) and can fail its first calls on purpose.
`WebhookReceiver` records signed webhook POSTs and can fail its first ones too.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.app.atelier_llm import atelier_responder
from tests.support.fake_models import HAPPY_BODY
from tests.support.scripted_openai import ChatRequest, Reply

#: Six distinct topics (topic, angle) and a near-duplicate of the first.
TOPICS: list[tuple[str, str]] = [
    ("平价洁面怎么选", "氨基酸成分解析"),
    ("宿舍干燥季保湿", "学生党实测清单"),
    ("防晒霜用量误区", "通勤场景讲清楚"),
    ("换季敏感肌急救", "屏障修护思路"),
    ("看懂成分表", "前五位决定功效"),
    ("夜间护肤顺序", "精简三步不踩雷"),
]
DUPLICATE = ("平价洁面怎么选", "氨基酸成分解析攻略")
#: Where a campaign's writing request names its topic (`graphs.campaigns.write_input`).
TOPIC_IN_REQUEST = re.compile(r"选题：([^\s\\\"，,]+)")


def topic_reply(topics: list[tuple[str, str]], first_platform: str = "xiaohongshu") -> Reply:
    """Return a `CampaignTopics` tool call answering `topics`."""
    items = [
        {
            "topic": topic,
            "angle": angle,
            "key_points": [f"{topic}的要点一", f"{topic}的要点二"],
            "first_platform": first_platform,
        }
        for topic, angle in topics
    ]
    return Reply.tool_call("CampaignTopics", {"items": items})


class CampaignLLM:
    """A responder for campaigns over the real pipeline (see the module docstring)."""

    def __init__(self) -> None:
        self.atelier = atelier_responder()
        self.zui_titles = False
        self.planner_calls = 0

    def planner(self, req: ChatRequest) -> Reply:
        """Answer the planner: a duplicate first, then what is missing (round by round)."""
        self.planner_calls += 1
        wanted = int(_count(req.last_user_text) or len(TOPICS))
        asked = req.last_user_text
        if "未采用的回答" not in asked and wanted >= 2:  # the first round: one repeats
            return topic_reply([*TOPICS[: wanted - 1], DUPLICATE])
        fresh = [t for t in TOPICS if t[0] not in asked] or [("补充选题", f"角度{uuid.uuid4()}")]
        return topic_reply(fresh[:wanted])

    def writer(self, req: ChatRequest) -> Reply:
        """Write the post of the topic the request names; an adaptation says which it is."""
        found = TOPIC_IN_REQUEST.search(req.all_text)
        topic = found.group(1) if found else "平价护肤"
        title = f"最好用的{topic}" if self.zui_titles else f"{topic}笔记"
        version = "【微博版】" if "改编成微博" in req.all_text else ""
        text = f"# {title}\n\n{version}{HAPPY_BODY}\n\n#平价护肤 #学生党 #护肤成分"
        return Reply.text(text, chunk_chars=16)

    def __call__(self, req: ChatRequest) -> Reply:
        if req.forced_tool == "CampaignTopics":
            return self.planner(req)
        if not req.tools:
            return self.writer(req)
        return self.atelier(req)


def _count(text: str) -> int | None:
    """Return the number of topics a planner's request asks for ("请规划 N 个选题")."""
    marker = "请规划 "
    if marker not in text:
        return None
    digits = text.split(marker, 1)[1].split(" ", 1)[0]
    return int(digits) if digits.isdigit() else None


def writer_prompts(requests: list[ChatRequest]) -> list[str]:
    """Return the writer's prompts (the requests that bind no tool) of a scripted model."""
    return [r.all_text for r in requests if not r.tools]


# -- a server on loopback ------------------------------------------------------------------


class _Served:
    """An ASGI app on uvicorn in a thread, on a free loopback port."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_config=None, log_level="warning", lifespan="on")
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: server.run(sockets=[sock]), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)


@dataclass
class PublishCall:
    """One `publish_content` call the MCP server received."""

    title: str
    content: str
    images: list[str]
    tags: list[str]
    at: float


@dataclass
class PublishingServer:
    """A loopback MCP server with xiaohongshu-mcp's `publish_content` (module docstring)."""

    fail_first: int = 0
    calls: list[PublishCall] = field(default_factory=list)
    attempts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        server = MCPServer("publisher")

        @server.tool()
        def publish_content(
            title: str, content: str, images: list[str], tags: list[str] | None = None
        ) -> dict[str, Any]:
            """Publish a note: title ≤ 20 characters, content ≤ 1,000, 1–9 images."""
            with self._lock:
                self.attempts += 1
                if self.attempts <= self.fail_first:
                    raise ToolError("the platform is busy, try later")
                self.calls.append(
                    PublishCall(title, content, list(images), list(tags or []), time.time())
                )
                return {"note_id": f"note-{len(self.calls)}", "status": "published"}

        self._served = _Served(server.streamable_http_app(stateless_http=True, json_response=True))

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://127.0.0.1:{self._served.port}/mcp"

    def __enter__(self) -> PublishingServer:
        self._served.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._served.stop()

    def reset(self, fail_first: int = 0) -> None:
        """Forget the calls; fail the next `fail_first` ones."""
        with self._lock:
            self.calls.clear()
            self.attempts = 0
            self.fail_first = fail_first


@dataclass
class Delivery:
    """One webhook POST the receiver got."""

    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    """A loopback webhook receiver that records each POST and can fail the first ones."""

    fail_first: int = 0
    received: list[Delivery] = field(default_factory=list)

    def __post_init__(self) -> None:
        async def hook(request: Request) -> Response:
            delivery = Delivery(dict(request.headers), await request.body(), time.time())
            self.received.append(delivery)
            if len(self.received) <= self.fail_first:
                return JSONResponse({"error": "busy"}, status_code=503)
            return JSONResponse({"ok": True})

        self._served = _Served(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))

    @property
    def url(self) -> str:
        """The receiver's URL."""
        return f"http://127.0.0.1:{self._served.port}/hook"

    def __enter__(self) -> WebhookReceiver:
        self._served.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._served.stop()

    def reset(self, fail_first: int = 0) -> None:
        """Forget the deliveries; fail the next `fail_first` ones."""
        self.received.clear()
        self.fail_first = fail_first


class MovingClock:
    """A clock running with real time from a point the test moves (`jump`, `to`)."""

    def __init__(self, start: Any) -> None:
        self._offset = start - _utcnow()

    def __call__(self) -> Any:
        return _utcnow() + self._offset

    def to(self, moment: Any) -> None:
        """Make it `moment` now (and running on from there)."""
        self._offset = moment - _utcnow()


def _utcnow() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


@contextlib.contextmanager
def serving(*servers: Any) -> Iterator[None]:
    """Start every server for the block."""
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.enter_context(server)
        yield


def wait_for(predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.2) -> Any:
    """Return `predicate()`'s first truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(interval)
