"""The experiments service's passes, driven by hand on the embedded engine (role `run`).

The product's composition (`app.composition.open_product`: the `atelier` pipeline, the
hidden judges, the evaluation hooks) on the scripted model of
tests/app/test_evaluation.py. A pass that dies after starting runs and before its
commit starts none of them twice; `max_concurrency` bounds the runs in flight; a run
deleted under the experiment ends its task, and its pair is decided without a judge.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.composition import open_product
from engine import Arm, Engine, ExampleInput
from tests.app.harness import service_settings
from tests.app.test_evaluation import EvaluationModel
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

OWNER = "key_test"
BRIEF = {"request": "写一篇小红书笔记：平价护肤", "fast_mode": True}
ARMS = [Arm(name="a", assistant_id="atelier"), Arm(name="b", assistant_id="atelier")]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    with ScriptedOpenAIServer(EvaluationModel()) as llm:
        settings = service_settings(tmp_path / "data", llm.base_url)
        async with open_product(settings, role="run") as opened:
            yield opened


async def _experiment(engine: Engine, examples: int = 1, **options: Any) -> str:
    dataset = await engine.datasets.create(OWNER, name="d")
    await engine.datasets.add_examples(
        OWNER, dataset.dataset_id, [ExampleInput(input=BRIEF)] * examples
    )
    experiment = await engine.experiments.create(
        OWNER, dataset_id=dataset.dataset_id, arms=ARMS, **options
    )
    return experiment.experiment_id


async def _runs(engine: Engine, experiment_id: str) -> list[Any]:
    threads = await engine.threads.search(OWNER, metadata={"experiment_id": experiment_id})
    runs = []
    for thread in threads:
        runs += await engine.runs.for_thread(OWNER, thread.thread_id)
    return runs


async def _until_done(engine: Engine, experiment_id: str) -> dict[str, Any]:
    for _ in range(600):
        await engine.experiments.advance(only=experiment_id)
        experiment = await engine.experiments.get(OWNER, experiment_id)
        if not experiment.active:
            return await engine.experiments.detail(OWNER, experiment_id)
        await asyncio.sleep(0.2)
    raise AssertionError("the experiment did not end")


async def test_a_pass_that_dies_before_its_commit_starts_no_run_twice(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    experiment_id = await _experiment(engine)
    repository = engine.experiments._experiments
    claim = repository.claim

    def dying_claim(*args: Any, **kwargs: Any) -> Any:
        class Dying:
            async def __aenter__(self) -> Any:
                self.inner = claim(*args, **kwargs)
                claimed = await self.inner.__aenter__()

                async def die(*_a: Any, **_k: Any) -> bool:
                    raise RuntimeError("the process died here")

                claimed.commit = die
                return claimed

            async def __aexit__(self, *exc: Any) -> Any:
                return await self.inner.__aexit__(*exc)

        return Dying()

    monkeypatch.setattr(repository, "claim", dying_claim)
    assert await engine.experiments.advance(only=experiment_id) == 1  # logged, not raised
    assert "a pass failed" in caplog.text
    first = sorted(r.run_id for r in await _runs(engine, experiment_id))
    assert len(first) == 2  # both arms' runs were started, nothing was committed
    monkeypatch.setattr(repository, "claim", claim)
    (progress,) = await engine.experiments.search(OWNER)
    assert progress.status == "pending" and progress.runs_done == 0

    done = await _until_done(engine, experiment_id)
    assert done["status"] == "success"
    runs = await _runs(engine, experiment_id)
    arm_runs = sorted(r.run_id for r in runs if r.assistant_id == "atelier")
    assert arm_runs == first  # the same two runs, found again by their idempotency keys
    assert [r.assistant_id for r in runs].count("pairwise_judge") == 1
    assert sorted(p["run_id"] for p in done["results"][0]["posts"]) == first


async def test_max_concurrency_bounds_the_runs_in_flight(engine: Engine) -> None:
    experiment_id = await _experiment(engine, examples=2, max_concurrency=1)
    most = 0
    for _ in range(600):
        await engine.experiments.advance(only=experiment_id)
        active = [r for r in await _runs(engine, experiment_id) if r.active]
        most = max(most, len(active))
        if not (await engine.experiments.get(OWNER, experiment_id)).active:
            break
        await asyncio.sleep(0.2)
    assert most == 1
    done = await engine.experiments.detail(OWNER, experiment_id)
    assert done["status"] == "success" and done["progress"]["pairs_done"] == 2


async def test_a_run_deleted_under_the_experiment_ends_its_task_and_its_pair_without_a_judge(
    engine: Engine,
) -> None:
    experiment_id = await _experiment(engine)
    await engine.experiments.advance(only=experiment_id)
    runs = await _runs(engine, experiment_id)
    gone = next(r for r in runs if r.metadata["experiment_arm"] == "b")
    await engine.runs.wait(gone.run_id)
    await engine.threads.delete(OWNER, gone.thread_id)
    done = await _until_done(engine, experiment_id)
    assert done["status"] == "success"
    a, b = done["summary"]["arms"]
    assert (a["wins"], b["losses"], a["pass_rate"], b["pass_rate"]) == (1, 1, 1.0, 0.0)
    (pair,) = done["results"][0]["pairs"]
    assert pair["winner"] == "a" and pair["note"] == "only one arm produced a post"
    assert pair["run_id"] is None  # no judge was asked
    posts = {p["arm"]: p for p in done["results"][0]["posts"]}
    assert posts["b"]["status"] == "error" and posts["b"]["error"] == "its run was deleted"
    assert [r.assistant_id for r in await _runs(engine, experiment_id)] == ["atelier"]


async def test_a_revoked_keys_experiment_stops_advancing_and_its_data_stays(
    tmp_path: Path,
) -> None:
    from engine.audit import Actor

    with ScriptedOpenAIServer(EvaluationModel()) as llm:
        settings = service_settings(
            tmp_path / "data", llm.base_url, auth_api_keys=["experiments-admin-0123456789"]
        )
        async with open_product(settings, role="run") as engine:
            admin = Actor("cli")
            made = await engine.keys.create(name="member", role="member", actor=admin)
            owner = made.record.key_id
            dataset = await engine.datasets.create(owner, name="d")
            await engine.datasets.add_examples(
                owner, dataset.dataset_id, [ExampleInput(input=BRIEF)]
            )
            experiment = await engine.experiments.create(
                owner, dataset_id=dataset.dataset_id, arms=ARMS
            )
            await engine.keys.revoke(owner, actor=admin)

            for _ in range(3):
                assert await engine.experiments.advance() == 1  # claimed, and left as it was
            stopped = await engine.experiments.get(owner, experiment.experiment_id)
            assert stopped.active and stopped.runs_done == 0
            assert await engine.threads.search(owner) == []  # no run was started for it
            assert llm.requests == []
            assert (await engine.datasets.get(owner, dataset.dataset_id)).example_count == 1


async def test_a_revoked_keys_live_runs_are_not_judged_and_their_data_stays(
    tmp_path: Path,
) -> None:
    """Online evaluation samples no run of a key revoked after the run ended."""
    from engine import RunSpec
    from engine.audit import Actor

    with ScriptedOpenAIServer(EvaluationModel()) as llm:
        settings = service_settings(
            tmp_path / "data", llm.base_url, auth_api_keys=["evaluation-admin-0123456789"]
        )
        async with open_product(settings, role="run") as engine:
            admin = Actor("cli")
            owner = (await engine.keys.create(name="m", role="member", actor=admin)).record.key_id
            await engine.evaluation.set_rate(owner, "atelier", 1.0)
            spec = RunSpec(
                assistant_id="atelier",
                owner=owner,
                thread_id=None,
                input={**BRIEF, "auto_confirm": True},
                on_completion="keep",
            )
            run, _ = await engine.runs.create(spec)
            assert (await engine.runs.wait(run.run_id)).status == "success"
            await engine.keys.revoke(owner, actor=admin)
            calls = len(llm.requests)

            for _ in range(3):
                assert await engine.evaluation.advance() == 0  # no judge started
            assert len(llm.requests) == calls  # the judge model was never asked
            threads = await engine.threads.search(owner)
            assert [t.thread_id for t in threads] == [run.thread_id]  # no judge's thread
            assert await engine.runs.get(owner, run.thread_id, run.run_id)  # its data stays
