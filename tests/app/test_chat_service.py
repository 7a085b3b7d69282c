"""Chat input over HTTP (PRODUCT.md §7 "Conversation"): what the engine's preparation does.

A real uvicorn serves the default assistants (`atelier`, `team`) on the scripted
model; the official `langgraph-sdk` client sends what chat clients send. The
useStream flows on every deployment are in `tests/app/test_js_sdk.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, service_settings
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = pytest.mark.slow

VAGUE = {"messages": [{"id": "h-1", "type": "human", "content": "写一篇笔记"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with ScriptedOpenAIServer(atelier_responder()) as llm:
        settings = service_settings(tmp_path_factory.mktemp("data"), llm.base_url)
        with LiveServer(settings, None) as live:
            yield live


async def asked(client: Any) -> str:
    """Start a vague chat message on a new thread; return the thread, paused at the question."""
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], "atelier", input=VAGUE)
    state = await client.threads.get_state(thread["thread_id"])
    assert state["next"] == ["planner"] and state["tasks"][0]["interrupts"]
    return str(thread["thread_id"])


async def test_every_declared_graph_is_served_and_team_takes_chat_input(server: LiveServer) -> None:
    client = get_client(url=server.url)
    found = await client.assistants.search()
    assert sorted(a["assistant_id"] for a in found) == ["atelier", "campaign_planner", "team"]
    values = await client.runs.wait(
        None,
        "team",
        input={"messages": [{"id": "t-1", "type": "human", "content": "写一篇平价护肤笔记"}]},
    )
    assert isinstance(values, dict)
    human, *rest = values["messages"]
    assert human["id"] == "t-1" and rest and rest[-1]["type"] == "ai"
    # The last AI message is the finished post, not the writer's draft: title, body,
    # tags and the images as links that load.
    content, finished = values["generated_content"], rest[-1]["content"]
    assert finished.startswith(f"**{content['title']}**")
    assert content["body"].strip() in finished
    assert all(f"#{tag}" in finished for tag in content["tags"])
    assert values["images"]
    async with httpx.AsyncClient(timeout=30) as http:
        for image in values["images"]:
            url = f"{server.url}/assets/{image['asset_id']}"
            assert f"]({url})" in finished
            assert (await http.get(url)).status_code == 200


def test_a_message_without_human_text_is_refused_at_input_messages(server: LiveServer) -> None:
    response = httpx.post(
        f"{server.url}/runs/wait",
        json={"assistant_id": "atelier", "input": {"messages": [{"type": "ai", "content": "x"}]}},
    )
    assert response.status_code == 422
    assert "input.messages" in response.text


async def test_a_message_on_a_waiting_thread_answers_the_question(server: LiveServer) -> None:
    client = get_client(url=server.url)
    tid = await asked(client)
    answer = {"id": "h-2", "type": "human", "content": "写给大学新生"}
    values = await client.runs.wait(tid, "atelier", input={"messages": [answer]})
    assert isinstance(values, dict)
    assert values["clarification"] == {"choice": "details", "details": "写给大学新生"}
    assert [m["id"] for m in values["messages"]][::2] == ["h-1", "h-2"]
    assert [m["type"] for m in values["messages"]] == ["human", "ai", "human", "ai"]
    assert values["result"]["outcome"] == "completed"
    thread = await client.threads.get(tid)
    assert thread["metadata"]["title"] == "写一篇笔记"
    assert thread["metadata"]["graph_id"] == "atelier"


@pytest.mark.parametrize(
    "command",
    [
        {"resume": {"decisions": [{"type": "reject"}]}},
        {"goto": "__end__"},
    ],
)
async def test_reject_or_goto_end_ends_the_run_as_needs_clarification(
    server: LiveServer, command: dict[str, Any]
) -> None:
    client = get_client(url=server.url)
    tid = await asked(client)
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{server.url}/threads/{tid}/runs/wait",
            json={"assistant_id": "atelier", "input": {}, "command": command},
        )
    assert response.status_code == 200, response.text
    assert response.json()["result"]["outcome"] == "needs_clarification"


async def test_post_images_link_to_the_address_the_client_called(server: LiveServer) -> None:
    client = get_client(url=server.url)
    values = await client.runs.wait(
        None, "atelier", input={"request": "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"}
    )
    assert isinstance(values, dict)
    post = values["messages"][-1]["content"]
    url = f"{server.url}/assets/{values['result']['images'][0]['asset_id']}"
    assert f"]({url})" in post
    async with httpx.AsyncClient() as http:
        assert (await http.get(url)).status_code == 200


# --- the request as the thread's first human message (issue 32) ---------------------

CLEAR = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


async def run_on(client: Any, thread_id: str, assistant: str = "atelier", **kwargs: Any) -> str:
    """Start a run on a thread, wait for it to end, and return its id."""
    run = await client.runs.create(thread_id, assistant, **kwargs)
    await client.runs.join(thread_id, run["run_id"])
    return str(run["run_id"])


def turns(values: dict[str, Any]) -> list[tuple[str, str]]:
    """Return (type, id) of each message of a thread's values."""
    return [(m["type"], m["id"]) for m in values["messages"]]


async def test_a_thread_started_with_a_request_shows_each_request_before_its_answer(
    server: LiveServer,
) -> None:
    client = get_client(url=server.url)
    tid = (await client.threads.create())["thread_id"]
    first = await run_on(client, tid, input={"request": CLEAR, "auto_confirm": True})
    values = (await client.threads.get_state(tid))["values"]
    asked = values["messages"][0]
    assert asked["type"] == "human" and asked["content"] == CLEAR
    assert asked["id"] == f"request-{first}"  # one per run, named after it
    assert turns(values)[1][0] == "ai" and len(values["messages"]) == 2

    # A revision on the same thread: its request, then its post, after the first turn.
    second = await run_on(client, tid, input={"request": "标题短一点", "auto_confirm": True})
    values = (await client.threads.get_state(tid))["values"]
    assert [t for t, _ in turns(values)] == ["human", "ai", "human", "ai"]
    assert values["messages"][0] == asked
    assert values["messages"][2]["id"] == f"request-{second}"
    assert values["messages"][2]["content"] == "标题短一点"
    assert values["result"]["outcome"] == "completed"

    # A thread started with no thread of its own (`runs.wait(None, …)`) shows it too.
    done = await client.runs.wait(None, "atelier", input={"request": CLEAR, "auto_confirm": True})
    assert isinstance(done, dict)
    assert done["messages"][0]["type"] == "human" and done["messages"][0]["content"] == CLEAR


async def test_a_request_started_question_is_answered_with_no_second_request(
    server: LiveServer,
) -> None:
    client = get_client(url=server.url)
    for answer in (
        {"command": {"resume": {"decisions": [{"type": "approve"}]}}},
        {"input": {"messages": [{"id": "h-3", "type": "human", "content": "写给大学新生"}]}},
    ):
        tid = (await client.threads.create())["thread_id"]
        await run_on(client, tid, input={"request": "写一篇笔记"})
        asked = (await client.threads.get_state(tid))["values"]["messages"]
        assert [m["type"] for m in asked] == ["human", "ai"]
        assert asked[0]["content"] == "写一篇笔记"
        await run_on(client, tid, **answer)
        values = (await client.threads.get_state(tid))["values"]
        assert values["messages"][:2] == asked and values["result"]["outcome"] == "completed"
        expected = ["human", "ai", "ai"] if "command" in answer else ["human", "ai", "human", "ai"]
        assert [m["type"] for m in values["messages"]] == expected
        if "input" in answer:
            assert values["messages"][2]["id"] == "h-3"  # the client's message, as sent


async def test_an_edit_or_a_redraw_adds_no_human_message(server: LiveServer) -> None:
    client = get_client(url=server.url)
    tid = (await client.threads.create())["thread_id"]
    await run_on(client, tid, input={"request": CLEAR, "auto_confirm": True, "image_count": 2})
    before = (await client.threads.get_state(tid))["values"]
    humans = [m for m in before["messages"] if m["type"] == "human"]
    assert [m["content"] for m in humans] == [CLEAR]

    edited = {"title": "改过的标题", "body": "重写的正文，讲清楚成分。" * 5, "tags": ["护肤"]}
    await client.threads.update_state(tid, {"generated_content": edited}, as_node="executor")
    await run_on(client, tid, input=None)
    after_edit = (await client.threads.get_state(tid))["values"]
    assert after_edit["result"]["revision"] == "edit"
    assert [m for m in after_edit["messages"] if m["type"] == "human"] == humans

    redraw = {"goto": "redraw_card", "update": {"redraw": {"slot": 2}}}
    await run_on(client, tid, command=redraw)
    after_redraw = (await client.threads.get_state(tid))["values"]
    assert after_redraw["result"]["revision"] == "card"
    assert [m for m in after_redraw["messages"] if m["type"] == "human"] == humans


async def test_the_team_on_its_own_shows_its_request(server: LiveServer) -> None:
    client = get_client(url=server.url)
    tid = (await client.threads.create())["thread_id"]
    run_id = await run_on(client, tid, "team", input={"request": CLEAR})
    values = (await client.threads.get_state(tid))["values"]
    asked, *rest = values["messages"]
    assert asked == {**asked, "type": "human", "content": CLEAR, "id": f"request-{run_id}"}
    assert [m["type"] for m in rest] == ["ai"]
