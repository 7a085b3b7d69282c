"""A drifting supervisor stays cheap and ends honestly (issue 32).

The real pipeline over the real OpenAI client against the scripted model of
`tests.app.atelier_llm`, its supervisor drifting in one of `DRIFT_SHAPES`: naming the
same agent again and again, with junk in its plan, its parallel agents or every
optional field, or a mix (the 276-call post of the last round). Calls are counted at
the scripted model. In each shape a normal-mode run calls the repeated agent at most
10 times, makes fewer than 60 LLM calls, and ends with a verdict that says what
happened: a post that the judge passed, or exhausted / failed with the reason —
never a pass it did not earn. A team stopped for lack of progress is not retried.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from nodes.finalize import STALLED_MESSAGE
from providers.llm import OpenAIModelFactory
from tests.app.atelier_llm import DRIFT_SHAPES, REPEATED, atelier_responder, drifting_supervisor
from tests.graphs.pipeline_runs import PipelineRun, judge_reply, run_pipeline
from tests.support.fake_models import fake_context
from tests.support.scripted_openai import ChatRequest, ScriptedOpenAIServer

pytestmark = pytest.mark.timeout(120)

#: The most calls of the repeated agent, and (exclusive) of all roles, a run may make.
MAX_REPEATED_CALLS = 10
MAX_CALLS = 60

#: Shapes whose steps keep adding nothing: the team stops early and the run fails.
STALLING = {"junk_plan", "junk_everywhere", "mixed", "alternating"}

_FORCED_ROLES = {
    "PlannerIntent": "planner",
    "JudgeVerdict": "critic",
    "SupervisorDecision": "supervisor",
    "CreativeBrief": "brief_compiler_agent",
    "EvidencePack": "research_evidence_agent",
    "search_knowledge": "research_evidence_agent",
    "ReferenceAnalysis": "reference_intelligence_agent",
    "LayoutSpec": "layout_planner_agent",
    "ImagePlans": "image_planner_agent",
    "ReviewResult": "review_agent",
}


def role_of(req: ChatRequest) -> str:
    """Name the role that sent a request, by the tool it forces or binds."""
    if req.forced_tool:
        return _FORCED_ROLES.get(req.forced_tool, req.forced_tool)
    if "SupervisorDecision" in req.tools:
        return "supervisor"
    if "EvidencePack" in req.tools:
        return "research_evidence_agent"
    if "generate_image" in req.tools:
        return "image_agent"
    return "writer_agent" if not req.tools else "other"


async def run_drifting(
    shape: str, root: Path, judge: Any = None
) -> tuple[PipelineRun, Counter[str]]:
    """Run the README's request in normal mode with the supervisor drifting in `shape`."""
    responder = atelier_responder(supervisor=drifting_supervisor(shape), judge=judge)
    with ScriptedOpenAIServer(responder) as server:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_base_url=server.base_url,
            llm_api_key="test-key",  # type: ignore[arg-type]
            llm_max_retries=0,
            llm_timeout=20,
        )
        ctx = fake_context(OpenAIModelFactory(settings), root)
        run = await run_pipeline(None, root, ctx=ctx, auto_confirm=True)
        calls = Counter(role_of(req) for req in server.requests)
    return run, calls


def stops(run: PipelineRun) -> list[dict[str, Any]]:
    """Return the fallbacks that ended the team because its steps added nothing."""
    return [
        e
        for _, e in run.events
        if e["type"] == "agent.fallback" and e["to"] == "__end__" and "added nothing" in e["detail"]
    ]


@pytest.mark.parametrize("shape", list(DRIFT_SHAPES))
async def test_a_drifting_supervisor_stays_cheap_and_ends_honestly(
    tmp_path: Path, shape: str
) -> None:
    run, calls = await run_drifting(shape, tmp_path)
    result = run.result

    assert calls[REPEATED] <= MAX_REPEATED_CALLS, calls
    assert sum(calls.values()) < MAX_CALLS, calls
    verdicts = [e for _, e in run.events if e["type"] == "critic.verdict"]
    if shape in STALLING:
        # The team stopped as capped, said so on the stream, and the attempt was not retried.
        assert stops(run) and all(e["reason"] == "cap" for e in stops(run))
        assert len(verdicts) == 1 and verdicts[0]["next"] == "finalize"
        assert not verdicts[0]["passed"]
        assert result["outcome"] in ("exhausted", "failed"), result
        assert result["message"].startswith(STALLED_MESSAGE)
    else:
        # Routing took the stuck turns over and the team made the whole post, which the
        # judge then passed: the pass is the judge's, on a real post.
        assert not stops(run)
        assert result["outcome"] == "completed", result["message"]
        assert result["quality"]["verdict"] == "passed" and result["quality"]["judge"] == "ok"
        assert result["post"]["blocks"] and len(result["images"]) == 1
    print(f"{shape}: {sum(calls.values())} calls, {calls[REPEATED]} {REPEATED}; {dict(calls)}")


@pytest.mark.parametrize("shape", sorted(STALLING))
async def test_a_stalled_attempt_is_not_retried_even_when_the_judge_never_passes(
    tmp_path: Path, shape: str
) -> None:
    run, calls = await run_drifting(shape, tmp_path, judge=judge_reply("needs_improvement", 0.5))

    verdicts = [e for _, e in run.events if e["type"] == "critic.verdict"]
    assert len(verdicts) == 1 and calls["planner"] == 1
    assert calls[REPEATED] <= MAX_REPEATED_CALLS and sum(calls.values()) < MAX_CALLS
    assert run.result["outcome"] in ("exhausted", "failed")
    assert run.result["message"].startswith(STALLED_MESSAGE)
