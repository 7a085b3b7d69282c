"""Run the pipeline in tests and keep what a client would see: final state and events."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from agentkit.context import AtelierContext
from graphs.pipeline import build_pipeline
from tests.support.fake_models import FakeModels, Responder, fake_context, happy_team, tool_call

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
BLOCKER_TEXT = "禁止使用绝对化用语（最、第一、顶级）"


def planner_reply(**overrides: Any) -> AIMessage:
    """Return a PlannerIntent reply (create_post about 平价护肤 unless overridden)."""
    args: dict[str, Any] = {
        "action": "create_post",
        "topic": "平价护肤",
        "audience": "大学生",
        "goal": "讲清楚成分",
        "style": "亲切",
        "platform": "xiaohongshu",
        "constraints": {},
        "confidence": 0.9,
    }
    args.update(overrides)
    return tool_call("PlannerIntent", **args)


def judge_reply(
    verdict: str = "passed", score: float = 0.9, feedback: str = "结构清楚，可以发布。"
) -> AIMessage:
    """Return a JudgeVerdict reply."""
    return tool_call(
        "JudgeVerdict",
        verdict=verdict,
        score=score,
        feedback=feedback,
        suggestions=["补充一个使用场景"],
        dimensions=dict.fromkeys(
            ("infoDensity", "textImageAlignment", "styleConsistency", "readability", "platformFit"),
            score,
        ),
    )


def models_for(
    critic: Responder, *, planner: Responder | None = None, images: int = 1, **team: Any
) -> FakeModels:
    """Return fake models: the happy team for `images` images, a planner and the given judge."""
    return FakeModels(
        {**happy_team(images, **team), "planner": planner or planner_reply(), "critic": critic}
    )


def rules_aware_brief(good: Responder, rule: str) -> Responder:
    """Return a brief compiler that writes `rule` into its constraints only once told to.

    Until the planner's intent carries rules it answers with `good`, a brief that
    says nothing about the rule (the code-copied `house_rules` do not count as the
    team addressing it); after a replan the intent's `rules` list is no longer
    empty and the brief's constraints name the rule.
    """

    def respond(messages: list[BaseMessage]) -> Any:
        reply = good(messages) if callable(good) else good
        prompt = "\n".join(str(m.content) for m in messages)
        if '"rules":[]' in prompt or not isinstance(reply, AIMessage) or not reply.tool_calls:
            return reply
        (call,) = reply.tool_calls
        args = {**call["args"], "constraints": [*call["args"].get("constraints", []), rule]}
        return AIMessage(content="", tool_calls=[{**call, "args": args}])

    return respond


@dataclass
class PipelineRun:
    """One pipeline run, as a client streaming it with subgraphs would see it."""

    state: dict[str, Any]  # the last top-level `values` chunk
    events: list[tuple[tuple[str, ...], dict[str, Any]]]  # (namespace, custom event)
    models: FakeModels
    ctx: AtelierContext
    interrupts: list[Any] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        """Return the result payload."""
        return self.state["result"]

    @property
    def pipeline_events(self) -> list[dict[str, Any]]:
        """Return the events the pipeline's own nodes emitted, in order."""
        return [event for ns, event in self.events if not ns]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """Return the pipeline-level events of one type."""
        return [e for e in self.pipeline_events if e["type"] == kind]

    @property
    def team_namespaces(self) -> set[str]:
        """Return the namespaces the team's events came from."""
        return {ns[0] for ns, _ in self.events if ns}


def context_for(models: Any, root: Path, **overrides: Any) -> AtelierContext:
    """Return a test context (fake models, assets under `root`)."""
    return fake_context(models, root, **overrides)


async def run_pipeline(
    models: Any,
    root: Path,
    *,
    ctx: AtelierContext | None = None,
    config: dict[str, Any] | None = None,
    graph: Any = None,
    payload: Any = None,
    **pipeline_input: Any,
) -> PipelineRun:
    """Run the pipeline (request `REQUEST` and one image by default); collect state and events.

    `payload` replaces the input (e.g. a `Command(resume=...)`); `graph` a
    compiled pipeline (e.g. one with a checkpointer).
    """
    context = ctx or context_for(models, root)
    pipeline = graph or build_pipeline()
    if payload is None:
        payload = {"request": REQUEST, "image_count": 1, **pipeline_input}
    run = PipelineRun(state={}, events=[], models=models, ctx=context)
    async for ns, mode, chunk in pipeline.astream(
        payload,
        context=context,
        config=config,
        stream_mode=["custom", "values", "updates"],
        subgraphs=True,
    ):
        if mode == "custom":
            run.events.append((ns, chunk))
        elif mode == "values" and not ns:
            run.state = chunk
        elif mode == "updates" and not ns and "__interrupt__" in chunk:
            run.interrupts.extend(chunk["__interrupt__"])
    return run
