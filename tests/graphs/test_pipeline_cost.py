"""Cost discipline: each LLM call carries the state it needs, never the run's history.

Over a 3-attempt run, prompt sizes are measured per call (`FakeCall.prompt_chars`:
the characters of every message sent). Attempt 3 comes after roughly twice as
many calls as attempt 2, yet every one of its calls is exactly as large as the
same call in attempt 2: nothing accumulates. Attempt 2 is larger than attempt 1
only by the previous verdict (`retry_context`), which replaces, not extends.
Run with `-s` to see the figures.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tests.graphs.pipeline_runs import judge_reply, models_for, run_pipeline
from tests.support.fake_models import FakeCall

FEEDBACK = "信息密度不够：每一步都要给出具体的产品类型和价格区间。"


def split_by_attempt(calls: list[FakeCall]) -> list[list[FakeCall]]:
    """Group the calls after the planner's into attempts; each attempt ends with the judge."""
    attempts: list[list[FakeCall]] = [[]]
    for call in calls:
        if call.role == "planner":
            continue
        attempts[-1].append(call)
        if call.role == "critic":
            attempts.append([])
    return [a for a in attempts if a]


def sizes_by_role(calls: list[FakeCall]) -> dict[str, list[int]]:
    sizes: dict[str, list[int]] = defaultdict(list)
    for call in calls:
        sizes[call.role].append(call.prompt_chars)
    return dict(sizes)


async def test_prompt_sizes_do_not_grow_with_the_calls_already_made(tmp_path: Path) -> None:
    critic = [
        judge_reply("needs_improvement", 0.6, FEEDBACK),
        judge_reply("needs_improvement", 0.6, FEEDBACK),
        judge_reply("passed", 0.9),
    ]
    models = models_for(critic, images=2)
    run = await run_pipeline(models, tmp_path, image_count=2)
    assert run.result["outcome"] == "completed" and run.result["quality"]["attempts"] == 3

    attempts = split_by_attempt(models.calls)
    assert len(attempts) == 3
    per_attempt = [sizes_by_role(calls) for calls in attempts]
    calls_before = [sum(len(a) for a in attempts[:i]) + 1 for i in range(3)]  # + the planner

    print("\nprompt characters per call, by role and attempt (calls made before the attempt)")
    print(
        f"{'role':30} {'#1 (' + str(calls_before[0]) + ')':>18} "
        f"{'#2 (' + str(calls_before[1]) + ')':>18} {'#3 (' + str(calls_before[2]) + ')':>18}"
    )
    for role in per_attempt[0]:
        cells = [",".join(str(n) for n in sizes[role]) for sizes in per_attempt]
        print(f"{role:30} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}")
    totals = [sum(c.prompt_chars for c in calls) for calls in attempts]
    print(f"{'total per attempt':30} {totals[0]:>18} {totals[1]:>18} {totals[2]:>18}")
    print(f"planner: {models.calls_for('planner')[0].prompt_chars} (one call)")

    # Same roles, same number of calls, in every attempt (a fresh team each time).
    assert per_attempt[0].keys() == per_attempt[1].keys() == per_attempt[2].keys()
    # Attempt 3 follows twice as many calls as attempt 2, and is not one character larger.
    assert per_attempt[2] == per_attempt[1]
    assert totals[2] == totals[1]
    # Attempt 2 only adds the previous verdict, once per call that shows it.
    retry_block = len(str(run.state["retry_context"])) + 200
    for role, sizes in per_attempt[1].items():
        for before, after in zip(per_attempt[0][role], sizes, strict=True):
            assert 0 <= after - before <= retry_block, role
    # The judge never sees earlier attempts at all.
    assert per_attempt[0]["critic"] == per_attempt[1]["critic"] == per_attempt[2]["critic"]
