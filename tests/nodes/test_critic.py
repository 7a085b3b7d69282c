"""The critic: its three layers, its decision and what it tells the next attempt."""

from __future__ import annotations

import asyncio
import io
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from PIL import Image

from agentkit.pipeline_routing import route_from_critic
from knowledge.coordinator import KnowledgeCoordinator
from knowledge.deviation import AlertSeverity, AlertType, action_text
from nodes.brief_compiler_agent import brief_compiler_agent
from nodes.critic import code_checks, critic, team_actions
from tests.support.fake_models import FakeModels, fake_context, tool_call
from tests.support.slow_model import SlowChat

BODY = "预算有限也能把皮肤照顾好。早晚用氨基酸洁面，白天认真防晒，保湿选含甘油的乳液就够了。"
BLOCKER = {
    "id": "rule-absolute",
    "type": "blocker",
    "content": "禁止使用绝对化用语（最、第一、顶级）",
    "tags": [],
    "score": 1.0,
}


def judge(verdict: str = "passed", score: float = 0.9, feedback: str = "不错") -> Any:
    return tool_call(
        "JudgeVerdict",
        verdict=verdict,
        score=score,
        feedback=feedback,
        suggestions=["加一个使用场景"],
        dimensions={"infoDensity": 0.8, "readability": 0.9},
    )


def attempt_state(title: str = "学生党平价护肤指南", **overrides: Any) -> dict[str, Any]:
    state: dict[str, Any] = {
        "request": "写一篇小红书笔记：平价护肤，学生党友好",
        "session_id": "thread-critic",
        "max_attempts": 4,
        "attempt": 0,
        "replans": 0,
        "attempts": [],
        "intent": {"action": "create_post", "topic": "平价护肤", "constraints": {}},
        "generated_content": {"title": title, "body": BODY, "tags": ["护肤", "学生党"]},
        "knowledge_notes": [],
        "team_log": [],
    }
    state.update(overrides)
    return state


def with_card(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Give a hand-made attempt the card a team's attempt has (a 小红书 note needs one image)."""
    if "generated_image_asset_ids" in state or "images" in state:
        return state
    buffer = io.BytesIO()
    Image.new("RGB", (30, 40), "white").save(buffer, format="PNG")
    return {**state, "generated_image_asset_ids": [ctx.assets.put(buffer.getvalue()).asset_id]}


async def run_critic(
    state: dict[str, Any], ctx: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    state = with_card(state, ctx)
    update = await critic(state, Runtime(context=ctx, stream_writer=events.append))
    return update, events


def verdict_event(events: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in events if e["type"] == "critic.verdict"]
    return event


def check(events_or_verdict: dict[str, Any], name: str) -> dict[str, Any]:
    (row,) = [c for c in events_or_verdict["checks"] if c["name"] == name]
    return row


# --- layer 1: a 15-character title, whatever the judge says ---------------------------

TITLE_15 = "学生党平价护肤成分全解析三步走"  # 15 characters
TITLE_14 = "学生党平价护肤成分全解析三步"  # 14 characters


@pytest.mark.parametrize(
    ("title", "judge_reply", "title_passes", "passed"),
    [
        (TITLE_14, judge("passed", 0.95), False, False),
        (TITLE_14, judge("failed", 0.1), False, False),
        (TITLE_15, judge("failed", 0.1), True, False),
        (TITLE_15, judge("passed", 0.95), True, True),
    ],
)
async def test_a_15_character_title_constraint(
    tmp_path: Path, title: str, judge_reply: Any, title_passes: bool, passed: bool
) -> None:
    ctx = fake_context(FakeModels({"critic": judge_reply}), tmp_path)
    constraints = {"title_min": 15, "title_max": 15}
    state = attempt_state(title, intent={"action": "create_post", "constraints": constraints})
    update, events = await run_critic(state, ctx)
    row = check(verdict_event(events), "title_length")
    assert row["passed"] is title_passes
    assert row["measured"] == (15 if title_passes else 14)
    assert row["expected"] == "15"
    assert update["verdict"]["passed"] is passed


# --- layer 1: image files ----------------------------------------------------------


async def test_missing_image_files_fail_and_are_reported_by_asset_id(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"critic": judge()}), tmp_path)
    buffer = tmp_path / "card.png"
    Image.new("RGB", (30, 40), "white").save(buffer)
    stored = ctx.assets.put(buffer.read_bytes()).asset_id
    missing = "0" * 32
    state = attempt_state(
        generated_image_asset_ids=[stored, missing],
        intent={"action": "create_post", "constraints": {"image_min": 2, "image_max": 2}},
    )
    results = {r.name: r for r in code_checks(state, ctx)}
    assert results["image_count"].passed and results["image_count"].measured == 2
    assert not results["image_files"].passed
    assert results["image_files"].measured == [missing]
    assert str(tmp_path) not in results["image_files"].detail  # no server paths

    state["generated_image_asset_ids"] = [stored]
    state["intent"]["constraints"] = {"image_min": 1, "image_max": 1}
    results = {r.name: r for r in code_checks(state, ctx)}
    assert results["image_files"].passed


# --- layer 3: the judge ------------------------------------------------------------


async def test_the_judge_is_told_todays_date(tmp_path: Path) -> None:
    models = FakeModels({"critic": judge()})
    ctx = fake_context(models, tmp_path, today=lambda: date(2031, 5, 17))
    await run_critic(attempt_state(), ctx)
    (call,) = models.calls_for("critic")
    assert "2031-05-17" in call.prompt
    assert call.forced_tool == "JudgeVerdict"


async def test_a_failing_judge_leaves_the_verdict_to_the_code_checks(tmp_path: Path) -> None:
    def down(_messages: list[BaseMessage]) -> Any:
        raise ConnectionError("judge at 10.1.2.3 down, key sk-live-123")

    ctx = fake_context(FakeModels({"critic": down}), tmp_path)
    update, events = await run_critic(attempt_state(), ctx)
    event = verdict_event(events)
    # Every code check passed, and the verdict says it was not judged: no pass, no score.
    assert event["judge"] == "unavailable" and event["verdict"] == "not_judged"
    assert event["passed"] is False and event["score"] is None
    assert update["verdict"]["score"] is None and update["attempts"][-1]["score"] is None
    assert event["next"] == "finalize" and event["exhausted"] is False
    assert "sk-live-123" not in str(event) and "10.1.2.3" not in str(update)

    # …but never a silent pass over a failing check.
    constraints = {"title_max": 3}
    state = attempt_state(intent={"action": "create_post", "constraints": constraints})
    update, events = await run_critic(state, ctx)
    event = verdict_event(events)
    assert event["judge"] == "unavailable" and event["passed"] is False
    assert event["verdict"] == "needs_improvement" and event["score"] is None
    assert event["next"] == "rag"


async def test_a_slow_judge_times_out(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels(), tmp_path, critic_timeout=0.05)
    ctx.models = lambda role: SlowChat()
    loop = asyncio.get_running_loop()
    started = loop.time()
    update, events = await run_critic(attempt_state(), ctx)
    assert loop.time() - started < 5
    event = verdict_event(events)
    assert event["judge"] == "unavailable" and event["score"] is None
    assert "not judged" in update["verdict"]["reasons"][-1]


async def test_a_judge_scoring_on_a_1_to_10_scale_gets_a_verdict_not_unavailable(
    tmp_path: Path,
) -> None:
    dims = {"infoDensity": 8, "textImageAlignment": "7", "readability": 9.5, "platformFit": 6}
    reply = tool_call("JudgeVerdict", verdict="passed", score=7, feedback="好", dimensions=dims)
    ctx = fake_context(FakeModels({"critic": reply}), tmp_path)
    _, events = await run_critic(attempt_state(), ctx)
    event = verdict_event(events)
    assert event["judge"] == "ok" and event["verdict"] == "passed" and event["passed"]
    assert event["score"] == 0.7
    assert event["dimensions"] == {
        "infoDensity": 0.8,
        "textImageAlignment": 0.7,
        "readability": 0.95,
        "platformFit": 0.6,
    }


def test_the_judge_and_the_review_read_scores_the_same_way() -> None:
    from agentkit.common import QualityDimensions
    from agentkit.state import QUALITY_DIMENSIONS
    from nodes.critic import JudgeVerdict
    from nodes.review_agent import ReviewResult

    # One model of the dimensions, for both, with the dimensions in their priority order.
    assert tuple(QualityDimensions.model_fields) == QUALITY_DIMENSIONS
    for model in (JudgeVerdict, ReviewResult):
        assert "QualityDimensions" in str(model.model_fields["dimensions"].annotation)

    for raw in (0.7, 7, "7", "70%", 70):
        judged = JudgeVerdict.model_validate({"verdict": "passed", "score": raw}).score
        reviewed = ReviewResult.model_validate({"score": raw}).score
        assert judged == reviewed == pytest.approx(0.7)
        judged_dim = JudgeVerdict.model_validate(
            {"verdict": "passed", "score": 1, "dimensions": {"readability": raw}}
        ).dimensions
        reviewed_dim = ReviewResult.model_validate({"dimensions": {"readability": raw}}).dimensions
        assert judged_dim is not None
        judged_dim, reviewed_dim = judged_dim.readability, reviewed_dim.readability
        assert judged_dim == reviewed_dim == pytest.approx(0.7)


def test_the_embedded_model_gets_a_judge_timeout_that_fits_a_cpu_model(tmp_path: Path) -> None:
    from agentkit.services import build_context
    from core.settings import ENDPOINT_CRITIC_TIMEOUT, Settings

    def timeout(**values: Any) -> float:
        values = {"llm_base_url": None, "critic_timeout": None, **values}
        settings = Settings(_env_file=None, data_dir=tmp_path, **values)  # type: ignore[call-arg]
        return build_context(settings, models=FakeModels()).critic_timeout

    embedded = timeout()
    assert embedded == Settings.model_fields["local_model_critic_timeout"].default
    assert embedded >= 60 > ENDPOINT_CRITIC_TIMEOUT
    assert timeout(llm_base_url="http://127.0.0.1:9/v1") == ENDPOINT_CRITIC_TIMEOUT
    # CRITIC_TIMEOUT, when set, bounds the judge on any model.
    assert timeout(critic_timeout=5) == 5
    assert timeout(critic_timeout=5, llm_base_url="http://127.0.0.1:9/v1") == 5
    assert timeout(local_model_critic_timeout=300) == 300


# --- layer 1: prose for people -------------------------------------------------------


async def test_prompt_markup_on_an_image_card_fails_the_code_checks(tmp_path: Path) -> None:
    from nodes.critic import card_texts

    plans = [{"slot": 1, "type": "cover", "desc": "封面", "prompt": "平铺"}]
    state = attempt_state(
        creative_brief={"topic": "平价护肤", "goal": "<<<用户请求>>>"},
        image_plans=plans,
        images=[{"slot": 1, "asset_id": "x", "alt": "封面"}],
    )
    assert "<<<用户请求>>>" in card_texts(state)
    checks = {c.name: c for c in code_checks(state, fake_context(FakeModels(), tmp_path))}
    assert checks["data_markup"].passed is False
    assert checks["data_markup"].measured == ["<<<用户请求>>>"]


# --- layer 2: deviation ------------------------------------------------------------


async def test_an_ignored_blocker_sends_the_run_back_to_the_planner_once(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"critic": judge("passed", 0.95)}), tmp_path)
    state = attempt_state(knowledge_notes=[BLOCKER])
    update, events = await run_critic(state, ctx)

    (deviation,) = [e for e in events if e["type"] == "knowledge.deviation"]
    assert deviation["alert_type"] == "replan_required" and deviation["severity"] == "high"
    assert deviation["ignored_notes"] == ["rule-absolute"]
    assert update["verdict"]["passed"] is False  # even though the judge liked it
    assert update["verdict"]["replan"] is True
    assert verdict_event(events)["next"] == "planner"
    assert update["replans"] == 1
    assert update["replan_notes"] == [
        {"id": "rule-absolute", "type": "blocker", "content": BLOCKER["content"]}
    ]

    # The replan is spent: the same deviation now retries from rag (the next attempt's
    # executor stamps its draft as the team's).
    again, events = await run_critic({**state, **update, "draft_source": "team"}, ctx)
    assert again["verdict"]["replan"] is False and verdict_event(events)["next"] == "rag"
    assert again["replans"] == 1


async def test_a_brief_that_carries_the_rule_raises_no_alert(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"critic": judge()}), tmp_path)
    brief = {"topic": "平价护肤", "constraints": ["避免绝对化用语"]}
    state = attempt_state(knowledge_notes=[BLOCKER], creative_brief=brief)
    update, events = await run_critic(state, ctx)
    assert not [e for e in events if e["type"] == "knowledge.deviation"]
    assert update["verdict"]["passed"] is True


async def test_a_rule_only_code_copied_into_the_brief_does_not_count_as_addressed(
    tmp_path: Path,
) -> None:
    ctx = fake_context(FakeModels({"critic": judge("passed", 0.95)}), tmp_path)
    brief = {"topic": "平价护肤", "constraints": [], "house_rules": [BLOCKER["content"]]}
    state = attempt_state(knowledge_notes=[BLOCKER], creative_brief=brief)
    update, events = await run_critic(state, ctx)

    (deviation,) = [e for e in events if e["type"] == "knowledge.deviation"]
    assert deviation["alert_type"] == "replan_required"
    assert update["verdict"]["replan"] is True and verdict_event(events)["next"] == "planner"
    (brief_action,) = [a for a in team_actions(state) if a["type"] == "creative_brief"]
    assert "house_rules" not in brief_action["content"]


def test_team_actions_are_guidance_focus_brief_post_and_image_prompts() -> None:
    state = attempt_state(
        creative_brief={"topic": "护肤"},
        team_log=[
            {"step": 1, "guidance": "先写简报", "focus_areas": ["合规"]},
            {"step": 2, "guidance": "", "focus_areas": []},
        ],
        image_plans=[{"slot": 1, "type": "cover", "desc": "封面", "prompt": "产品平铺"}],
    )
    kinds = [a["type"] for a in team_actions(state)]
    assert kinds == [
        "supervisor_guidance",
        "focus_areas",
        "creative_brief",
        "generated_content",
        "image_prompts",
    ]
    (plans,) = [a["content"] for a in team_actions(state) if a["type"] == "image_prompts"]
    assert plans == [{"desc": "封面", "prompt": "产品平铺"}]


def test_team_actions_read_only_the_brief_fields_the_model_writes() -> None:
    brief = {
        "topic": "平价护肤",
        "audience": "大学生",
        "goal": "讲清成分",
        "constraints": ["不夸大"],
        "keywords": ["护肤"],
        "house_rules": [BLOCKER["content"]],
        "added_by_code_later": BLOCKER["content"],  # an allow-list, not a deny-list
    }
    state = attempt_state(creative_brief=brief)
    (brief_action,) = [a for a in team_actions(state) if a["type"] == "creative_brief"]
    assert set(brief_action["content"]) == {"topic", "audience", "goal", "constraints", "keywords"}
    assert "绝对化" not in action_text(team_actions(state))


async def test_the_real_brief_compilers_house_rules_do_not_address_a_blocker(
    tmp_path: Path,
) -> None:
    """A blocker only code copied into the brief, ignored by every model: REPLAN_REQUIRED."""
    brief_reply = tool_call(
        "CreativeBrief",
        topic="平价护肤",
        audience="大学生",
        goal="讲清成分",
        constraints=["不夸大功效"],
        keywords=["护肤", "学生党"],
    )
    models = FakeModels({"brief_compiler_agent": brief_reply, "critic": judge("passed", 0.95)})
    ctx = fake_context(models, tmp_path)
    team_state: dict[str, Any] = {"request": "写一篇平价护肤笔记", "knowledge_notes": [BLOCKER]}
    compiled = await brief_compiler_agent(team_state, Runtime(context=ctx))
    brief = compiled["creative_brief"]
    assert brief["house_rules"] == [BLOCKER["content"]]  # code copied it: agents still see it

    state = attempt_state(
        knowledge_notes=[BLOCKER],
        creative_brief=brief,
        team_log=[{"step": 1, "guidance": "写简报", "focus_areas": ["学生党"]}],
        image_plans=[{"slot": 1, "desc": "封面", "prompt": "产品平铺，柔和自然光"}],
    )
    alert = KnowledgeCoordinator().check_deviation("s", team_actions(state), [BLOCKER])
    assert alert is not None and alert.alert_type is AlertType.REPLAN_REQUIRED
    assert alert.severity is AlertSeverity.HIGH and alert.ignored_ids == ["rule-absolute"]

    update, events = await run_critic(state, ctx)
    (deviation,) = [e for e in events if e["type"] == "knowledge.deviation"]
    assert deviation["alert_type"] == "replan_required"
    assert update["verdict"]["replan"] is True and verdict_event(events)["next"] == "planner"


BRIEF_WITH_HOUSE_RULE = {
    "topic": "平价护肤",
    "constraints": [],
    "house_rules": [BLOCKER["content"]],  # code's copy: addresses nothing
}


@pytest.mark.parametrize(
    "addressed_by",
    [
        {"creative_brief": {**BRIEF_WITH_HOUSE_RULE, "constraints": ["避免绝对化用语"]}},
        {"team_log": [{"step": 1, "guidance": "注意不要用绝对化用语", "focus_areas": []}]},
        {"team_log": [{"step": 1, "guidance": "", "focus_areas": ["不用绝对化用语"]}]},
        {"generated_content": {"title": "平价护肤", "body": BODY + "全文不用绝对化用语。"}},
        {"image_plans": [{"slot": 1, "desc": "封面", "prompt": "画面文字不含绝对化用语"}]},
    ],
    ids=["brief", "guidance", "focus", "post", "image-prompt"],
)
def test_a_blocker_any_model_addressed_raises_no_alert(addressed_by: dict[str, Any]) -> None:
    state = attempt_state(**{"creative_brief": BRIEF_WITH_HOUSE_RULE, **addressed_by})
    assert KnowledgeCoordinator().check_deviation("s", team_actions(state), [BLOCKER]) is None


# --- decision ----------------------------------------------------------------------


async def test_a_rejection_feeds_the_next_attempt(tmp_path: Path) -> None:
    ctx = fake_context(
        FakeModels({"critic": judge("needs_improvement", 0.6, "缺少价格")}), tmp_path
    )
    update, events = await run_critic(attempt_state(), ctx)
    assert update["attempt"] == 1
    assert route_from_critic({**attempt_state(), **update}) == "rag"
    retry = update["retry_context"]
    assert set(retry) == {
        "review_verdict",
        "review_feedback",
        "review_reason",
        "verified_items",
        "previous_attempt_summary",
    }
    assert retry["review_verdict"] == "needs_improvement"
    assert "缺少价格" in retry["review_feedback"] and "加一个使用场景" in retry["review_feedback"]
    assert "0.60 < threshold 0.70" in retry["review_reason"]
    assert any(item.startswith("answer_length") for item in retry["verified_items"])
    assert "学生党平价护肤指南" in retry["previous_attempt_summary"]
    types = [e["type"] for e in events]
    assert types == [
        "stage.started",
        "critic.verdict",
        "attempt.completed",
        "stage.completed",
    ]
    event = verdict_event(events)
    assert event["threshold"] == 0.7 and event["attempt"] == 1 and event["max_attempts"] == 4
    assert event["dimensions"] == {"infoDensity": 0.8, "readability": 0.9}


async def test_the_last_failed_attempt_is_exhausted(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"critic": judge("needs_improvement", 0.6)}), tmp_path)
    state = attempt_state(attempt=3)
    update, events = await run_critic(state, ctx)
    event = verdict_event(events)
    assert event["attempt"] == 4 and event["exhausted"] is True and event["next"] == "finalize"
    assert update["verdict"]["exhausted"] is True and len(update["attempts"]) == 1


async def test_a_failed_team_is_judged_failed_without_the_judge(tmp_path: Path) -> None:
    models = FakeModels({"critic": judge()})
    ctx = fake_context(models, tmp_path)
    state = attempt_state(generated_content=None, failure={"stage": "executor", "message": "m"})
    _, events = await run_critic(state, ctx)
    event = verdict_event(events)
    assert event["verdict"] == "failed" and event["judge"] == "skipped"
    assert event["next"] == "finalize"
    assert models.count("critic") == 0


async def test_an_empty_body_fails_without_paying_the_judge(tmp_path: Path) -> None:
    models = FakeModels({"critic": judge()})
    ctx = fake_context(models, tmp_path)
    state = attempt_state(generated_content={"title": "t", "body": "", "tags": []})
    update, _ = await run_critic(state, ctx)
    assert update["verdict"]["verdict"] == "failed" and models.count("critic") == 0


async def test_a_persons_edit_is_judged_then_finalized_never_retried_or_replanned(
    tmp_path: Path,
) -> None:
    ctx = fake_context(FakeModels({"critic": judge("needs_improvement", 0.4)}), tmp_path)
    # After an attempt the critic resets draft_source; a state update (an edit) writes none.
    state = attempt_state(knowledge_notes=[BLOCKER], draft_source=None)
    update, events = await run_critic(state, ctx)
    assert update["verdict"]["source"] == "edit" and update["attempts"][-1]["source"] == "edit"
    assert update["verdict"]["replan"] is False and update["replans"] == 0
    assert verdict_event(events)["next"] == "finalize"  # attempts were left: still no retry
    assert update["draft_source"] is None

    team, _ = await run_critic({**state, "draft_source": "team"}, ctx)
    assert team["verdict"]["source"] == "team" and team["verdict"]["replan"] is True
    card, events = await run_critic(
        attempt_state(draft_source="card"),
        fake_context(FakeModels({"critic": judge("needs_improvement", 0.4)}), tmp_path),
    )
    assert card["attempts"][-1]["source"] == "card" and verdict_event(events)["next"] == "finalize"


async def test_an_edit_after_a_failed_run_is_judged_not_failed_with_the_teams_breakdown(
    tmp_path: Path,
) -> None:
    """Regression: an edit on a thread whose last run failed kept the old failure."""
    ctx = fake_context(FakeModels({"critic": judge("passed", 0.9)}), tmp_path)
    failure = {"error": "RuntimeError", "message": "the team broke down"}
    edited = attempt_state(draft_source=None, failure=failure)
    update, _ = await run_critic(edited, ctx)
    assert update["verdict"]["source"] == "edit"
    assert update["verdict"]["verdict"] == "passed", update["verdict"]
    assert update["failure"] is None  # so finalize publishes the edit, not the old failure
    # The team's own draft after a breakdown still fails with it.
    team, _ = await run_critic({**edited, "draft_source": "team"}, ctx)
    assert team["verdict"]["verdict"] == "failed"
