"""The critic loop end to end: every scenario of ../shared/cases/cycles.md, with fake models.

The whole pipeline runs — planner, rag, the real executor team (eight agents,
real PNG cards), critic, finalize — with scripted fake chat models; nothing
reaches a network. Scenario numbers follow cycles.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.errors import GraphRecursionError

from core.settings import Settings
from graphs.pipeline import (
    MAX_RETRY_COUNT_BOUND,
    build_pipeline,
    pipeline_recursion_limit,
    pipeline_supersteps,
)
from knowledge.notes import KnowledgeNote
from knowledge.repository import InMemoryNoteRepository
from tests.graphs.pipeline_runs import (
    BLOCKER_TEXT,
    context_for,
    judge_reply,
    models_for,
    planner_reply,
    rules_aware_brief,
    run_pipeline,
)
from tests.support.fake_models import (
    HAPPY_BODY,
    FakeModels,
    decision,
    happy_supervisor,
    happy_team,
)
from tests.support.slow_model import SlowChat

CYCLES = Path(__file__).resolve().parents[2].parent / "shared" / "cases" / "cycles.md"


def test_every_scenario_of_cycles_md_has_a_test() -> None:
    titles = re.findall(r"^\d+\. \*\*(.+?)\*\*", CYCLES.read_text(encoding="utf-8"), re.M)
    assert titles == [
        "Passes first time.",
        "Rejected twice, then passes.",
        "Never good enough.",
        "Judge down.",
        "Ignored blocker.",
        "Planner cannot tell what is wanted.",
    ]


def attempts_of(run: Any) -> list[int]:
    return [e["attempt"] for e in run.of_type("attempt.started")]


# --- 1. Passes first time ----------------------------------------------------------


async def test_1_passes_first_time(tmp_path: Path) -> None:
    run = await run_pipeline(models_for(judge_reply("passed", 0.9)), tmp_path)

    assert run.result["outcome"] == "completed"
    assert attempts_of(run) == [1]
    kinds = [e["type"] + (f"({e['stage']})" if "stage" in e else "") for e in run.pipeline_events]
    assert kinds == [
        "stage.started(planner)",
        "stage.completed(planner)",
        "stage.started(rag)",
        "knowledge.injected",
        "stage.completed(rag)",
        "attempt.started",
        "stage.started(executor)",
        "stage.completed(executor)",
        "stage.started(critic)",
        "critic.verdict",
        "attempt.completed",
        "stage.completed(critic)",
        "stage.started(finalize)",
        "stage.completed(finalize)",
    ]
    (verdict,) = run.of_type("critic.verdict")
    assert verdict["verdict"] == "passed" and verdict["passed"] and verdict["next"] == "finalize"
    assert verdict["attempt"] == 1 and verdict["max_attempts"] == 4
    assert run.of_type("attempt.completed") == [
        {"type": "attempt.completed", "attempt": 1, "max_attempts": 4, "verdict": "passed"}
    ]
    assert all(e["duration_ms"] >= 0 for e in run.of_type("stage.completed"))
    # The team ran as a subgraph: its events carry the executor's namespace.
    (namespace,) = run.team_namespaces
    assert namespace.startswith("executor:")
    # A real post with real image files.
    result = run.result
    assert result["post"]["title"] and result["post"]["blocks"] and result["post"]["tags"]
    assert len(result["images"]) == 1
    assert run.ctx.assets.path(result["images"][0]["asset_id"]) is not None
    assert result["quality"]["exhausted"] is False and result["quality"]["attempts"] == 1


# --- 2. Rejected twice, then passes --------------------------------------------------

FEEDBACK_1 = "第一轮：缺少具体价格区间。"
FEEDBACK_2 = "第二轮：成分解释不够通俗。"


async def test_2_rejected_twice_then_passes(tmp_path: Path) -> None:
    critic = [
        judge_reply("needs_improvement", 0.55, FEEDBACK_1),
        judge_reply("needs_improvement", 0.65, FEEDBACK_2),
        judge_reply("passed", 0.9),
    ]
    models = models_for(critic)
    run = await run_pipeline(models, tmp_path)

    assert run.result["outcome"] == "completed"
    assert attempts_of(run) == [1, 2, 3]
    assert [e["next"] for e in run.of_type("critic.verdict")] == ["rag", "rag", "finalize"]
    assert [a["feedback"].split("\n")[0] for a in run.result["attempts"][:2]] == [
        FEEDBACK_1,
        FEEDBACK_2,
    ]
    # Attempts 2 and 3 receive the previous verdict; the writer's and supervisor's prompts show it.
    writer = models.calls_for("writer_agent")
    assert len(writer) == 3
    assert FEEDBACK_1 not in writer[0].prompt
    assert FEEDBACK_1 in writer[1].prompt and FEEDBACK_2 not in writer[1].prompt
    assert FEEDBACK_2 in writer[2].prompt and FEEDBACK_1 not in writer[2].prompt
    for key in ("review_feedback", "review_verdict", "previous_attempt_summary"):
        assert key in writer[1].prompt
    supervisor_prompts = [c.prompt for c in models.calls_for("supervisor")]
    assert any(FEEDBACK_1 in p for p in supervisor_prompts)
    # Each attempt starts the team fresh: the first supervisor turn of every attempt
    # sees no artefact of the previous one.
    firsts = [p for p in supervisor_prompts if "第 1 / " in p]
    assert len(firsts) == 3
    assert all("✅" not in p for p in firsts)
    # The retry query carries the critic's feedback.
    queries = [e["query"] for e in run.of_type("knowledge.injected")]
    assert FEEDBACK_1 not in queries[0] and FEEDBACK_1 in queries[1] and FEEDBACK_2 in queries[2]


# --- 3. Never good enough ------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "published"),
    [((0.8, 0.8, 0.8, 0.8), 1), ((0.7, 0.85, 0.8, 0.75), 2)],
    ids=["always-0.8", "best-is-second"],
)
async def test_3_never_good_enough(
    tmp_path: Path, scores: tuple[float, ...], published: int
) -> None:
    models = models_for([judge_reply("passed", s) for s in scores])
    titles = iter(f"平价护肤第{n}版" for n in range(1, 5))
    models.script("writer_agent", lambda _m: f"# {next(titles)}\n\n{'成分讲清楚。' * 10}\n\n#护肤")
    ctx = context_for(models, tmp_path, critic_pass_threshold=0.9)
    run = await run_pipeline(models, tmp_path, ctx=ctx)

    assert attempts_of(run) == [1, 2, 3, 4]  # 1 + MAX_RETRY_COUNT (3)
    result = run.result
    assert result["outcome"] == "exhausted"
    assert result["quality"]["exhausted"] is True and result["quality"]["attempts"] == 4
    assert result["post"]["title"] == f"平价护肤第{published}版"
    assert result["quality"]["score"] == scores[published - 1]
    verdicts = run.of_type("critic.verdict")
    assert [v["threshold"] for v in verdicts] == [0.9] * 4
    assert [v["next"] for v in verdicts] == ["rag", "rag", "rag", "finalize"]
    assert [v["exhausted"] for v in verdicts] == [False, False, False, True]


def test_pipeline_superstep_formula() -> None:
    # (planner + 1 replan) + 4 attempts × (rag, executor, critic) + finalize
    assert pipeline_supersteps() == 15
    assert pipeline_recursion_limit() == 16  # + the tick that finds nothing left to run
    assert pipeline_supersteps(max_retry_count=0, max_replans=0) == 5


@pytest.mark.parametrize("limit", [pipeline_recursion_limit(), 10_000])
async def test_3_no_recursion_error_whatever_the_limit(tmp_path: Path, limit: int) -> None:
    models = models_for(judge_reply("passed", 0.8))
    ctx = context_for(models, tmp_path, critic_pass_threshold=0.9)
    run = await run_pipeline(models, tmp_path, ctx=ctx, config={"recursion_limit": limit})
    assert run.result["outcome"] == "exhausted" and attempts_of(run) == [1, 2, 3, 4]


async def test_the_most_retries_a_deployment_allows_need_no_recursion_limit(
    tmp_path: Path,
) -> None:
    # LangGraph's default limit was 25 before 1.2 (now 10 007): the graph carries the
    # limit its longest configurable run needs, so no server has to pass one and a
    # runaway loop still stops there.
    bound = Settings.model_fields["max_retry_count"].metadata
    assert any(getattr(rule, "le", None) == MAX_RETRY_COUNT_BOUND for rule in bound)
    needed = pipeline_recursion_limit(MAX_RETRY_COUNT_BOUND)
    assert build_pipeline().config["recursion_limit"] == needed
    models = models_for(judge_reply("passed", 0.8))
    ctx = context_for(
        models, tmp_path, critic_pass_threshold=0.9, max_retry_count=MAX_RETRY_COUNT_BOUND
    )
    run = await run_pipeline(models, tmp_path, ctx=ctx)
    assert run.result["outcome"] == "exhausted"
    assert attempts_of(run) == list(range(1, MAX_RETRY_COUNT_BOUND + 2))


def longest_run_models() -> FakeModels:
    """Script the longest legal run: a replan after attempt 1, then three rejections."""
    team = happy_team(1)
    models = FakeModels(
        {
            **team,
            "brief_compiler_agent": rules_aware_brief(team["brief_compiler_agent"], BLOCKER_TEXT),
            "planner": planner_reply(),
            "critic": judge_reply("passed", 0.8),
        }
    )
    return models


def blocker_vault() -> InMemoryNoteRepository:
    note = KnowledgeNote.model_validate(
        {
            "id": "rule-absolute",
            "type": "blocker",
            "status": "approved",
            "content": BLOCKER_TEXT,
            "tags": ["平价护肤", "广告法"],
        }
    )
    return InMemoryNoteRepository([note])


async def test_the_longest_legal_run_needs_exactly_the_recursion_limit(tmp_path: Path) -> None:
    limit = pipeline_recursion_limit()

    async def longest(recursion_limit: int) -> Any:
        models = longest_run_models()
        ctx = context_for(models, tmp_path, critic_pass_threshold=0.9, notes=blocker_vault())
        return await run_pipeline(
            models, tmp_path, ctx=ctx, config={"recursion_limit": recursion_limit}
        )

    run = await longest(limit)
    stages = [e["stage"] for e in run.of_type("stage.started")]
    assert stages.count("planner") == 2 and attempts_of(run) == [1, 2, 3, 4]
    assert len(stages) == pipeline_supersteps() == limit - 1  # one superstep per node run
    assert run.result["outcome"] == "exhausted"
    # One less and LangGraph's safety net fires: the bound above is tight.
    with pytest.raises(GraphRecursionError):
        await longest(limit - 1)


# --- 4. Judge down ------------------------------------------------------------------


async def test_4_judge_raises_and_the_code_checks_decide(tmp_path: Path) -> None:
    def down(_messages: list[BaseMessage]) -> Any:
        raise ConnectionError("judge endpoint unreachable")

    run = await run_pipeline(models_for(down), tmp_path)
    (verdict,) = run.of_type("critic.verdict")
    assert verdict["judge"] == "unavailable" and all(c["passed"] for c in verdict["checks"])
    # Not a pass and no score: the verdict says it was not judged, everywhere.
    assert verdict["verdict"] == "not_judged" and not verdict["passed"]
    assert verdict["score"] is None and verdict["next"] == "finalize"
    quality = run.result["quality"]
    assert run.result["outcome"] == "completed" and quality["judge"] == "unavailable"
    assert quality["verdict"] == "not_judged" and quality["score"] is None
    assert run.result["attempts"][0]["score"] is None
    assert "未评审" in run.result["message"] and not re.search(r"\d\.\d", run.result["message"])
    (report,) = [c for c in run.result["ui"] if c["component"] == "QualityReport"]
    assert report["props"]["score"] is None and report["props"]["verdict"] == "not_judged"


async def test_4_judge_times_out_and_a_failing_check_never_passes(tmp_path: Path) -> None:
    models = models_for(judge_reply())
    ctx = context_for(models, tmp_path, critic_timeout=0.05)
    ctx.models = lambda role: SlowChat() if role == "critic" else models(role)
    run = await run_pipeline(models, tmp_path, ctx=ctx, constraints={"title_max": 5})

    verdicts = run.of_type("critic.verdict")
    assert len(verdicts) == 4
    for verdict in verdicts:
        assert verdict["judge"] == "unavailable" and verdict["passed"] is False
        assert verdict["score"] is None and verdict["verdict"] == "needs_improvement"
        (title,) = [c for c in verdict["checks"] if c["name"] == "title_length"]
        assert title["passed"] is False and title["measured"] > 5
    assert run.result["outcome"] == "exhausted" and run.result["quality"]["score"] is None
    assert "未评审" in run.result["message"]


# --- 5. Ignored blocker ----------------------------------------------------------------


async def test_5_ignored_blocker_replans_once(tmp_path: Path) -> None:
    team = happy_team(1)
    models = FakeModels(
        {
            **team,
            "brief_compiler_agent": rules_aware_brief(team["brief_compiler_agent"], BLOCKER_TEXT),
            "planner": planner_reply(),
            "critic": judge_reply("passed", 0.9),
        }
    )
    ctx = context_for(models, tmp_path, notes=blocker_vault())
    run = await run_pipeline(models, tmp_path, ctx=ctx)

    injected = run.of_type("knowledge.injected")
    assert [n["id"] for n in injected[0]["notes"]] == ["rule-absolute"]
    (deviation,) = run.of_type("knowledge.deviation")  # only after attempt 1
    assert deviation["alert_type"] == "replan_required" and deviation["severity"] == "high"
    assert deviation["ignored_notes"] == ["rule-absolute"]
    verdicts = run.of_type("critic.verdict")
    assert [v["next"] for v in verdicts] == ["planner", "finalize"]
    stages = [e["stage"] for e in run.of_type("stage.started")]
    assert stages.count("planner") == 2  # back to the planner once
    assert [m.type for m in run.state["messages"]] == ["human", "ai"]  # the replan adds none
    # The note is in the replanning planner's context and in the next attempt's brief.
    planner_calls = models.calls_for("planner")
    assert len(planner_calls) == 2
    assert BLOCKER_TEXT not in planner_calls[0].prompt
    assert BLOCKER_TEXT in planner_calls[1].prompt
    assert BLOCKER_TEXT in run.state["intent"]["rules"]
    assert BLOCKER_TEXT in run.state["creative_brief"]["constraints"]  # the model wrote it
    assert run.result["outcome"] == "completed"
    assert run.ctx.coordinator.get_session_summary(run.state["session_id"])["total_deviations"] == 1
    # Attempt 1's writer did see the rule, copied into the brief's house rules by code;
    # that copy is not the team acting on the note, so it did not stop the replan.
    first_brief = brief_in(models.calls_for("writer_agent")[0].prompt)
    assert first_brief["house_rules"] == [BLOCKER_TEXT]
    assert BLOCKER_TEXT not in first_brief["constraints"]


def brief_in(prompt: str) -> dict[str, Any]:
    """Return the creative brief an agent's prompt showed."""
    match = re.search(r"<<<创作简报>>>\n(.*?)\n<<<end 创作简报>>>", prompt, re.S)
    assert match is not None, "no brief in the prompt"
    brief: dict[str, Any] = json.loads(match.group(1))
    return brief


#: The happy post (no absolute claim: the critic's ad_law check), saying it keeps to the rule.
RULE_ABIDING_BODY = HAPPY_BODY + "\n\n全文不用绝对化用语，功效不夸大。"


@pytest.mark.parametrize("addressed_by", ["writer", "supervisor"])
async def test_5_a_blocker_the_team_addresses_raises_no_alert(
    tmp_path: Path, addressed_by: str
) -> None:
    # The brief compiler leaves the rule out of the constraints it writes; code still
    # copies it into the brief's house rules. The writer's post, or the supervisor's
    # guidance, is what addresses it.
    team = happy_team(1, body=RULE_ABIDING_BODY if addressed_by == "writer" else HAPPY_BODY)
    if addressed_by == "supervisor":

        def supervisor(messages: list[BaseMessage]) -> Any:
            reply = happy_supervisor(messages)
            (call,) = reply.tool_calls
            args = {**call["args"], "guidance": call["args"]["guidance"] + "全文避免绝对化用语。"}
            return decision(**args)

        team["supervisor"] = supervisor
    models = FakeModels({**team, "planner": planner_reply(), "critic": judge_reply("passed", 0.9)})
    ctx = context_for(models, tmp_path, notes=blocker_vault())
    run = await run_pipeline(models, tmp_path, ctx=ctx)

    assert [n["id"] for n in run.of_type("knowledge.injected")[0]["notes"]] == ["rule-absolute"]
    assert run.state["creative_brief"]["house_rules"] == [BLOCKER_TEXT]
    assert BLOCKER_TEXT not in run.state["creative_brief"]["constraints"]
    assert run.of_type("knowledge.deviation") == []
    assert [v["next"] for v in run.of_type("critic.verdict")] == ["finalize"]
    assert [e["stage"] for e in run.of_type("stage.started")].count("planner") == 1
    assert attempts_of(run) == [1] and run.result["outcome"] == "completed"
    (verdict,) = run.of_type("critic.verdict")
    (deviation_check,) = [c for c in verdict["checks"] if c["name"] == "knowledge_deviation"]
    assert deviation_check["passed"] is True


# --- 6. Planner cannot tell what is wanted -------------------------------------------


async def test_6_unknown_intent_needs_clarification(tmp_path: Path) -> None:
    reply = planner_reply(action="unknown", message="请告诉我想写什么主题、给谁看。")
    models = models_for(judge_reply(), planner=reply)
    run = await run_pipeline(models, tmp_path, request="嗯……随便吧", auto_confirm=True)

    assert run.result["outcome"] == "needs_clarification"
    assert run.result["message"] == "请告诉我想写什么主题、给谁看。"
    assert models.roles_called() == ["planner"]  # no team work, no judge
    assert [e["stage"] for e in run.of_type("stage.started")] == ["planner", "finalize"]
    assert [c["component"] for c in run.result["ui"]] == ["ActionPanel"]


# --- failures end in a result, never an exception --------------------------------------


async def test_a_planner_llm_failure_finalizes_as_failed(tmp_path: Path) -> None:
    def down(_messages: list[BaseMessage]) -> Any:
        raise TimeoutError("upstream timed out (key sk-abc)")

    models = models_for(judge_reply(), planner=down)
    run = await run_pipeline(models, tmp_path)
    assert run.result["outcome"] == "failed"
    assert "sk-abc" not in str(run.result) and "重试" in run.result["message"]


async def test_a_team_llm_failure_finalizes_as_failed(tmp_path: Path) -> None:
    def down(_messages: list[BaseMessage]) -> Any:
        raise ConnectionError("writer model down at 10.0.0.9")

    models = models_for(judge_reply())
    models.script("writer_agent", down)
    run = await run_pipeline(models, tmp_path)
    assert run.result["outcome"] == "failed"
    assert "10.0.0.9" not in str(run.result)
    (verdict,) = run.of_type("critic.verdict")
    assert verdict["verdict"] == "failed" and verdict["judge"] == "skipped"
    assert models.count("critic") == 0


async def test_fast_mode_makes_one_attempt(tmp_path: Path) -> None:
    models = models_for(judge_reply("needs_improvement", 0.5))
    run = await run_pipeline(models, tmp_path, fast_mode=True)
    assert attempts_of(run) == [1]
    assert run.result["outcome"] == "exhausted" and run.result["quality"]["attempts"] == 1


async def test_ainvoke_returns_only_the_result(tmp_path: Path) -> None:
    models = models_for(judge_reply())
    output = await build_pipeline().ainvoke(
        {"request": "写一篇学生党平价护肤笔记，直接生成", "image_count": 1},
        context=context_for(models, tmp_path),
    )
    assert set(output) == {"result"} and output["result"]["outcome"] == "completed"
