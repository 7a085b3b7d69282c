"""The rest of the LangGraph Platform dialect: Python `RemoteGraph`, runs from a checkpoint,
state updates and copies, history filters, subgraphs, and each run option the current
SDKs send — honoured with the Platform's meaning or refused by name.

The app serves the chat graph (tests/app/chat_graph.py) and the sample graphs on a
real uvicorn; the LLM is the scripted OpenAI server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import Command

from tests.app.chat_graph import chat_reply, dialect_assistants
from tests.app.harness import LiveServer, read_sse, service_settings, wait_until
from tests.support.scripted_openai import ScriptedOpenAIServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with ScriptedOpenAIServer(chat_reply) as llm:
        settings = service_settings(tmp_path_factory.mktemp("data"), llm.base_url)
        with LiveServer(settings, dialect_assistants) as live:
            yield live


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": text}]}


def new_thread(http: httpx.Client) -> str:
    return str(http.post("/threads", json={}).json()["thread_id"])


def wait_run(http: httpx.Client, thread_id: str, **body: Any) -> dict[str, Any]:
    response = http.post(f"/threads/{thread_id}/runs/wait", json={"assistant_id": "chat", **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


def texts(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"]]


def run_status(http: httpx.Client, thread_id: str) -> str:
    runs = http.get(f"/threads/{thread_id}/runs").json()
    return str(runs[0]["status"])


def refused(response: httpx.Response, field: str) -> str:
    assert response.status_code == 422, response.text
    locs = [item["loc"] for item in response.json()["detail"]]
    assert any(field in loc for loc in locs), locs
    return str(response.json()["detail"])


# --------------------------------------------------------------------------- RemoteGraph


def test_remote_graph_invoke_stream_state_history_and_update(server: LiveServer) -> None:
    remote = RemoteGraph("chat", url=server.url)
    config = {"configurable": {"thread_id": "remote-1"}}
    result = remote.invoke({"messages": [HumanMessage("hello")]}, config)
    assert [m["content"] for m in result["messages"]] == ["hello", "echo: hello"]

    updates = list(remote.stream({"messages": [HumanMessage("again")]}, config))
    assert updates[-1]["agent"]["messages"][0]["content"] == "echo: again"

    state = remote.get_state(config)
    assert [m["content"] for m in state.values["messages"]][-1] == "echo: again"
    assert state.next == ()
    head_id = state.config["configurable"]["checkpoint_id"]

    history = list(remote.get_state_history(config))
    assert history[0].config["configurable"]["checkpoint_id"] == head_id
    assert len(history) == 6  # two turns of input, __start__ and agent
    loops = list(remote.get_state_history(config, filter={"source": "loop"}))
    assert {h.metadata["source"] for h in loops} == {"loop"} and len(loops) == 4
    older = list(remote.get_state_history(config, before=history[1].config, limit=2))
    assert [h.config["configurable"]["checkpoint_id"] for h in older] == [
        h.config["configurable"]["checkpoint_id"] for h in history[2:4]
    ]
    past = remote.get_state(history[3].config)
    assert [m["content"] for m in past.values["messages"]] == ["hello", "echo: hello"]

    ai_id = state.values["messages"][-1]["id"]
    written = remote.update_state(
        config, {"messages": [AIMessage("edited by hand", id=ai_id)]}, as_node="agent"
    )
    assert written["configurable"]["thread_id"] == "remote-1"
    edited = remote.get_state(config)
    assert (
        edited.config["configurable"]["checkpoint_id"] == written["configurable"]["checkpoint_id"]
    )
    assert [m["content"] for m in edited.values["messages"]][-1] == "edited by hand"
    assert edited.metadata["source"] == "update"


def test_remote_graph_interrupt_then_resume_with_a_command(server: LiveServer) -> None:
    remote = RemoteGraph("chat", url=server.url)
    config = {"configurable": {"thread_id": "remote-ask"}}
    asked = remote.invoke({"messages": [HumanMessage("ASK about sunscreen")]}, config)
    assert asked["__interrupt__"][0]["value"]["type"] == "clarification"

    state = remote.get_state(config)
    assert state.next == ("agent",)
    assert state.interrupts[0].value["question"] == "Who is the post for?"
    assert state.tasks[0].interrupts[0].value["type"] == "clarification"

    result = remote.invoke(Command(resume="students"), config)
    assert result["messages"][-1]["content"] == "echo: ASK about sunscreen (answer: students)"
    after = remote.get_state(config)
    assert after.next == () and after.interrupts == ()


async def test_remote_graph_async_state_and_stream(server: LiveServer) -> None:
    remote = RemoteGraph("chat", url=server.url)
    config = {"configurable": {"thread_id": "remote-async"}}
    chunks = [c async for c in remote.astream(human("hi"), config, stream_mode="values")]
    assert texts(chunks[-1]) == ["hi", "echo: hi"]
    state = await remote.aget_state(config)
    assert texts(state.values) == ["hi", "echo: hi"]
    history = [s async for s in remote.aget_state_history(config, limit=2)]
    assert len(history) == 2
    written = await remote.aupdate_state(config, human("appended"), as_node="agent")
    assert (await remote.aget_state(config)).config["configurable"]["checkpoint_id"] == (
        written["configurable"]["checkpoint_id"]
    )


# --------------------------------------------------------------------------- checkpoints


def test_a_run_from_a_past_checkpoint_forks_the_thread(http: httpx.Client) -> None:
    tid = new_thread(http)
    wait_run(http, tid, input=human("one"))
    wait_run(http, tid, input=human("two"))
    history = http.post(f"/threads/{tid}/history", json={"limit": 50}).json()
    after_first = next(s for s in history if texts(s["values"]) == ["one", "echo: one"])
    fork_from = after_first["checkpoint"]

    # The SDKs' three ways to name it: checkpoint, checkpoint_id, config.configurable.
    for how in (
        {"checkpoint": fork_from},
        {"checkpoint_id": fork_from["checkpoint_id"]},
        {"config": {"configurable": {"checkpoint_id": fork_from["checkpoint_id"]}}},
    ):
        values = wait_run(http, tid, input=human("three"), **how)
        assert texts(values) == ["one", "echo: one", "three", "echo: three"], how
        head = http.get(f"/threads/{tid}/state").json()
        assert head["parent_checkpoint"]["checkpoint_id"] != fork_from["checkpoint_id"]
        assert texts(head["values"]) == texts(values)
    run = http.get(f"/threads/{tid}/runs").json()[0]
    assert run["kwargs"]["checkpoint"]["checkpoint_id"] == fork_from["checkpoint_id"]
    assert "checkpoint_id" not in run["kwargs"]["config"].get("configurable", {})


def test_an_unknown_checkpoint_is_a_404_naming_it(http: httpx.Client) -> None:
    tid = new_thread(http)
    wait_run(http, tid, input=human("one"))
    missing = "1f000000-0000-6000-8000-000000000000"
    response = http.post(
        f"/threads/{tid}/runs",
        json={"assistant_id": "chat", "input": human("x"), "checkpoint_id": missing},
    )
    assert response.status_code == 404 and missing in response.text
    state = http.post(
        f"/threads/{tid}/state/checkpoint", json={"checkpoint": {"checkpoint_id": missing}}
    )
    assert state.status_code == 404 and missing in state.text
    update = http.post(
        f"/threads/{tid}/state", json={"values": human("x"), "checkpoint_id": missing}
    )
    assert update.status_code == 404
    threadless = http.post(
        "/runs/wait", json={"assistant_id": "chat", "input": human("x"), "checkpoint_id": missing}
    )
    refused(threadless, "checkpoint")
    assert len(http.get(f"/threads/{tid}/runs").json()) == 1  # nothing recorded


def test_state_update_as_a_node_then_continue_from_it(http: httpx.Client) -> None:
    tid = new_thread(http)
    wait_run(http, tid, input=human("one"))
    # As if the human had just written: the agent runs next (a run without input continues).
    written = http.post(
        f"/threads/{tid}/state", json={"values": human("two"), "as_node": "__start__"}
    )
    assert written.status_code == 200, written.text
    state = http.get(f"/threads/{tid}/state").json()
    assert state["checkpoint"]["checkpoint_id"] == written.json()["checkpoint"]["checkpoint_id"]
    assert state["next"] == ["agent"]
    thread = http.get(f"/threads/{tid}").json()
    assert texts(thread["values"])[-1] == "two"
    values = wait_run(http, tid)  # no input: continue
    assert texts(values) == ["one", "echo: one", "two", "echo: two"]
    nothing_left = http.post(f"/threads/{tid}/runs", json={"assistant_id": "chat"})
    refused(nothing_left, "input")


def test_state_update_refusals(http: httpx.Client) -> None:
    fresh = new_thread(http)
    assert http.post(f"/threads/{fresh}/state", json={"values": human("x")}).status_code == 409
    tid = new_thread(http)
    wait_run(http, tid, input=human("one"))
    refused(
        http.post(f"/threads/{tid}/state", json={"values": human("x"), "as_node": "nope"}),
        "as_node",
    )
    refused(http.post(f"/threads/{tid}/state", json={"values": {"nope": 1}}), "values")
    refused(http.post(f"/threads/{tid}/state", json={"values": {}, "surprise": 1}), "surprise")
    http.post(
        f"/threads/{tid}/runs", json={"assistant_id": "chat", "input": human("SLOW CHAT 1 x")}
    )
    busy = http.post(f"/threads/{tid}/state", json={"values": human("x")})
    assert busy.status_code == 409 and "busy" in busy.text


def test_copy_keeps_a_pending_interrupt_resumable(http: httpx.Client) -> None:
    tid = new_thread(http)
    wait_run(http, tid, input=human("ASK about hats"))
    copy = http.post(f"/threads/{tid}/copy")
    assert copy.status_code == 200, copy.text
    cid = copy.json()["thread_id"]
    assert cid != tid and copy.json()["status"] == "interrupted"
    original = http.post(f"/threads/{tid}/history", json={"limit": 50}).json()
    copied = http.post(f"/threads/{cid}/history", json={"limit": 50}).json()
    assert [s["checkpoint"]["checkpoint_id"] for s in copied] == [
        s["checkpoint"]["checkpoint_id"] for s in original
    ]
    values = wait_run(http, cid, command={"resume": "kids"})
    assert texts(values)[-1] == "echo: ASK about hats (answer: kids)"
    assert http.get(f"/threads/{tid}").json()["status"] == "interrupted"  # the original waits


def test_subgraphs_of_an_assistant(http: httpx.Client) -> None:
    found = http.get("/assistants/studio/subgraphs").json()
    assert list(found) == ["executor"] and found["executor"]["graph_id"] == "studio"
    assert list(http.get("/assistants/studio/subgraphs/executor?recurse=true").json()) == [
        "executor"
    ]
    assert http.get("/assistants/chat/subgraphs").json() == {}
    assert http.get("/assistants/nope/subgraphs").status_code == 404


def test_state_of_a_subgraph_checkpoint_namespace(http: httpx.Client) -> None:
    tid = new_thread(http)
    response = http.post(
        f"/threads/{tid}/runs/wait",
        json={
            "assistant_id": "studio",
            "input": {"request": "x", "auto_confirm": True},
            "interrupt_before": ["finalize"],
        },
    )
    assert response.status_code == 200, response.text
    state = http.post(
        f"/threads/{tid}/state/checkpoint",
        json={"checkpoint": {"checkpoint_ns": ""}, "subgraphs": True},
    ).json()
    assert state["next"] == ["finalize"]
    history = http.post(
        f"/threads/{tid}/history", json={"checkpoint": {"checkpoint_ns": ""}, "limit": 50}
    ).json()
    assert all(s["checkpoint"]["checkpoint_ns"] == "" for s in history)


def test_count_threads_and_assistants(http: httpx.Client) -> None:
    tid = new_thread(http)
    http.patch(f"/threads/{tid}", json={"metadata": {"team": "counting"}})
    assert http.post("/threads/count", json={"metadata": {"team": "counting"}}).json() == 1
    assert http.post("/threads/count", json={"metadata": {"team": "nobody"}}).json() == 0
    idle = http.post("/threads/count", json={"status": "idle"}).json()
    assert idle >= 1 and http.post("/threads/count", json={}).json() >= idle
    refused(http.post("/threads/count", json={"values": {"x": 1}}), "values")
    assert http.post("/assistants/count", json={"graph_id": "chat"}).json() == 1
    assert http.post("/assistants/count", json={}).json() == 5


# --------------------------------------------------------------------------- run options


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("webhook", "http://127.0.0.1:9/hook"),
        ("feedback_keys", ["score"]),
        ("context", {"user": "x"}),
        ("langsmith_tracer", {"project_name": "x"}),
        ("strict_resume", False),
        ("durability", "sometimes"),
        ("after_seconds", -1),
        ("on_completion", "archive"),
        ("interrupt_before", ["nope"]),
        ("interrupt_after", ["nope"]),
    ],
)
def test_run_options_refused_by_name(http: httpx.Client, field: str, value: Any) -> None:
    tid = new_thread(http)
    body = {"assistant_id": "chat", "input": human("x"), field: value}
    refused(http.post(f"/threads/{tid}/runs", json=body), field)
    assert http.get(f"/threads/{tid}/runs").json() == []


def test_the_sdks_empty_options_are_accepted(http: httpx.Client) -> None:
    tid = new_thread(http)
    values = wait_run(
        http,
        tid,
        input=human("x"),
        webhook=None,
        feedback_keys=[],
        context={},
        strict_resume=True,
        checkpoint_during=True,
        stream_resumable=True,
    )
    assert texts(values) == ["x", "echo: x"]


def test_on_completion_is_for_thread_less_runs(http: httpx.Client) -> None:
    tid = new_thread(http)
    body = {"assistant_id": "chat", "input": human("x"), "on_completion": "delete"}
    refused(http.post(f"/threads/{tid}/runs", json=body), "on_completion")
    result = http.post("/runs/wait", json=body)
    assert result.status_code == 200 and texts(result.json()) == ["x", "echo: x"]
    thread_id = result.headers["Content-Location"].split("/")[2]
    assert http.get(f"/threads/{thread_id}").status_code == 404
    kept = http.post("/runs/wait", json={**body, "on_completion": "keep"})
    assert http.get(f"/threads/{kept.headers['Content-Location'].split('/')[2]}").status_code == 200


def test_durability_exit_writes_only_the_last_checkpoint(http: httpx.Client) -> None:
    counts = {}
    for durability in ("sync", "exit"):
        tid = new_thread(http)
        wait_run(http, tid, input=human("x"), durability=durability)
        counts[durability] = len(http.post(f"/threads/{tid}/history", json={"limit": 50}).json())
    assert counts == {"sync": 3, "exit": 1}


def test_interrupt_before_pauses_and_a_run_without_input_continues(http: httpx.Client) -> None:
    tid = new_thread(http)
    values = wait_run(http, tid, input=human("x"), interrupt_before=["agent"])
    assert texts(values) == ["x"]
    assert run_status(http, tid) == "interrupted"
    assert http.get(f"/threads/{tid}/state").json()["next"] == ["agent"]
    assert http.get(f"/threads/{tid}").json()["status"] == "interrupted"
    assert texts(wait_run(http, tid)) == ["x", "echo: x"]
    assert run_status(http, tid) == "success"
    assert http.get(f"/threads/{tid}").json()["status"] == "idle"
    wait_run(http, tid, input=human("y"), interrupt_after="*")
    assert run_status(http, tid) == "success"  # nothing after agent: the run ends there


def test_after_seconds_delays_the_start(http: httpx.Client) -> None:
    tid = new_thread(http)
    run = http.post(
        f"/threads/{tid}/runs",
        json={"assistant_id": "chat", "input": human("x"), "after_seconds": 1.5},
    ).json()
    assert run["status"] == "pending"
    assert http.get(f"/threads/{tid}/runs/{run['run_id']}").json()["status"] == "pending"
    joined = http.get(f"/threads/{tid}/runs/{run['run_id']}/join").json()
    assert texts(joined) == ["x", "echo: x"]


def test_rollback_deletes_the_run_and_its_checkpoints(http: httpx.Client) -> None:
    tid = new_thread(http)
    wait_run(http, tid, input=human("one"))
    head = http.get(f"/threads/{tid}/state").json()["checkpoint"]["checkpoint_id"]
    run = http.post(
        f"/threads/{tid}/runs", json={"assistant_id": "chat", "input": human("SLOW CHAT 3 x")}
    ).json()
    wait_until(
        lambda: http.get(f"/threads/{tid}/state").json()["checkpoint"]["checkpoint_id"] != head
    )
    cancelled = http.post(f"/threads/{tid}/runs/{run['run_id']}/cancel?action=rollback&wait=1")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "interrupted"
    assert http.get(f"/threads/{tid}/runs/{run['run_id']}").status_code == 404
    assert http.get(f"/threads/{tid}/state").json()["checkpoint"]["checkpoint_id"] == head
    # multitask_strategy rollback drops the run it replaces the same way
    first = http.post(
        f"/threads/{tid}/runs", json={"assistant_id": "chat", "input": human("SLOW CHAT 3 y")}
    ).json()
    stream = http.post(
        f"/threads/{tid}/runs/stream",
        json={"assistant_id": "chat", "input": human("z"), "multitask_strategy": "rollback"},
    )
    assert read_sse(stream.text)[-1].data["status"] == "success"
    assert http.get(f"/threads/{tid}/runs/{first['run_id']}").status_code == 404
    assert texts(http.get(f"/threads/{tid}/state").json()["values"]) == [
        "one",
        "echo: one",
        "z",
        "echo: z",
    ]


# --------------------------------------------------------------------------- OpenAPI


def test_the_openapi_document_lists_the_new_routes_with_typed_bodies(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    paths = document["paths"]
    bodies = {
        ("/threads/{thread_id}/state/checkpoint", "post"): "StateCheckpointRequest",
        ("/threads/{thread_id}/state", "post"): "StateUpdate",
        ("/threads/{thread_id}/history", "post"): "HistoryQuery",
    }
    for (path, method), schema in bodies.items():
        ref = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith(f"/{schema}")
    for path in (
        "/threads/{thread_id}/copy",
        "/assistants/{assistant_id}/subgraphs",
        "/assistants/{assistant_id}/subgraphs/{namespace}",
    ):
        assert path in paths
    run_create = document["components"]["schemas"]["RunCreate"]["properties"]
    for option in (
        "checkpoint",
        "checkpoint_id",
        "durability",
        "on_completion",
        "after_seconds",
        "interrupt_before",
        "interrupt_after",
        "webhook",
        "feedback_keys",
    ):
        assert option in run_create, option


# --------------------------------------------------------------------------- ownership

KEY = "dialect-key-0123456789abcdef"
OTHER_KEY = "dialect-other-abcdefghijklmn"


def test_another_keys_thread_is_not_found_on_the_new_routes(tmp_path_factory: Any) -> None:
    with ScriptedOpenAIServer(chat_reply) as llm:
        settings = service_settings(
            tmp_path_factory.mktemp("keyed"), llm.base_url, auth_api_keys=[KEY, OTHER_KEY]
        )
        with LiveServer(settings, dialect_assistants) as live:
            mine = httpx.Client(base_url=live.url, headers={"X-Api-Key": KEY}, timeout=30)
            theirs = httpx.Client(base_url=live.url, headers={"X-Api-Key": OTHER_KEY}, timeout=30)
            with mine, theirs:
                tid = new_thread(mine)
                wait_run(mine, tid, input=human("mine"))
                head = mine.get(f"/threads/{tid}/state").json()["checkpoint"]
                attempts = [
                    theirs.post(f"/threads/{tid}/copy"),
                    theirs.post(f"/threads/{tid}/state", json={"values": human("x")}),
                    theirs.post(f"/threads/{tid}/state/checkpoint", json={"checkpoint": head}),
                    theirs.post(f"/threads/{tid}/history", json={"checkpoint": head}),
                    theirs.post(
                        f"/threads/{tid}/runs",
                        json={"assistant_id": "chat", "input": human("x"), "checkpoint": head},
                    ),
                ]
                assert [r.status_code for r in attempts] == [404] * 5
                assert theirs.post("/threads/count", json={}).json() == 0
                assert mine.post("/threads/count", json={}).json() == 1
                copy = mine.post(f"/threads/{tid}/copy").json()["thread_id"]
                assert theirs.get(f"/threads/{copy}").status_code == 404
                assert mine.get(f"/threads/{copy}").status_code == 200
