"""A post's cards are drawn at once, at most the provider's bound at a time.

The images API is a fake on loopback (the scripted OpenAI server with an
`/v1/images/generations` route) that holds each request a moment and records
how many were in flight together; the real `OpenAIImageProvider` talks to it
over HTTP. The local renderer's bound is observed in its worker threads.
"""

from __future__ import annotations

import asyncio
import base64
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentkit.services import image_providers
from core.settings import Settings
from providers.images import (
    GeneratedImage,
    ImageRequest,
    LocalCardProvider,
    OpenAIImageProvider,
    build_image_provider,
)
from providers.images.gate import DrawGate, local_concurrency
from tests.graphs.team_runs import run_team
from tests.support.fake_models import FakeModels, fake_context, happy_team
from tests.support.scripted_openai import ScriptedOpenAIServer

HOLD_S = 0.3


def _png_b64() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 96), (200, 120, 90)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


class ImagesApi(ScriptedOpenAIServer):
    """The scripted server plus an images endpoint that records overlapping requests."""

    def __init__(self) -> None:
        super().__init__(lambda _req: "unused")
        self.in_flight = 0
        self.most_in_flight = 0
        self.prompts: list[str] = []
        self._png = _png_b64()

    def _build_app(self) -> Starlette:
        app = super()._build_app()
        app.router.routes.insert(0, Route("/v1/images/generations", self._images, methods=["POST"]))
        return app

    async def _images(self, request: Request) -> Response:
        body = await request.json()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.prompts.append(body["prompt"])
        try:
            await asyncio.sleep(HOLD_S)
        finally:
            self.in_flight -= 1
        return JSONResponse({"created": 0, "data": [{"b64_json": self._png}]})


@pytest.fixture
def images_api() -> Iterator[ImagesApi]:
    with ImagesApi() as api:
        yield api


def _request(slot: int) -> ImageRequest:
    kind = "cover" if slot == 1 else "content"
    return ImageRequest.model_validate(
        {"slot": slot, "kind": kind, "title": f"第{slot}张", "text": "要点", "prompt": f"p{slot}"}
    )


def _remote(api: ImagesApi, concurrency: int) -> OpenAIImageProvider:
    return OpenAIImageProvider(api.base_url, "sk-test", concurrency=concurrency, max_retries=0)


async def test_the_images_api_gets_the_requests_together_up_to_the_bound(
    images_api: ImagesApi,
) -> None:
    provider = _remote(images_api, concurrency=2)
    results = await asyncio.gather(*(provider.generate(_request(n)) for n in range(1, 7)))
    assert len(results) == 6
    # Two at a time: together (not one after another), never more than the bound.
    assert images_api.most_in_flight == 2


async def test_an_unbounded_enough_provider_sends_every_card_at_once(
    images_api: ImagesApi,
) -> None:
    provider = _remote(images_api, concurrency=6)
    await asyncio.gather(*(provider.generate(_request(n)) for n in range(1, 7)))
    assert images_api.most_in_flight == 6


async def test_a_post_s_cards_are_drawn_at_once_over_the_images_api(
    images_api: ImagesApi, tmp_path: Path
) -> None:
    models = FakeModels(happy_team(4))
    ctx = fake_context(models, tmp_path, image_providers={"openai": _remote(images_api, 3)})
    run = await run_team(models, tmp_path, ctx=ctx, image_count=4, image_provider="openai")
    assert len(run.state["images"]) == 4
    assert len(images_api.prompts) == 4
    assert images_api.most_in_flight == 3


class CountingCards(LocalCardProvider):
    """The local renderer, counting the renders running together in worker threads."""

    def __init__(self, concurrency: int = 0) -> None:
        super().__init__(concurrency=concurrency)
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def render_png(self, req: ImageRequest) -> GeneratedImage:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.1)
            return super().render_png(req)
        finally:
            with self.lock:
                self.running -= 1


async def test_local_cards_render_together_up_to_their_bound() -> None:
    cards = CountingCards(concurrency=2)
    await asyncio.gather(*(cards.generate(_request(n)) for n in range(1, 6)))
    assert cards.most == 2


async def test_a_post_s_local_cards_are_drawn_together(tmp_path: Path) -> None:
    cards = CountingCards(concurrency=3)
    models = FakeModels(happy_team(3))
    ctx = fake_context(models, tmp_path, image_providers={"local": cards})
    run = await run_team(models, tmp_path, ctx=ctx, image_count=3)
    assert len(run.state["images"]) == 3
    assert cards.most == 3


def test_the_bounds_come_from_the_settings_and_the_cores() -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        image_api_base_url="https://images.test/v1",
        image_api_key="sk-test",
        image_concurrency=7,
    )
    providers = image_providers(settings)
    remote = providers["openai"]
    assert isinstance(remote, OpenAIImageProvider)
    assert remote.gate.limit == 7
    local = providers["local"]
    assert isinstance(local, LocalCardProvider)
    assert local.gate.limit == local_concurrency() >= 1
    assert build_image_provider("local", local_concurrency=2).gate.limit == 2  # type: ignore[attr-defined]


def test_a_gate_needs_room_for_one_draw() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        DrawGate(0)


def test_one_gate_serves_several_event_loops() -> None:
    gate = DrawGate(1)

    async def use() -> None:
        async with gate.slot():
            await asyncio.sleep(0)

    asyncio.run(use())
    asyncio.run(use())
