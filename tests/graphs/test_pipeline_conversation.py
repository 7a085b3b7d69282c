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

from agentkit.chat import chat_request, image_blocks, last_human, post_text
from agentkit.state import AtelierInput
from app.schemas import RunCreate
from graphs.assistants import TEAM, TeamRunInput, chat_text, check_clarification_answer
from graphs.pipeline import build_pipeline
from nodes.planner import parse_resume
from tests.graphs.pipeline_runs import (
    context_for,
    judge_reply,
    models_for,
    planner_reply,
    run_pipeline,
)

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
