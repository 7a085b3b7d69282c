"""The conversation of the pipeline (PRODUCT.md §7): chat input, the messages channel, HITL.

Chat clients (Agent Chat UI, `useStream`) send `messages` and render the state's
`messages`: the human message keeps its id, the writer's draft is one AI message
replaced in place by each retry's draft and then by the post, the planner's
question is an AI message, and the clarification is answered with HITL decisions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import ValidationError

from agentkit.chat import (
    REQUEST_MESSAGE_PREFIX,
    chat_request,
    image_blocks,
    last_human,
    post_text,
    request_message,
)
from agentkit.state import AtelierInput
from app.schemas import RunCreate
from graphs.assistants import TEAM, TeamRunInput, chat_text, check_clarification_answer
from graphs.pipeline import build_pipeline
from graphs.team import build_team
from nodes.planner import parse_resume
from tests.graphs.pipeline_runs import (
    REQUEST,
    context_for,
    judge_reply,
    models_for,
    planner_reply,
    run_pipeline,
)
from tests.graphs.team_runs import REQUEST as TEAM_REQUEST
from tests.graphs.team_runs import run_team

CASES = json.loads(
    (Path(__file__).resolve().parents[2] / "../shared/cases/chat_input.json").read_text()
)["cases"]
BASE = "http://studio.example:8080/"


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_chat_input_makes_the_request_the_cases_say(case: dict[str, Any]) -> None:
    for model in (AtelierInput, TeamRunInput):
        if "error" in case:
            with pytest.raises(ValidationError) as raised:
                model.model_validate(case["input"])
            where = {".".join(map(str, ("input", *e["loc"]))) for e in raised.value.errors()}
            assert case["error"] in where
            continue
        sent = model.model_validate(case["input"]).model_dump(mode="json", exclude_unset=True)
        assert sent["request"] == case["request"]
        if "request" not in case["input"]:
            assert chat_text(case["input"]) == case["request"]
        human = last_human(case["input"]["messages"])
        assert len(image_blocks(human)) == case.get("reference_images", 0)


def test_an_image_url_block_with_a_data_url_is_an_image_and_a_link_is_not() -> None:
    message = {
        "type": "human",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {"type": "text", "text": "写"},
        ],
    }
    assert image_blocks(message) == [(b"\x89PNG\r\n\x1a\n", "image/png")]
    assert chat_request([message]) == "写"


def test_a_resume_with_an_empty_input_is_no_input() -> None:
    body = RunCreate.model_validate(
        {"assistant_id": "atelier", "input": {}, "command": {"resume": "defaults"}}
    )
    assert body.input is None
    with pytest.raises(ValidationError, match="mutually exclusive"):
        RunCreate.model_validate(
            {"assistant_id": "atelier", "input": {"request": "x"}, "command": {"resume": "x"}}
        )


HITL_EDIT = {
    "decisions": [
        {
            "type": "edit",
            "edited_action": {"name": "clarify_request", "args": {"details": "给新手"}},
        }
    ]
}


def test_hitl_decisions_answer_the_question() -> None:
    assert parse_resume({"decisions": [{"type": "approve"}]}) == {
        "choice": "defaults",
        "details": "",
    }
    assert parse_resume(HITL_EDIT) == {"choice": "details", "details": "给新手"}
    assert parse_resume({"decisions": [{"type": "reject"}]})["choice"] == "rejected"
    # The documented answers still work.
    assert parse_resume("defaults")["choice"] == "defaults"
    assert parse_resume("写给新手")["details"] == "写给新手"


def test_the_resume_check_takes_hitl_decisions_and_refuses_malformed_ones() -> None:
    question = type("I", (), {"value": {"type": "clarification"}, "id": "x"})()
    for good in (
        {"decisions": [{"type": "approve"}]},
        HITL_EDIT,
        {"decisions": [{"type": "reject"}]},
    ):
        check_clarification_answer(good, [question])  # type: ignore[list-item]
    for bad in (
        {"decisions": []},
        {"decisions": [{"type": "maybe"}]},
        {"decisions": [{"type": "edit"}]},
        {"decisions": [{"type": "edit", "edited_action": {"name": "x", "args": {"details": ""}}}]},
    ):
        with pytest.raises(ValueError, match="decisions"):
            check_clarification_answer(bad, [question])  # type: ignore[list-item]


def test_team_is_served_with_chat_input() -> None:
    assert TEAM.assistant_id == "team" and TEAM.chat_text is chat_text
    sent = TeamRunInput.model_validate(
        {"messages": [{"type": "human", "content": "写"}], "platform": "xiaohongshu"}
    ).model_dump(mode="json", exclude_unset=True)
    assert sent["request"] == "写" and sent["platform"] == "xiaohongshu"


def test_the_post_message_shows_the_post_with_absolute_image_urls() -> None:
    result = {
        "outcome": "completed",
        "message": "已完成",
        "post": {
            "title": "平价护肤",
            "blocks": [
                {"type": "heading", "text": "成分"},
                {"type": "list_item", "text": "烟酰胺"},
                {"type": "text", "text": "正文"},
            ],
            "tags": ["护肤", "学生党"],
        },
        "images": [{"asset_id": "a" * 16, "url": "/assets/" + "a" * 16, "alt": "封面"}],
    }
    text = post_text(result, BASE)
    assert text.startswith("**平价护肤**")
    assert "**成分**\n\n- 烟酰胺\n\n正文" in text
    assert "#护肤 #学生党" in text
    assert f"![封面](http://studio.example:8080/assets/{'a' * 16})" in text
    assert "已完成" not in text  # a plain success says nothing more


def ai_messages(state: dict[str, Any]) -> list[Any]:
    return [m for m in state["messages"] if isinstance(m, AIMessage)]


async def test_the_conversation_keeps_the_human_id_and_one_ai_message_per_post(
    tmp_path: Path,
) -> None:
    # Two attempts: the retry's draft replaces the first; the post replaces the draft.
    models = models_for([judge_reply("needs_improvement", 0.5), judge_reply()])
    drafts = iter(["# 第一版\n\n" + "成分讲清楚。" * 10, "# 第二版\n\n" + "成分讲清楚。" * 10])
    models.script("writer_agent", lambda _m: next(drafts))
    graph = build_pipeline(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "chat", "base_url": BASE}}
    human = {"id": "client-id-1", "type": "human", "content": [{"type": "text", "text": "写"}]}
    sent = AtelierInput.model_validate(
        {"messages": [human], "auto_confirm": True, "image_count": 1}
    ).model_dump(mode="json", exclude_unset=True)
    seen: list[list[Any]] = []
    async for ns, _mode, chunk in graph.astream(
        sent,
        config,
        context=context_for(models, tmp_path),
        stream_mode=["values"],
        subgraphs=True,
    ):
        if not ns:
            seen.append([(m.id, m.type) for m in chunk.get("messages", [])])
    state = (await graph.aget_state(config)).values
    assert state["result"]["attempts"] and len(state["result"]["attempts"]) == 2
    first = state["messages"][0]
    assert isinstance(first, HumanMessage) and first.id == "client-id-1"
    (post,) = ai_messages(state)
    assert post.id == state["post_message_id"]
    assert post.content.startswith("**第二版**")
    assert "http://studio.example:8080/assets/" in post.content
    # Every values frame holds the human message; once a draft is shown, the
    # conversation never drops back to no AI message (no flicker).
    assert all(frame and frame[0] == ("client-id-1", "human") for frame in seen)
    shown = [len([m for m in frame if m[1] == "ai"]) for frame in seen]
    first_draft = shown.index(1)
    assert all(n == 1 for n in shown[first_draft:])


async def test_a_vague_message_asks_and_each_decision_does_what_it_says(tmp_path: Path) -> None:
    for decision, outcome in (
        ({"type": "approve"}, "completed"),
        (HITL_EDIT["decisions"][0], "completed"),
        ({"type": "reject"}, "needs_clarification"),
    ):
        models = models_for(judge_reply())
        graph = build_pipeline(InMemorySaver())
        config: Any = {"configurable": {"thread_id": f"ask-{decision['type']}"}}
        first = await run_pipeline(
            models, tmp_path, graph=graph, config=config, payload={"request": "写一篇笔记"}
        )
        (pause,) = first.interrupts
        assert pause.value["action_requests"][0]["name"] == "clarify_request"
        assert first.state["messages"][-1].content == pause.value["question"]
        done = await run_pipeline(
            models,
            tmp_path,
            graph=graph,
            config=config,
            payload=Command(resume={"decisions": [decision]}),
        )
        assert done.result["outcome"] == outcome
        if decision["type"] == "edit":
            assert done.state["clarification"] == {"choice": "details", "details": "给新手"}
        assert done.state["messages"][-1].type == "ai"


async def test_a_message_after_a_post_revises_it(tmp_path: Path) -> None:
    models = models_for(judge_reply())
    graph = build_pipeline(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "revise"}}
    await run_pipeline(models, tmp_path, graph=graph, config=config, auto_confirm=True)
    previous = (await graph.aget_state(config)).values["generated_content"]
    models.script("planner", planner_reply(action="revise_post"))
    second = await run_pipeline(
        models,
        tmp_path,
        graph=graph,
        config=config,
        payload={"messages": [{"type": "human", "content": "标题短一点"}], "request": "标题短一点"},
    )
    assert second.result["outcome"] == "completed"
    writer_prompt = models.calls_for("writer_agent")[-1].prompt
    assert previous["title"] in writer_prompt and "标题短一点" in writer_prompt
    assert len(ai_messages(second.state)) == 2  # one AI message per post


@pytest.mark.parametrize(
    "message",
    [
        {"type": "human", "content": 5},
        {"type": "tool", "content": "x"},
        {"role": "user"},
        {"type": "human", "content": "x", "id": 3},
    ],
)
def test_a_malformed_message_is_refused_at_input_messages(message: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as raised:
        AtelierInput.model_validate({"request": "写", "messages": [message]})
    assert [e["loc"] for e in raised.value.errors()] == [("messages",)]


async def test_a_new_request_on_a_thread_left_at_a_question_is_assessed_afresh(
    tmp_path: Path,
) -> None:
    models = models_for(judge_reply())
    graph = build_pipeline(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "left"}}
    first = await run_pipeline(models, tmp_path, graph=graph, config=config, request="写一篇笔记")
    assert first.interrupts
    clear = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
    second = await run_pipeline(models, tmp_path, graph=graph, config=config, request=clear)
    assert not second.interrupts and second.result["outcome"] == "completed"


# --- the request as the user's message (issue 32) ------------------------------------


def kinds(state: dict[str, Any]) -> list[str]:
    return [m.type for m in state["messages"]]


async def test_a_request_started_thread_shows_each_request_before_its_answer(
    tmp_path: Path,
) -> None:
    models = models_for(judge_reply())
    graph = build_pipeline(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "requested"}}
    first = await run_pipeline(models, tmp_path, graph=graph, config=config, auto_confirm=True)
    asked, post = first.state["messages"]
    assert isinstance(asked, HumanMessage) and asked.content == REQUEST
    assert asked.id and asked.id.startswith(REQUEST_MESSAGE_PREFIX)
    assert post.id == first.state["post_message_id"]

    # A revision with a new request: its request, then its post, after the first turn.
    models.script("planner", planner_reply(action="revise_post"))
    second = await run_pipeline(
        models, tmp_path, graph=graph, config=config, request="标题短一点", auto_confirm=True
    )
    assert kinds(second.state) == ["human", "ai", "human", "ai"]
    assert second.state["messages"][:2] == [asked, post]  # the first turn, ids kept
    again = second.state["messages"][2]
    assert again.content == "标题短一点" and again.id != asked.id
    assert again.id.startswith(REQUEST_MESSAGE_PREFIX)

    # The same request sent again after a post is a new turn too.
    third = await run_pipeline(
        models, tmp_path, graph=graph, config=config, request="标题短一点", auto_confirm=True
    )
    assert kinds(third.state) == ["human", "ai"] * 3
    assert third.state["messages"][4].content == "标题短一点"


async def test_chat_input_is_shown_as_sent_with_no_second_human_message(tmp_path: Path) -> None:
    models = models_for(judge_reply())
    graph = build_pipeline(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "chatted"}}
    sent = {"messages": [{"id": "c-1", "type": "human", "content": REQUEST}], "auto_confirm": True}
    run = await run_pipeline(models, tmp_path, graph=graph, config=config, payload=sent)
    assert kinds(run.state) == ["human", "ai"] and run.state["messages"][0].id == "c-1"
    # Chat input with an explicit request that says something else: the client's message stays.
    both = {
        "messages": [{"id": "c-2", "type": "human", "content": "再来一篇"}],
        "request": REQUEST,
        "auto_confirm": True,
    }
    run = await run_pipeline(models, tmp_path, graph=graph, config=config, payload=both)
    assert [m.id for m in run.state["messages"]][::2] == ["c-1", "c-2"]
    assert kinds(run.state) == ["human", "ai", "human", "ai"]


async def test_a_question_and_its_answer_add_no_second_request(tmp_path: Path) -> None:
    for answer in (Command(resume="defaults"), Command(resume={"decisions": [{"type": "reject"}]})):
        models = models_for(judge_reply())
        graph = build_pipeline(InMemorySaver())
        config: Any = {"configurable": {"thread_id": f"vague-{answer.resume}"}}
        first = await run_pipeline(
            models, tmp_path, graph=graph, config=config, request="写一篇笔记"
        )
        assert first.interrupts and kinds(first.state) == ["human", "ai"]
        asked, question = first.state["messages"]
        assert asked.content == "写一篇笔记" and question.content.startswith(
            first.interrupts[0].value["question"]
        )
        done = await run_pipeline(models, tmp_path, graph=graph, config=config, payload=answer)
        assert kinds(done.state) == ["human", "ai", "ai"]
        assert done.state["messages"][:2] == [asked, question]


async def test_a_new_request_on_a_thread_left_at_a_question_is_shown(tmp_path: Path) -> None:
    models = models_for(judge_reply())
    graph = build_pipeline(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "left-shown"}}
    await run_pipeline(models, tmp_path, graph=graph, config=config, request="写一篇笔记")
    second = await run_pipeline(models, tmp_path, graph=graph, config=config, request=REQUEST)
    assert second.result["outcome"] == "completed"
    assert kinds(second.state) == ["human", "ai", "human", "ai"]
    assert [m.content for m in second.state["messages"]][::2] == ["写一篇笔记", REQUEST]


async def test_the_request_messages_id_is_the_runs_else_its_first_steps_checkpoint(
    tmp_path: Path,
) -> None:
    models = models_for(judge_reply())
    run_id = "5f1e0c7e-0000-4000-8000-000000000001"
    for config, expected in (
        ({"run_id": run_id}, run_id),
        ({"metadata": {"run_id": "run-from-the-service"}}, "run-from-the-service"),
    ):
        graph = build_pipeline(InMemorySaver())
        config["configurable"] = {"thread_id": expected}
        run = await run_pipeline(models, tmp_path, graph=graph, config=config, auto_confirm=True)
        assert run.state["messages"][0].id == f"{REQUEST_MESSAGE_PREFIX}{expected}"

    # No run id: the checkpoint the planner's first step runs from (step 0), which a
    # step resumed after a crash runs from again.
    graph = build_pipeline(InMemorySaver())
    config = {"configurable": {"thread_id": "no-run-id"}}
    await run_pipeline(models, tmp_path, graph=graph, config=config, auto_confirm=True)
    history = [s async for s in graph.aget_state_history(config)]
    (entered,) = [s for s in history if s.metadata and s.metadata.get("step") == 0]
    assert entered.next == ("planner",)
    assert history[0].values["messages"][0].id == (
        f"{REQUEST_MESSAGE_PREFIX}{entered.config['configurable']['checkpoint_id']}"
    )
    # Run again from there (a fork, as a chat UI's regenerate is): one request, one post.
    await run_pipeline(models, tmp_path, graph=graph, config=entered.config, payload=None)
    forked = (await graph.aget_state(config)).values
    assert kinds(forked) == ["human", "ai"] and forked["messages"][0].content == REQUEST


def test_the_request_message_is_written_only_where_the_user_said_nothing() -> None:
    client = {"type": "human", "id": "mine", "content": "写"}
    assert request_message([client], "写点别的", "request-1") is None  # chat input
    assert request_message([], "   ", "request-1") is None
    shown = request_message([], "写", "request-1")
    assert shown == {"type": "human", "content": "写", "id": "request-1"}
    post = {"type": "ai", "id": "post-1", "content": "**标题**"}
    assert request_message([client, post], "写", "request-2") is not None  # a new turn
    # Left by a run that ended with no answer: the same request is not shown twice,
    # a different one is.
    ours = {"type": "human", "id": "request-1", "content": "写"}
    assert request_message([ours], "写", "request-2") is None
    assert request_message([ours], "写别的", "request-2") is not None


async def test_the_team_on_its_own_shows_its_request_and_as_the_executor_adds_none(
    tmp_path: Path,
) -> None:
    models = models_for(judge_reply())
    alone = await run_team(models, tmp_path, image_count=1)
    asked, *answers = alone.state["messages"]
    assert isinstance(asked, HumanMessage) and asked.content == TEAM_REQUEST
    assert asked.id and asked.id.startswith(REQUEST_MESSAGE_PREFIX)
    assert [m.type for m in answers] == ["ai"]  # the finished draft
    chatted = await run_team(
        models, tmp_path, image_count=1, messages=[{"id": "t-1", "type": "human", "content": "写"}]
    )
    assert [m.id for m in chatted.state["messages"] if m.type == "human"] == ["t-1"]

    # As the pipeline's executor the team's conversation is the pipeline's: the team's
    # checkpoints (namespace `executor:…`) hold the writer's draft and no human message.
    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "executor"}}
    await build_pipeline(saver).ainvoke(
        {"request": REQUEST, "auto_confirm": True, "image_count": 1},
        config,
        context=context_for(models, tmp_path),
    )
    kinds_by_ns: dict[str, set[str]] = {}
    async for saved in saver.alist(config):
        ns = saved.config["configurable"]["checkpoint_ns"].split(":")[0]
        found = saved.checkpoint["channel_values"].get("messages") or []
        kinds_by_ns.setdefault(ns, set()).update(m.type for m in found)
    assert kinds_by_ns == {"": {"human", "ai"}, "executor": {"ai"}}


async def test_the_request_is_in_the_state_not_on_the_token_stream(tmp_path: Path) -> None:
    # LangGraph's `messages` mode carries the writer's tokens only (PRODUCT.md §2.3).
    models = models_for(judge_reply())
    for graph, payload in (
        (build_pipeline(), {"request": REQUEST, "auto_confirm": True, "image_count": 1}),
        (build_team(), {"request": REQUEST, "image_count": 1}),
    ):
        streamed: list[str] = []
        async for _ns, _mode, (message, meta) in graph.astream(
            payload,
            context=context_for(models, tmp_path),
            stream_mode=["messages"],
            subgraphs=True,
        ):
            if message.type == "human":
                streamed.append(str(meta.get("langgraph_node")))
        assert streamed == []
