"""A2A at /a2a/{assistant_id} (issue 24), driven by the official `a2a-sdk` client.

A real uvicorn on 127.0.0.1 serves `create_app(settings)` with its default
assistants and API keys; the real `atelier` pipeline calls the scripted OpenAI
server (`tests/app/atelier_llm.py`). The client speaks the protocol of the card's
interface it picks: A2A 0.3 (`message/send`, `message/stream`, `tasks/get`,
`tasks/cancel`) or 1.0 (`SendMessage`…), both served on the one endpoint.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    Client,
    ClientConfig,
    ClientFactory,
    minimal_agent_card,
)
from a2a.helpers.proto_helpers import get_data_parts
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError
from langgraph_sdk import get_client

from app.a2a import task_state
from core.settings import Settings
from engine.records import RunRecord
from engine.spec import RunOptions
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
    wait_until,
)
from tests.app.test_assistants_service import writer_systems
from tests.app.test_atelier_service import ANSWER_DELAY, REQUEST, Gate, writer_requests
from tests.app.test_mcp import readme_snippet, run_snippet
from tests.support.scripted_openai import ScriptedOpenAIServer, delayed
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

pytestmark = pytest.mark.slow

KEY = "a2a-test-key-0123456789"
OTHER_KEY = "a2a-other-key-0123456789"
CARD = "/a2a/atelier/.well-known/agent-card.json"


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder()) as server:
        yield server


@pytest.fixture
def gate() -> Gate:
    return Gate(atelier_responder(), delay=0.0)


@pytest.fixture
def llm(scripted_llm: ScriptedOpenAIServer, gate: Gate) -> ScriptedOpenAIServer:
    scripted_llm.responder = delayed(gate, ANSWER_DELAY)
    scripted_llm.reset()
    return scripted_llm


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx and `atelier worker` twice."""
    env = {"AUTH_API_KEYS": f"{KEY},{OTHER_KEY}", "LLM_TIMEOUT": "30"}
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """The service in each deployment: tasks are read from the run store, so any replica answers."""

    def settings(**scale: Any) -> Settings:
        keys = [KEY, OTHER_KEY]
        return service_settings(tmp_path / "data", llm.base_url, auth_api_keys=keys, **scale)

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


async def connect(url: str, key: str, *, version: str, streaming: bool = True) -> Client:
    """Resolve the card at `url` and return a client speaking A2A `version` with `key`."""
    http = httpx.AsyncClient(headers={"X-Api-Key": key}, timeout=60)
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
    card = await A2ACardResolver(http, url).get_agent_card()
    chosen = [i for i in card.supported_interfaces if i.protocol_version == version]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(chosen)
    return factory.create(card)


@pytest.fixture(params=["0.3", "1.0"])
def version(request: pytest.FixtureRequest) -> str:
    """The A2A protocol version the client speaks."""
    return str(request.param)


@pytest.fixture
async def client(version: str, server: Served) -> AsyncIterator[Client]:
    """A client of the atelier assistant (non-streaming), speaking `version`."""
    client = await connect(f"{server.url}/a2a/atelier", KEY, version=version, streaming=False)
    yield client
    await client.close()


def user_message(text: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    )


async def send(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


def assert_is_the_post(task: Task, base_url: str) -> None:
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = task.artifacts
    [markdown] = [p.text for p in artifact.parts if p.HasField("text")]
    [result] = get_data_parts(artifact.parts)
    assert result["outcome"] == "completed"
    title = result["post"]["title"]
    assert title and markdown.startswith(f"# {title}")
    assert f"{base_url}/assets/" in markdown
    image_url = markdown.split("](", 1)[1].split(")", 1)[0]
    # Signed (the service has API keys): the link loads without one, as in a browser.
    got = httpx.get(image_url, timeout=30)
    assert got.status_code == 200 and got.headers["content-type"].startswith("image/")
    assert httpx.get(image_url.split("?")[0], timeout=30).status_code == 401


def run_record(status: str, cancel_reason: str | None = None) -> RunRecord:
    return RunRecord(
        run_id="r",
        thread_id="t",
        owner="o",
        assistant_id="atelier",
        status=status,  # type: ignore[arg-type]
        created_at="",
        updated_at="",
        options=RunOptions(),
        multitask_strategy="reject",
        cancel_reason=cancel_reason,
    )


POST = {"result": {"message": "done", "post": {"title": "T", "blocks": [], "tags": []}}}
QUESTION = {"__interrupt__": [{"value": {"type": "clarification", "question": "Q?"}, "id": "i"}]}


@pytest.mark.parametrize(
    ("run", "values", "state", "says"),
    [
        (run_record("pending"), {}, TaskState.TASK_STATE_SUBMITTED, "queued"),
        (run_record("running"), {}, TaskState.TASK_STATE_WORKING, "working"),
        (run_record("interrupted", "interrupt"), {}, TaskState.TASK_STATE_CANCELED, "cancelled"),
        (
            run_record("error"),
            {"__error__": {"error": "X", "message": "the model failed"}},
            TaskState.TASK_STATE_FAILED,
            "the model failed",
        ),
        (run_record("timeout"), {}, TaskState.TASK_STATE_FAILED, "timeout"),
        (run_record("interrupted"), QUESTION, TaskState.TASK_STATE_INPUT_REQUIRED, "Q?"),
        (run_record("success"), POST, TaskState.TASK_STATE_COMPLETED, "done"),
        (
            run_record("success"),
            {"result": {"outcome": "failed", "message": "no post: the model is down", "post": {}}},
            TaskState.TASK_STATE_FAILED,
            "no post: the model is down",
        ),
    ],
)
def test_a_task_state_follows_its_latest_run(
    run: RunRecord, values: dict[str, Any], state: TaskState, says: str
) -> None:
    got, message = task_state(run, values)

    assert got == state and says in message


def test_the_card_is_public_and_says_where_to_call_and_how(server: Served) -> None:
    response = httpx.get(server.url + CARD, timeout=30)  # no key

    assert response.status_code == 200
    card = response.json()
    assert card["name"] == "atelier" and card["description"]
    assert card["capabilities"]["streaming"] is True
    assert [s["id"] for s in card["skills"]] == ["atelier"]
    interfaces = {(i["protocolVersion"], i["url"]) for i in card["supportedInterfaces"]}
    assert interfaces == {(v, f"{server.url}/a2a/atelier") for v in ("1.0", "0.3")}
    assert set(card["securitySchemes"]) == {"apiKey", "bearer"}
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == "X-Api-Key"


async def test_message_send_answers_the_completed_task_with_the_post(
    client: Client, server: Served
) -> None:
    [response] = await send(client, user_message(REQUEST))

    task = response.task
    assert task.id and task.context_id == task.id
    assert_is_the_post(task, server.url)
    again = await client.get_task(GetTaskRequest(id=task.id))
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    assert again.artifacts[0].parts[0].text == task.artifacts[0].parts[0].text
    assert again.history[0].parts[0].text == REQUEST
    # The task's thread shows the request as its first message in a chat UI too.
    async with httpx.AsyncClient(headers={"X-Api-Key": KEY}, timeout=30) as http:
        state = (await http.get(f"{server.url}/threads/{task.id}/state")).json()
    asked = state["values"]["messages"][0]
    assert asked["type"] == "human" and asked["content"] == REQUEST


async def test_the_planners_question_is_input_required_and_the_next_message_answers_it(
    client: Client, server: Served
) -> None:
    [asked] = await send(client, user_message("写点东西"))

    task = asked.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    question, hint = task.status.message.parts
    assert '"defaults"' in question.text
    assert get_data_parts([hint])[0]["value"]["type"] == "clarification"

    answer = user_message("defaults")
    answer.message.task_id = task.id
    answer.message.context_id = task.context_id
    [answered] = await send(client, answer)

    assert answered.task.id == task.id
    assert_is_the_post(answered.task, server.url)
    assert [m.parts[0].text for m in answered.task.history] == ["写点东西", "defaults"]
    again = user_message("再写一篇")
    again.message.task_id = task.id
    with pytest.raises(InvalidParamsError, match="is completed"):
        await send(client, again)


async def test_message_stream_streams_progress_ending_completed(server: Served) -> None:
    client = await connect(f"{server.url}/a2a/atelier", KEY, version="0.3")
    try:
        events = await send(client, user_message(REQUEST))
    finally:
        await client.close()

    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    working = [
        e.status_update.status.message.parts[0].text
        for e in events[1:-1]
        if e.HasField("status_update")
    ]
    assert any("started" in text for text in working)
    assert all(
        e.status_update.status.state == TaskState.TASK_STATE_WORKING
        for e in events[1:-1]
        if e.HasField("status_update")
    )
    assert "artifact_update" in kinds
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_tasks_cancel_cancels_a_slow_run(
    client: Client, llm: ScriptedOpenAIServer, gate: Gate
) -> None:
    gate.delay = 30  # the writer hangs until cancelled
    request = user_message(REQUEST)
    request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    [response] = await send(client, request)
    task_id = response.task.id
    assert response.task.status.state in (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
    )
    await asyncio.to_thread(wait_until, lambda: writer_requests(llm) >= 1, 30)

    cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))

    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_CANCELED and not task.artifacts
    with pytest.raises(TaskNotCancelableError, match="canceled"):
        await client.cancel_task(CancelTaskRequest(id=task_id))


async def test_a_task_is_not_found_by_another_key(
    client: Client, version: str, server: Served
) -> None:
    [response] = await send(client, user_message(REQUEST))
    other = await connect(f"{server.url}/a2a/atelier", OTHER_KEY, version=version, streaming=False)
    try:
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=response.task.id))
    finally:
        await other.close()


def test_an_unknown_assistant_is_404(server: Served) -> None:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
    headers = {"X-Api-Key": KEY}

    rpc = httpx.post(f"{server.url}/a2a/nobody", json=body, headers=headers, timeout=30)
    card = httpx.get(f"{server.url}/a2a/nobody/.well-known/agent-card.json", timeout=30)

    assert rpc.status_code == 404 and "atelier" in rpc.json()["message"]
    assert card.status_code == 404


async def test_a_call_without_a_key_is_refused(server: Served) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{server.url}/a2a/atelier", json=body)
    assert response.status_code == 401

    keyless = await connect(f"{server.url}/a2a/atelier", "", version="0.3", streaming=False)
    try:
        with pytest.raises(A2AClientError, match="401"):
            await send(keyless, user_message(REQUEST))
    finally:
        await keyless.close()


def test_openapi_documents_the_endpoint_and_the_card(server: Served) -> None:
    document = httpx.get(server.url + "/openapi.json", timeout=30).json()

    rpc = document["paths"]["/a2a/{assistant_id}"]["post"]
    body = rpc["requestBody"]["content"]["application/json"]
    assert body["schema"]["required"] == ["jsonrpc", "method"]
    assert body["example"]["method"] == "message/send"
    assert {"application/json", "text/event-stream"} <= set(rpc["responses"]["200"]["content"])
    assert {"401", "404", "413"} <= set(rpc["responses"])
    card = document["paths"]["/a2a/{assistant_id}/.well-known/agent-card.json"]["get"]
    assert "404" in card["responses"] and "401" not in card["responses"]


async def extended_card(url: str, key: str) -> AgentCard:
    """Ask the agent at `url` for its extended card with `key`, knowing nothing but the URL."""
    http = httpx.AsyncClient(headers={"X-Api-Key": key}, timeout=60)
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
    client = factory.create(minimal_agent_card(url, ["JSONRPC"]))
    try:
        return await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    finally:
        await client.close()
        await http.aclose()


async def test_a_preset_has_no_public_card_and_its_owners_extended_card_runs_it_in_its_voice(
    server: Served, llm: ScriptedOpenAIServer
) -> None:
    voice = "像咖啡师一样聊豆子，短句，不用感叹号"
    sdk = get_client(url=server.url, api_key=KEY)
    preset = await sdk.assistants.create(
        "atelier", context={"brand_name": "山间咖啡", "voice": voice}, name="山间"
    )
    url = f"{server.url}/a2a/{preset['assistant_id']}"

    async with httpx.AsyncClient(timeout=30) as keyless:
        public = await keyless.get(f"{url}/.well-known/agent-card.json")
    card = await extended_card(url, KEY)
    with pytest.raises(A2AClientError, match="404"):
        await extended_card(url, OTHER_KEY)

    assert public.status_code == 404
    assert card.name == "山间" and "写 山间咖啡 的帖子" in card.description
    assert voice in card.description and card.capabilities.extended_agent_card
    assert {i.url for i in card.supported_interfaces} == {url}
    assert [s.id for s in card.skills] == [preset["assistant_id"]]
    assert set(card.security_schemes) == {"apiKey", "bearer"}

    http = httpx.AsyncClient(headers={"X-Api-Key": KEY}, timeout=60)
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
    try:
        [response] = await send(client, user_message(REQUEST))
    finally:
        await client.close()
        await http.aclose()
    assert_is_the_post(response.task, server.url)
    systems = writer_systems(llm)
    assert systems and all(voice in s and "山间咖啡" in s for s in systems)


def test_a_built_in_assistants_extended_card_is_its_public_card(server: Served) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"}

    rpc = httpx.post(f"{server.url}/a2a/atelier", json=body, headers={"X-Api-Key": KEY}, timeout=30)
    public = httpx.get(server.url + CARD, timeout=30).json()

    card = rpc.json()["result"]
    assert card["name"] == public["name"] == "atelier"
    assert card["description"] == public["description"]
    assert not public["capabilities"].get("extendedAgentCard")


async def test_the_readme_snippet_of_a_presets_card_runs_as_written(server: Served) -> None:
    snippet = readme_snippet("a2a", "minimal_agent_card")
    namespace = await run_snippet(snippet, server.url, KEY)
    await namespace["http"].aclose()

    card = namespace["card"]
    assert card.name == "青禾" and "写 青禾护肤 的帖子" in card.description
    assert {i.url for i in card.supported_interfaces} == {namespace["url"]}
    assert namespace["url"] == f"{server.url}/a2a/{namespace['brand']['assistant_id']}"
