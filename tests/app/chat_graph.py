"""A chat graph shaped like what Agent Chat UI and `useStream` expect: a `messages` list.

The dialect tests (JS SDK, `RemoteGraph`) serve it next to the sample graphs. One
node, `agent`, answers the last human message through the real model factory
(role `writer_agent`, so its tokens stream); a human message starting with `ASK`
first asks a clarification question with `interrupt()`, and the answer is added to
the reply. The scripted LLM (`chat_reply`) echoes the prompt, so an edited message
gets a different answer:

    hello                 → "echo: hello" (in 4-character chunks)
    SLOW CHAT <s> hello   → the same, after <s> seconds (a run to join or reconnect to)
    PLAN, WRITE, SLOW …   → the sample graphs' answers (`scripted_reply`)
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agentkit.context import AtelierContext, context_of
from engine import AssistantSpec
from engine.assistants import registry
from tests.app.sample_graphs import SAMPLE_ASSISTANTS, scripted_reply
from tests.support.scripted_openai import ChatRequest, Reply


def chat_reply(req: ChatRequest) -> Reply:
    """Answer the chat graph (see the module docstring) and the sample graphs."""
    text = req.last_user_text
    if text.startswith("SLOW CHAT"):
        seconds = float(text.split()[2])
        return Reply.delay(seconds, Reply.text(f"echo: {text}", chunk_chars=4), per_chunk=0.05)
    if text.startswith(("PLAN", "WRITE", "SLOW")):
        return scripted_reply(req)
    return Reply.text(f"echo: {text}", chunk_chars=4)


class ChatState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    answer: Any


async def agent(state: ChatState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    last = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
    text = str(last.content)
    answer = None
    if text.startswith("ASK"):
        answer = interrupt({"type": "clarification", "question": "Who is the post for?"})
    model = context_of(runtime).models("writer_agent")
    reply = await model.ainvoke(text)
    content = str(reply.content) + (f" (answer: {answer})" if answer is not None else "")
    return {"messages": [AIMessage(content, id=reply.id)], "answer": answer}


def build_chat(checkpointer: BaseCheckpointSaver | None = None) -> Any:
    """START → agent → END over a `messages` state."""
    builder = StateGraph(ChatState, context_schema=AtelierContext)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=checkpointer, name="chat")


#: The sample assistants plus `chat`.
dialect_assistants = registry(
    (*SAMPLE_ASSISTANTS, AssistantSpec("chat", build_chat, "chat", "Echo chat."))
)
