"""Models that drift from the format, through the whole pipeline (issue 10, parts 3 and 4).

Real models do not always answer in the shape the prompts ask for. Each case
scripts one role of the real pipeline (planner, rag, the eight-agent team with
real PNG cards, critic, finalize) to drift the way weak models do, and checks
that the run still ends with an honest result: a JSON post is read as a post, a
cut-off or non-prose post fails the code checks and is retried, a judge on a
1–10 scale is read like the review agent reads it, and a supervisor stuck on
one agent does not eat the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from core.agents import AGENTS
from tests.graphs.pipeline_runs import judge_reply, models_for, run_pipeline
from tests.support.fake_models import (
    HAPPY_BODY,
    HAPPY_TAGS,
    HAPPY_TITLE,
    decision,
    garbage,
    tool_call,
)

GOOD_POST = f"# {HAPPY_TITLE}\n\n{HAPPY_BODY}\n\n" + " ".join(f"#{t}" for t in HAPPY_TAGS)


def drifting_writer(*first: str) -> Any:
    """Return a writer answering `first` on its first calls, then the good Markdown post."""
    replies = list(first)

    def respond(_messages: list[BaseMessage]) -> str:
        return replies.pop(0) if replies else GOOD_POST

    return respond


def verdicts_of(run: Any) -> list[dict[str, Any]]:
    return run.of_type("critic.verdict")


def failed_checks(verdict: dict[str, Any]) -> set[str]:
    return {c["name"] for c in verdict["checks"] if not c["passed"]}


# --- a writer that answers in JSON ----------------------------------------------------


def _json_post() -> str:
    return json.dumps(
        {"title": HAPPY_TITLE, "body": HAPPY_BODY, "tags": list(HAPPY_TAGS)}, ensure_ascii=False
    )


async def test_a_writer_answering_a_json_object_gets_a_post_with_its_title_body_and_tags(
    tmp_path: Path,
) -> None:
    models = models_for(judge_reply())
    models.script("writer_agent", _json_post())
    run = await run_pipeline(models, tmp_path)

    assert run.result["outcome"] == "completed"
    post = run.result["post"]
    assert post["title"] == HAPPY_TITLE and post["tags"] == list(HAPPY_TAGS)
    text = "\n".join(b["text"] for b in post["blocks"])
    assert "温和清洁" in text and '"body"' not in text and "{" not in text


async def test_a_writer_answering_json_in_a_code_fence_gets_the_same_post(tmp_path: Path) -> None:
    models = models_for(judge_reply())
    models.script("writer_agent", f"```json\n{_json_post()}\n```")
    run = await run_pipeline(models, tmp_path)

    post = run.result["post"]
    assert post["title"] == HAPPY_TITLE and post["tags"] == list(HAPPY_TAGS)
    assert not any("```" in b["text"] or '"title"' in b["text"] for b in post["blocks"])


# --- an English "to be continued" -------------------------------------------------------


async def test_a_post_ending_to_be_continued_in_english_fails_and_is_retried(
    tmp_path: Path,
) -> None:
    cut = f"# {HAPPY_TITLE}\n\n{HAPPY_BODY}\n\nTo be continued: the second half covers toners.\n\n"
    cut += " ".join(f"#{t}" for t in HAPPY_TAGS)
    models = models_for(judge_reply())
    models.script("writer_agent", drifting_writer(cut))
    run = await run_pipeline(models, tmp_path)

    first, second = verdicts_of(run)[:2]
    assert "incomplete" in failed_checks(first) and first["next"] == "rag"
    assert first["verdict"] == "failed"
    assert second["passed"] and run.result["outcome"] == "completed"


# --- posts that are not prose for people ------------------------------------------------

CODE_BODY = "\n".join(
    [
        "def check_and_edit(title, body):",
        "    if len(title) > 20:",
        "        title = title[:20]",
        '    result = {"title": title, "body": body}',
        "    return result",
        "",
        'print(check_and_edit("学生党护肤", "正文"))',
    ]
)
JSON_BODY = json.dumps({"审核意见": {"approved": True, "score": 0.9, "issues": []}})


async def test_a_writer_returning_code_json_or_prompt_markup_fails_the_code_checks_and_retries(
    tmp_path: Path,
) -> None:
    tags = " ".join(f"#{t}" for t in HAPPY_TAGS)
    code = f"# 审核意见\n\n```python\n{CODE_BODY}\n```\n\n{tags}"
    data = f"# 学生党平价护肤\n\n{JSON_BODY}\n\n{tags}"
    markup = f"# <<<用户请求>>>\n\n{HAPPY_BODY}\n<<<end 帖子>>>\n\n{tags}"
    models = models_for(judge_reply())
    models.script("writer_agent", drifting_writer(code, data, markup))
    run = await run_pipeline(models, tmp_path)

    verdicts = verdicts_of(run)
    assert len(verdicts) == 4
    assert "code_share" in failed_checks(verdicts[0])
    assert "code_share" in failed_checks(verdicts[1])
    assert "data_markup" in failed_checks(verdicts[2])
    for verdict in verdicts[:3]:
        assert verdict["verdict"] == "failed" and not verdict["passed"]
        assert verdict["next"] == "rag"
    (markup_row,) = [c for c in verdicts[2]["checks"] if c["name"] == "data_markup"]
    assert "<<<用户请求>>>" in markup_row["measured"]
    assert verdicts[3]["passed"] and run.result["outcome"] == "completed"
    assert run.result["post"]["title"] == HAPPY_TITLE


async def test_a_post_without_tags_fails_where_the_platform_expects_tags(tmp_path: Path) -> None:
    models = models_for(judge_reply())
    models.script("writer_agent", f"# {HAPPY_TITLE}\n\n{HAPPY_BODY}")
    # No tags from the model and none to borrow from the brief.
    models.script(
        "brief_compiler_agent",
        tool_call("CreativeBrief", topic="平价护肤", audience="学生", goal="讲清成分", keywords=[]),
    )
    run = await run_pipeline(models, tmp_path, fast_mode=True)

    (verdict,) = verdicts_of(run)
    assert failed_checks(verdict) == {"tags_present"} and not verdict["passed"]
    assert run.result["outcome"] == "exhausted"


# --- a judge on a 1–10 scale --------------------------------------------------------------


async def test_a_judge_scoring_7_on_a_1_to_10_scale_gets_a_verdict(tmp_path: Path) -> None:
    judge = tool_call(
        "JudgeVerdict",
        verdict="passed",
        score=7,
        feedback="可以发布。",
        dimensions=dict.fromkeys(
            ("infoDensity", "textImageAlignment", "styleConsistency", "readability", "platformFit"),
            8,
        ),
    )
    run = await run_pipeline(models_for(judge), tmp_path)

    (verdict,) = verdicts_of(run)
    assert verdict["judge"] == "ok" and verdict["score"] == 0.7 and verdict["passed"]
    assert set(verdict["dimensions"].values()) == {0.8}
    assert run.result["quality"]["score"] == 0.7


# --- a supervisor stuck on one agent -------------------------------------------------------

STUCK_AGENT = "layout_planner_agent"
MAX_STUCK_CALLS = 10  # per run: the later attempts follow the stage order (one call each)
MAX_CALLS = 60  # every role's calls in a run of four attempts


def _stuck_supervisor(_messages: list[BaseMessage]) -> AIMessage:
    return decision(STUCK_AGENT, guidance="再做一次版式。")


def by_attempt(run: Any) -> list[list[dict[str, Any]]]:
    """Return the run's events split at each `attempt.started` (one list per attempt)."""
    attempts: list[list[dict[str, Any]]] = []
    for _, event in run.events:
        if event["type"] == "attempt.started":
            attempts.append([])
        if attempts:
            attempts[-1].append(event)
    return attempts


async def test_a_supervisor_stuck_on_one_agent_still_ends_with_a_post(tmp_path: Path) -> None:
    # A judge that never passes makes the run use all four attempts. Routing takes the
    # first attempt over from the stuck supervisor; the later ones do not ask it again.
    models = models_for(judge_reply("needs_improvement", 0.5))
    models.script("supervisor", _stuck_supervisor)
    run = await run_pipeline(models, tmp_path)

    assert len(verdicts_of(run)) == 4
    assert models.count(STUCK_AGENT) <= MAX_STUCK_CALLS and models.count() < MAX_CALLS
    assert models.count("writer_agent") >= 4 and models.count("review_agent") >= 4
    assert run.result["outcome"] == "exhausted", run.result["message"]
    assert run.result["post"]["title"] and run.result["post"]["blocks"]
    roles = models.roles_called()
    first_verdict = roles.index("critic")
    assert "supervisor" not in roles[first_verdict:]
    # Every correction is explained on the stream: in the first attempt each stuck choice
    # either ran or was redirected ...
    first, *later = by_attempt(run)
    fallbacks = [e for e in first if e["type"] == "agent.fallback"]
    routes = [e for e in first if e["type"] == "supervisor.route"]
    assert fallbacks and all(f["from"] == STUCK_AGENT for f in fallbacks)
    assert len(routes) - len(fallbacks) == roles[:first_verdict].count(STUCK_AGENT)
    # ... and in each later one the stage order ran every agent once, each turn a fallback
    # from the supervisor that says why it was not asked.
    assert len(later) == 3
    for events in later:
        assert not [e for e in events if e["type"] == "supervisor.route"]
        turns = [e for e in events if e["type"] == "agent.fallback"]
        assert [t["to"] for t in turns] == list(AGENTS)
        assert all(t["from"] == "supervisor" and t["reason"] == "cap" for t in turns)
        assert all("drifted earlier in this run" in t["detail"] for t in turns)


async def test_a_stuck_supervisor_on_an_agent_that_keeps_failing_gives_it_up(
    tmp_path: Path,
) -> None:
    models = models_for(judge_reply("needs_improvement", 0.5))
    models.script("supervisor", _stuck_supervisor)
    models.script(STUCK_AGENT, garbage())
    run = await run_pipeline(models, tmp_path)

    assert len(verdicts_of(run)) == 4
    assert models.count(STUCK_AGENT) <= MAX_STUCK_CALLS
    assert run.result["outcome"] == "exhausted", run.result["message"]
    assert run.result["post"]["blocks"]
    details = [e["detail"] for _, e in run.events if e["type"] == "agent.fallback"]
    assert any("given up" in d for d in details)
