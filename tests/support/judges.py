"""Scripted judges for tests: position-biased, content-preferring, scoring and junk.

The responders answer the `judge` role (`nodes.judge`) of `FakeModels` the way a model
would, from the prompt alone: they read the posts out of the prompt's data blocks
("帖子1", "帖子2", "帖子"), never out of the test, so they see exactly what the judge sees::

    models = FakeModels({"judge": position_biased_judge("1")})   # always answers post 1
    models = FakeModels({"judge": content_judge("青禾")})          # prefers the post with 青禾
    models = FakeModels({"judge": scoring_judge("青禾")})          # PostScore 0.9 / 0.3

Over the OpenAI wire (`tests.support.scripted_openai`), `wire_judges(...)` answers the
requests that force the judge's tools and can be merged into a pipeline responder's
`forced` table (`tests.app.atelier_llm.team_responder(forced=...)`)::

    forced = wire_judges(pairwise=content_judge("青禾"), post=scoring_judge("青禾"))
    server.responder = lambda req: forced[req.forced_tool](req)
"""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from prompts.common import DATA_CLOSE, DATA_END, DATA_OPEN
from tests.support.fake_models import tool_call
from tests.support.scripted_openai import ChatRequest, Reply

Judge = Callable[[list[BaseMessage]], AIMessage]

PAIRWISE_TOOL = "PairwiseVerdict"
POST_TOOL = "PostScore"


def pairwise_reply(winner: str | int, reasons: str = "帖子更切题，信息更具体。") -> AIMessage:
    """Return a PairwiseVerdict reply."""
    return tool_call(PAIRWISE_TOOL, winner=winner, reasons=reasons)


def post_score_reply(score: float | str, reasons: str = "切题，结构清楚。") -> AIMessage:
    """Return a PostScore reply."""
    return tool_call(POST_TOOL, score=score, reasons=reasons)


def malformed_call(name: str = PAIRWISE_TOOL) -> AIMessage:
    """Return a reply whose tool call's arguments are not JSON."""
    return AIMessage(
        content="",
        invalid_tool_calls=[
            {
                "name": name,
                "args": '{"winner": "1", "reasons": ',
                "id": "call_malformed",
                "error": "unterminated JSON",
                "type": "invalid_tool_call",
            }
        ],
    )


def prompt_text(messages: list[BaseMessage]) -> str:
    """Return the prompt's text: every message's content, joined by blank lines."""
    return "\n\n".join(str(m.content) for m in messages)


def data_block_of(text: str, label: str) -> str | None:
    """Return the content of the prompt's data block `label`, or None when it has none."""
    start = f"{DATA_OPEN}{label}{DATA_CLOSE}\n"
    end = f"\n{DATA_OPEN}{DATA_END}{label}{DATA_CLOSE}"
    if start not in text:
        return None
    return text.split(start, 1)[1].split(end, 1)[0]


def position_biased_judge(position: str = "1") -> Judge:
    """Return a judge that prefers the same position whatever the posts say."""
    return lambda _messages: pairwise_reply(position, f"帖子{position}更好。")


def content_judge(marker: str) -> Judge:
    """Return a judge that prefers the post containing `marker`, wherever it is shown.

    A tie when both posts, or neither, contain it.
    """

    def judge(messages: list[BaseMessage]) -> AIMessage:
        text = prompt_text(messages)
        first = marker in (data_block_of(text, "帖子1") or "")
        second = marker in (data_block_of(text, "帖子2") or "")
        if first == second:
            return pairwise_reply("tie", "两篇不相上下。")
        return pairwise_reply("1" if first else "2", f"这一篇写到了{marker}。")

    return judge


def scoring_judge(marker: str, *, high: float = 0.9, low: float = 0.3) -> Judge:
    """Return a post judge scoring `high` when the post contains `marker`, else `low`."""

    def judge(messages: list[BaseMessage]) -> AIMessage:
        post = data_block_of(prompt_text(messages), "帖子") or ""
        if marker in post:
            return post_score_reply(high, f"写到了{marker}。")
        return post_score_reply(low, f"没有写到{marker}。")

    return judge


def wire(judge: Judge) -> Callable[[ChatRequest], Reply]:
    """Answer an OpenAI-wire request with a scripted judge's reply."""

    def respond(req: ChatRequest) -> Reply:
        reply = judge([SystemMessage(req.system_text), HumanMessage(req.last_user_text)])
        if reply.tool_calls:
            return Reply.tool_calls([(c["name"], c["args"]) for c in reply.tool_calls])
        return Reply.text(str(reply.content))

    return respond


def wire_judges(
    *, pairwise: Judge | None = None, post: Judge | None = None
) -> dict[str, Callable[[ChatRequest], Reply]]:
    """Return wire responders by the tool each judge's requests force."""
    table: dict[str, Callable[[ChatRequest], Reply]] = {}
    if pairwise is not None:
        table[PAIRWISE_TOOL] = wire(pairwise)
    if post is not None:
        table[POST_TOOL] = wire(post)
    return table
