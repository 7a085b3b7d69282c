"""The executor: one attempt of the team (PRODUCT.md §1.2), run as a subgraph of the pipeline.

`make_executor(team)` returns the pipeline's `executor` node. The node invokes
the compiled team with the node's own config, so LangGraph treats the team as a
subgraph: `get_graph(xray=True)` draws its nodes under `executor`, streams carry
its events under the namespace `executor:<task_id>`, and it shares the run's
checkpointer, stream writer and context.

A wrapper rather than mounting the compiled team directly, because an attempt
must start fresh except for what the pipeline hands it:

- the team's input is built here (`team_input`): the request (with any
  clarification details), the planner's intent and constraints, the injected
  notes and style references, and on a retry `retry_context` =
  {review_verdict, review_feedback, review_reason, verified_items,
  previous_attempt_summary}, and why the run's supervisor drifted if an earlier
  attempt found it drifting (`supervisor_drifted`: the team then follows the stage
  order without asking it, docs/team.md); nothing else of the previous attempt
  leaks in;
- every `TeamOutput` field is written back, empty when this attempt did not
  produce it, so the critic never judges a stale artefact of an earlier attempt;
- the team runs under its own recursion limit, computed from this attempt's
  team limits by the `recursion_limit_for` the pipeline passes in
  (`graphs.team.team_recursion_limit`): a parent's `recursion_limit` would
  otherwise override the team's and could cut a legal team run short. Loop
  bounds live in state, not in recursion_limit;
- a team that fails (an LLM error after the client's retries, a team that
  exceeds its step bound) ends the attempt with `failure`, which the critic and
  finalize turn into outcome `failed` with a message a user can act on.

Emits `attempt.started` and the executor's stage events.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.pregel import Pregel
from langgraph.runtime import Runtime

from agentkit.chat import base_url_of, draft_text, post_message_update
from agentkit.context import AtelierContext, context_of
from agentkit.post import MODEL_CRASHED_MESSAGE, effective_request, post_platform
from agentkit.state import PipelineState, TeamInput, TeamOutput
from core.events import AttemptStarted, emit, stage_events
from providers.llm import model_crash

log = logging.getLogger(__name__)

#: What each `TeamOutput` field holds when an attempt did not produce it.
_EMPTY_OUTPUT: dict[str, Any] = {
    "body_blocks": [],
    "image_plans": [],
    "quality_scores": {},
    "generated_image_asset_ids": [],
    "images": [],
    "team_log": [],
}
TEAM_OUTPUT_FIELDS: tuple[str, ...] = tuple(
    sorted(TeamOutput.__required_keys__ | TeamOutput.__optional_keys__)
)

TEAM_FAILED_MESSAGE = (
    "创作团队在这一轮中途出错（模型服务不可用或超时，已自动重试）。请确认模型服务可用后重新生成。"
)
TEAM_STEPS_MESSAGE = (
    "创作团队在步数上限内没有完成这篇帖子。请把需求写得更具体，或调高 MAX_TEAM_STEPS。"
)


def team_input(state: PipelineState) -> TeamInput:
    """Build the team's input for the next attempt (see the module docstring)."""
    intent = dict(state.get("intent") or {})
    constraints = dict(intent.get("constraints") or {})
    image_count = state.get("image_count")
    if image_count is None and constraints.get("image_min") == constraints.get("image_max"):
        image_count = constraints.get("image_max")
    values: dict[str, Any] = {
        "request": effective_request(state),
        "platform": post_platform(state),
        "audience": intent.get("audience") or state.get("audience"),
        "constraints": constraints,
        "intent": intent,
        "reference_images": list(state.get("reference_images") or []),
        "reference_texts": [
            *(state.get("reference_texts") or []),
            *(state.get("style_references") or []),
        ],
        "layout_preference": state.get("layout_preference") or "balanced",
        "image_count": image_count,
        "image_provider": state.get("image_provider"),
        "knowledge_notes": list(state.get("knowledge_notes") or []),
        "retry_context": state.get("retry_context"),
        "limits": state.get("team_limits"),  # resolved at the run's start (agentkit.run_start)
        "brand": state.get("brand"),  # the writer's voice (agentkit.brand)
        # An earlier attempt's supervisor drifted: this one routes by the stage order.
        "supervisor_drifted": state.get("drifted"),
    }
    return TeamInput(**{k: v for k, v in values.items() if v is not None})  # type: ignore[typeddict-item]


def team_update(output: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return every `TeamOutput` field from the team's output, empty where it has none."""
    output = output or {}
    return {
        name: output.get(name) if output.get(name) is not None else _EMPTY_OUTPUT.get(name)
        for name in TEAM_OUTPUT_FIELDS
    }


def make_executor(
    team: Pregel, recursion_limit_for: Callable[[Mapping[str, Any]], int]
) -> Callable[..., Awaitable[dict[str, Any]]]:
    """Return the pipeline's `executor` node, which runs one fresh attempt of `team`.

    Args:
        team: The compiled team graph (input `TeamInput`, output `TeamOutput`).
        recursion_limit_for: Team limits → the `recursion_limit` its longest legal
            run needs.
    """

    async def executor(
        state: PipelineState, runtime: Runtime[AtelierContext], config: RunnableConfig
    ) -> dict[str, Any]:
        """Run the team once with this attempt's input and return its artefacts."""
        attempt = int(state.get("attempt") or 0) + 1
        writer = runtime.stream_writer
        max_attempts = max(int(state.get("max_attempts") or 1), attempt)
        emit(writer, AttemptStarted(attempt=attempt, max_attempts=max_attempts))
        with stage_events(writer, "executor", attempt):
            payload = team_input(state)
            team_config: RunnableConfig = {
                **config,
                "recursion_limit": recursion_limit_for(payload.get("limits") or {}),
            }
            try:
                output = await team.ainvoke(payload, team_config)
            except GraphBubbleUp:
                raise  # interrupts and other control flow belong to LangGraph
            except GraphRecursionError:
                log.warning("team exceeded its superstep bound", exc_info=True)
                return {**team_update(None), "failure": _failure(TEAM_STEPS_MESSAGE)}
            except Exception as exc:
                log.warning("team run failed", exc_info=True)
                crash = model_crash(exc)
                message = (
                    MODEL_CRASHED_MESSAGE.format(reason=crash) if crash else TEAM_FAILED_MESSAGE
                )
                return {**team_update(None), "failure": _failure(message)}
            update = {**team_update(output), "failure": None}
            content = update.get("generated_content")
            if content:  # the draft, in the conversation where its tokens streamed
                links = context_of(runtime).asset_links
                images = update.get("images") or []
                text = draft_text(content, images, base_url_of(config), links)
                message_id = update.get("draft_message_id")
                update.update(post_message_update(text, message_id, state.get("post_message_id")))
            return update

    return executor


def _failure(message: str) -> dict[str, Any]:
    return {"stage": "executor", "message": message}
