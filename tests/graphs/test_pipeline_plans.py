"""Drifting models through the whole pipeline with a supervisor that plans ahead (issue 28).

The cases of `test_pipeline_drift.py` that depend on the team's turns, with the
supervisor of `tests.app.atelier_llm` that plans the normal path in its first
decision and starts agents together: a draft that fails the code checks is retried
as before (each attempt plans again, with one supervisor call), and a judge that
never passes uses every attempt and still publishes the best one.
"""

from __future__ import annotations

from pathlib import Path

from tests.app.atelier_llm import planning_supervisor
from tests.graphs.pipeline_runs import judge_reply, models_for, run_pipeline
from tests.graphs.test_pipeline_drift import (
    CODE_BODY,
    drifting_writer,
    failed_checks,
    verdicts_of,
)
from tests.support.fake_models import HAPPY_BODY, HAPPY_TAGS, HAPPY_TITLE

TAGS = " ".join(f"#{t}" for t in HAPPY_TAGS)


async def test_a_cut_off_draft_fails_and_is_retried_with_one_decision_an_attempt(
    tmp_path: Path,
) -> None:
    cut = f"# {HAPPY_TITLE}\n\n{HAPPY_BODY}\n\nTo be continued: the second half covers toners.\n\n"
    models = models_for(judge_reply())
    models.script("supervisor", planning_supervisor)
    models.script("writer_agent", drifting_writer(cut + TAGS))
    run = await run_pipeline(models, tmp_path)

    first, second = verdicts_of(run)[:2]
    assert "incomplete" in failed_checks(first) and first["next"] == "rag"
    assert second["passed"] and run.result["outcome"] == "completed"
    assert models.count("supervisor") == 2
    planned = [e for _, e in run.events if e["type"] == "supervisor.route" and e["planned"]]
    assert len(planned) == 6  # three planned steps an attempt


async def test_code_in_the_draft_fails_the_checks_and_the_planned_team_retries(
    tmp_path: Path,
) -> None:
    code = f"# 审核意见\n\n```python\n{CODE_BODY}\n```\n\n{TAGS}"
    models = models_for(judge_reply())
    models.script("supervisor", planning_supervisor)
    models.script("writer_agent", drifting_writer(code))
    run = await run_pipeline(models, tmp_path)

    verdicts = verdicts_of(run)
    assert "code_share" in failed_checks(verdicts[0]) and verdicts[0]["next"] == "rag"
    assert verdicts[-1]["passed"] and run.result["outcome"] == "completed"
    assert run.result["post"]["title"] == HAPPY_TITLE


async def test_a_judge_that_never_passes_uses_every_attempt_and_publishes_the_best(
    tmp_path: Path,
) -> None:
    models = models_for(judge_reply("needs_improvement", 0.5))
    models.script("supervisor", planning_supervisor)
    run = await run_pipeline(models, tmp_path)

    assert len(verdicts_of(run)) == 4
    assert run.result["outcome"] == "exhausted", run.result["message"]
    assert run.result["post"]["title"] and run.result["post"]["blocks"]
    assert models.count("supervisor") == 4
    assert models.count("writer_agent") == 4 and models.count("review_agent") == 4
