"""A post's image links load in a browser when API keys are on (providers/asset_links.py).

A real uvicorn serves `atelier` on the scripted model with `AUTH_API_KEYS` set; the
official `langgraph-sdk` client runs a post with the key, then the image links of
its message are fetched with no key at all, as an `<img>` would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from langgraph_sdk import get_client

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, service_settings
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = pytest.mark.slow

KEY = "signed-links-key-0123456789"
REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with ScriptedOpenAIServer(atelier_responder()) as llm:
        settings = service_settings(
            tmp_path_factory.mktemp("data"), llm.base_url, auth_api_keys=[KEY]
        )
        with LiveServer(settings, None) as live:
            yield live


async def test_the_post_messages_image_links_load_without_a_key(server: LiveServer) -> None:
    client = get_client(url=server.url, headers={"X-Api-Key": KEY})
    thread = await client.threads.create()
    values = await client.runs.wait(
        thread["thread_id"], "atelier", input={"messages": [{"type": "human", "content": REQUEST}]}
    )
    assert isinstance(values, dict) and values["result"]["outcome"] == "completed"
    post = values["messages"][-1]["content"]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", post)
    assert links and all(link.startswith(f"{server.url}/assets/") for link in links)

    async with httpx.AsyncClient(timeout=30) as browser:  # no key, as an <img>
        for link in links:
            image = await browser.get(link)
            assert image.status_code == 200 and image.headers["content-type"].startswith("image/")
            assert (await browser.get(link.split("?")[0])).status_code == 401
        # Reopening the thread later shows the same links, and they still load.
        state = await client.threads.get_state(thread["thread_id"])
        assert state["values"]["messages"][-1]["content"] == post
        assert (await browser.get(links[0])).status_code == 200
