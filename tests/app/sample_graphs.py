"""Small real LangGraph graphs the service tests serve instead of the full pipeline.

They exercise what the HTTP layer must carry, with the real context (models from
`LLM_BASE_URL`, the scripted OpenAI server): pipeline events in `custom` mode, a
subgraph mounted as node `executor`, writer tokens in `messages` mode next to a
`nostream` supervisor call, a clarification `interrupt()`, slow LLM calls (to
cancel), a node that fails, and a burst of events.

The scripted LLM answers by the first word of the prompt (`scripted_reply`):

    PLAN ...     "ok" (the supervisor role: tagged nostream)
    WRITE ...    "Hello from the writer" in 4-character chunks (the writer role)
    SLOW <s> ... the writer's answer after <s> seconds
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agentkit.context import AtelierContext, context_of
from agentkit.state import AtelierInput
from core.events import AttemptStarted, StageCompleted, StageStarted, SupervisorRoute, emit
from engine import AssistantSpec
from engine.assistants import registry
from graphs.assistants import check_clarification_answer, writer_tokens_only
from tests.support.scripted_openai import ChatRequest, Reply

WRITER_TEXT = "Hello from the writer"


def scripted_reply(req: ChatRequest) -> Reply:
    """Answer the sample graphs' prompts (see the module docstring)."""
    text = req.last_user_text
    if text.startswith("SLOW"):
        seconds = float(text.split()[1])
        return Reply.delay(seconds, Reply.text(WRITER_TEXT, chunk_chars=4))
    if text.startswith("WRITE"):
        return Reply.text(WRITER_TEXT, chunk_chars=4)
    return Reply.text("ok")


class StudioState(TypedDict, total=False):
    request: str
    auto_confirm: bool
    image_count: int
    answer: Any
    draft: str
    steps: Annotated[list[str], operator.add]
    result: dict[str, Any]


async def plan(state: StudioState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    emit(runtime.stream_writer, StageStarted(stage="planner", attempt=0))
    answer = state.get("answer")
    if not state.get("auto_confirm") and answer is None:
        answer = interrupt(
            {
                "type": "clarification",
                "question": "Who is the post for?",
                "options": [
                    {"id": "defaults", "label": "Continue with defaults"},
                    {"id": "details", "label": "Add details"},
                ],
                "missing": ["audience"],
                "clarity": 0.3,
            }
        )
    await context_of(runtime).models("supervisor").ainvoke(f"PLAN {state['request']}")
    emit(runtime.stream_writer, StageCompleted(stage="planner", attempt=0, duration_ms=1.0))
    return {"answer": answer if answer is not None else "auto", "steps": ["plan"]}


async def write(state: TeamState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    emit(
        runtime.stream_writer,
        SupervisorRoute(next_agent="writer_agent", guidance="write it", step=1),
    )
    message = await context_of(runtime).models("writer_agent").ainvoke(f"WRITE {state['request']}")
    return {"draft": str(message.content)}


class TeamState(TypedDict, total=False):
    request: str
    draft: str


class TeamOutput(TypedDict, total=False):
    draft: str


def build_team() -> Any:
    """A one-node team subgraph (mounted as `executor`); only `draft` crosses back."""
    builder = StateGraph(TeamState, output_schema=TeamOutput)
    return builder.add_node("write", write).add_edge(START, "write").compile()


async def finalize(state: StudioState) -> dict[str, Any]:
    return {
        "result": {"outcome": "completed", "post": {"body": state.get("draft", "")}},
        "steps": ["finalize"],
    }


def build_studio(checkpointer: BaseCheckpointSaver | None = None) -> Any:
    """planner (may interrupt) → executor (subgraph: writer) → finalize."""
    builder = StateGraph(StudioState, context_schema=AtelierContext)
    builder.add_node("planner", plan)
    builder.add_node("executor", build_team())
    builder.add_node("finalize", finalize)
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "executor")
    builder.add_edge("executor", "finalize")
    builder.add_edge("finalize", END)
    return builder.compile(checkpointer=checkpointer, name="studio")


class SlowState(TypedDict, total=False):
    steps: int  # how many slow LLM calls to make
    delay: float  # seconds each takes
    done: Annotated[list[int], operator.add]


async def slow_step(state: SlowState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    index = len(state.get("done") or []) + 1
    emit(runtime.stream_writer, AttemptStarted(attempt=index, max_attempts=state["steps"]))
    model = context_of(runtime).models("writer_agent")
    await model.ainvoke(f"SLOW {state.get('delay', 0.3)} step {index}")
    return {"done": [index]}


def _more_steps(state: SlowState) -> str:
    return "step" if len(state.get("done") or []) < state["steps"] else END


def slow_run(steps: int, delay: float = 0.05) -> dict[str, Any]:
    """Return the body of a streamed run of `slow`: `steps` LLM calls, `delay` s each."""
    return {
        "assistant_id": "slow",
        "input": {"steps": steps, "delay": delay},
        "stream_mode": ["updates", "custom"],
    }


def build_slow(checkpointer: BaseCheckpointSaver | None = None) -> Any:
    """`steps` LLM calls of `delay` seconds each, one per superstep (checkpointed)."""
    builder = StateGraph(SlowState, context_schema=AtelierContext)
    builder.add_node("step", slow_step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", _more_steps, ["step", END])
    return builder.compile(checkpointer=checkpointer, name="slow")


class BurstState(TypedDict, total=False):
    count: int  # events to emit
    pause: float  # seconds between events (0: as fast as possible)
    emitted: int


async def burst(state: BurstState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    pause = float(state.get("pause") or 0)
    for index in range(state["count"]):
        emit(runtime.stream_writer, StageStarted(stage=f"burst-{index}", attempt=0))
        if pause:
            await asyncio.sleep(pause)
    return {"emitted": state["count"]}


def build_burst(checkpointer: BaseCheckpointSaver | None = None) -> Any:
    """One node emitting `count` custom events, `pause` seconds apart."""
    builder = StateGraph(BurstState, context_schema=AtelierContext)
    builder.add_node("burst", burst)
    builder.add_edge(START, "burst")
    return builder.compile(checkpointer=checkpointer, name="burst")


class BoomState(TypedDict, total=False):
    x: int


async def boom(state: BoomState) -> dict[str, Any]:
    raise RuntimeError("cannot open /srv/secret/credentials.json")


def build_boom(checkpointer: BaseCheckpointSaver | None = None) -> Any:
    """A node that fails with an error whose text must not reach clients."""
    builder = StateGraph(BoomState)
    builder.add_node("boom", boom)
    builder.add_edge(START, "boom")
    return builder.compile(checkpointer=checkpointer, name="boom")


#: The assistants of the service tests.
SAMPLE_ASSISTANTS: tuple[AssistantSpec, ...] = (
    AssistantSpec(
        assistant_id="studio",
        build_graph=build_studio,
        name="studio",
        description="planner → executor (writer) → finalize, with a clarification.",
        input_model=AtelierInput,
        check_resume=check_clarification_answer,
        keep_message=writer_tokens_only,
    ),
    AssistantSpec("slow", build_slow, "slow", "Slow LLM steps."),
    AssistantSpec("burst", build_burst, "burst", "A burst of custom events."),
    AssistantSpec("boom", build_boom, "boom", "Fails."),
)

#: The `assistant_factory` of the service tests.
sample_assistants = registry(SAMPLE_ASSISTANTS)
