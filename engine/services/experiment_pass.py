"""One pass over a claimed experiment: collect ended runs, judge ready pairs, start runs.

The experiments service (`engine.services.experiments`) claims an active experiment
(`ExperimentRepository.claim`: nobody else advances it meanwhile) and runs one
`ExperimentPass` over it:

1. each running task whose run has ended is scored (`EvaluationHooks.score_post` for an
   arm's run, `pair_outcome` for a judge's) and ends;
2. each pending pair whose two runs have ended is judged: a run of the hidden pairwise
   judge is started (or, when a side has no post, the pair is decided without one);
3. pending arm runs are started, up to `max_concurrency` runs (arms' and judges') in
   flight;
4. with no task left open, the experiment ends (`success`; `error` when no run produced
   a post) with its summary.

Every run is started with an idempotency key naming its task, so a pass that dies
after starting a run and before committing starts nothing twice: the next pass asks
again and gets the same run. The pass's writes (tasks, status, progress frames)
commit together, or not at all; a pass that finds the experiment cancelled or deleted
at its commit cancels the runs it started. Every run is an ordinary run of the engine
(`experiment_spec`, this adapter's one `RunSpec` builder): traced, costed, listed
with the experiment's metadata, resumed after a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.assistants import Assistant
from engine.errors import Conflict, NotFound, RunsError, Unavailable
from engine.experiment_summary import summarize
from engine.experiments import (
    Arm,
    EvaluationHooks,
    ExampleSnapshot,
    ExperimentPair,
    ExperimentRecord,
    ExperimentRun,
    PairOutcome,
    PairWinner,
)
from engine.records import RunRecord, now
from engine.repositories import ExperimentPass, ExperimentRepository
from engine.serde import dumps
from engine.services.core import EngineCore
from engine.services.runs import RunsService
from engine.spec import RunSpec

log = logging.getLogger(__name__)


def experiment_spec(
    *,
    owner: str,
    assistant_id: str,
    run_input: Any,
    config: Mapping[str, Any],
    metadata: Mapping[str, Any],
    idempotency_key: str,
) -> RunSpec:
    """Return the run request of an experiment's task: an arm's run or a judge's.

    A thread-less run (a thread of its own, kept), its progress events (`custom`)
    in its stream, its task named by the idempotency key.
    """
    return RunSpec(
        assistant_id=assistant_id,
        owner=owner,
        thread_id=None,
        input=run_input,
        config=config,
        stream_mode=("custom",),
        on_disconnect="continue",
        on_completion="keep",
        metadata=metadata,
        multitask_strategy="reject",
        idempotency_key=idempotency_key,
    )


def seconds_of(run: RunRecord) -> float | None:
    """Return how long a finished run took, from its creation to its end."""
    if run.finished_at is None:
        return None
    started = datetime.fromisoformat(run.created_at)
    return max(0.0, (datetime.fromisoformat(run.finished_at) - started).total_seconds())


async def arm_assistant(core: EngineCore, owner: str, arm: Arm) -> Assistant:
    """Return the assistant an arm runs: a built-in one, or a created one at its version.

    Raises:
        NotFound: It (or that version) is gone.
    """
    if arm.version is None:
        return await core.resolve(owner, arm.assistant_id)
    record = await core.created.get(owner, arm.assistant_id, arm.version)
    if record is None:
        raise NotFound(
            f"assistant {arm.assistant_id!r} has no version {arm.version}", field="version"
        )
    return core.served(record)


class ExperimentAdvance:
    """One pass over one claimed experiment (see the module docstring)."""

    def __init__(
        self,
        core: EngineCore,
        runs: RunsService,
        repository: ExperimentRepository,
        hooks: EvaluationHooks,
        claimed: ExperimentPass,
    ) -> None:
        """Advance `claimed` with the engine's runs and the product's `hooks`."""
        self.core = core
        self.runs = runs
        self.repository = repository
        self.hooks = hooks
        self.claimed = claimed
        self.experiment: ExperimentRecord = claimed.experiment
        self.events: list[tuple[str, str]] = []
        self.changed_runs: dict[tuple[int, int, int], ExperimentRun] = {}
        self.changed_pairs: dict[tuple[int, int, int, int], ExperimentPair] = {}
        self.started: list[str] = []
        self._examples: dict[int, ExampleSnapshot] = {}
        self._assistants: dict[int, Assistant] = {}

    def emit(self, event: str, data: Mapping[str, Any]) -> None:
        """Queue a progress frame (committed with the pass)."""
        self.events.append((event, dumps(dict(data))))

    async def example(self, index: int) -> ExampleSnapshot:
        """Return an example of the experiment (read once per pass)."""
        if index not in self._examples:
            for found in await self.claimed.examples([index]):
                self._examples[found.example_index] = found
        return self._examples[index]

    async def values(self, run: RunRecord) -> Mapping[str, Any] | None:
        """Return the values a finished run left on its thread (None: none)."""
        thread = await self.core.threads.get(run.owner, run.thread_id)
        return thread.values if thread is not None else None

    # -- the pass ------------------------------------------------------------------------

    async def run(self) -> bool:
        """Advance the experiment once and commit; return whether it committed."""
        e = self.experiment
        if e.status == "pending":
            e.status = "running"
            self.emit("status", {"status": "running"})
        tasks, pairs = await self.claimed.open_tasks()
        for task in tasks:
            if task.status == "running":
                await self.collect_run(task)
        for pair in pairs:
            if pair.status == "running":
                await self.collect_pair(pair)
        running = sum(1 for t in tasks if t.status == "running")
        slots = e.max_concurrency - running - sum(1 for p in pairs if p.status == "running")
        still_open = {t.key for t in tasks if t.open}
        for pair in pairs:
            if pair.status == "pending" and slots > 0 and not self._waits(pair, still_open):
                slots -= await self.judge(pair)
        for task in tasks:
            if task.status == "pending" and slots > 0:
                if not await self.start_run(task):
                    break  # the engine takes no run now: try again next pass
                slots -= 1
        e.runs_done += sum(1 for t in self.changed_runs.values() if not t.open)
        e.pairs_done += sum(1 for p in self.changed_pairs.values() if not p.open)
        if not any(t.open for t in tasks) and not any(p.open for p in pairs):
            await self.finish()
        e.updated_at = now()
        committed = await self.claimed.commit(
            e, list(self.changed_runs.values()), list(self.changed_pairs.values()), self.events
        )
        if not committed:  # cancelled or deleted meanwhile: stop what this pass started
            for run_id in self.started:
                self.runs.cancel_soon(run_id)
        return committed

    @staticmethod
    def _waits(pair: ExperimentPair, still_open: set[tuple[int, int, int]]) -> bool:
        return (pair.example_index, pair.arm_a, pair.repetition) in still_open or (
            pair.example_index,
            pair.arm_b,
            pair.repetition,
        ) in still_open

    async def collect_run(self, task: ExperimentRun) -> None:
        """End a running arm task whose run has ended: score its post."""
        run = await self.core.runs.get(task.run_id or "")
        if run is not None and run.active:
            return
        if run is None:
            task.status, task.error = "error", "its run was deleted"
        else:
            example = await self.example(task.example_index)
            outcome = self.hooks.score_post(
                run.options.input, await self.values(run), example.expectations
            )
            task.result = {
                **outcome.to_json(),
                "run_status": run.status,
                "seconds": seconds_of(run),
            }
            task.status = "done" if run.status == "success" else "error"
            task.error = (run.error or {}).get("message") if run.status != "success" else None
            if run.status not in ("success", "error"):
                task.error = f"its run ended {run.status}"
        self.changed_runs[task.key] = task
        result = task.result or {}
        self.emit(
            "run",
            {
                "example_index": task.example_index,
                "arm": self.experiment.arms[task.arm].name,
                "repetition": task.repetition,
                "run_id": task.run_id,
                "thread_id": task.thread_id,
                "status": task.status,
                "passed": result.get("passed"),
                "outcome": result.get("outcome"),
            },
        )

    async def collect_pair(self, pair: ExperimentPair) -> None:
        """End a running pair whose judge's run has ended: read the verdict."""
        run = await self.core.runs.get(pair.run_id or "")
        if run is not None and run.active:
            return
        values = await self.values(run) if run is not None else None
        if run is None or run.status != "success":
            values = None
        self._decide(pair, self.hooks.pair_outcome(values))

    def _decide(self, pair: ExperimentPair, outcome: PairOutcome) -> None:
        pair.status, pair.winner, pair.result = "done", outcome.winner, outcome.to_json()
        self.changed_pairs[pair.key] = pair
        names = [arm.name for arm in self.experiment.arms]
        winner = {"a": names[pair.arm_a], "b": names[pair.arm_b]}.get(outcome.winner, "tie")
        self.emit(
            "judgement",
            {
                "example_index": pair.example_index,
                "repetition": pair.repetition,
                "arms": [names[pair.arm_a], names[pair.arm_b]],
                "winner": winner,
                "agreed": outcome.agreed,
                "unavailable": outcome.unavailable,
                "run_id": pair.run_id,
            },
        )

    async def judge(self, pair: ExperimentPair) -> int:
        """Start the judge of a pair whose runs ended (or decide it); return runs started."""
        keys = [
            (pair.example_index, pair.arm_a, pair.repetition),
            (pair.example_index, pair.arm_b, pair.repetition),
        ]
        found = {r.key: r for r in await self.claimed.results(keys)}
        found.update({k: self.changed_runs[k] for k in keys if k in self.changed_runs})
        side_a, side_b = (found.get(k) for k in keys)
        post_a = (side_a.result or {}).get("post") if side_a else None
        post_b = (side_b.result or {}).get("post") if side_b else None
        if post_a is None or post_b is None:
            winner: PairWinner = "a" if post_a is not None else "b" if post_b is not None else "tie"
            note = "only one arm produced a post" if winner != "tie" else "no arm produced a post"
            self._decide(pair, PairOutcome(winner=winner, note=note))
            return 0
        assert side_a is not None
        run_a = await self.core.runs.get(side_a.run_id or "")
        example = await self.example(pair.example_index)
        brief = run_a.options.input if run_a is not None else example.input
        e = self.experiment
        names = [e.arms[pair.arm_a].name, e.arms[pair.arm_b].name]
        spec = experiment_spec(
            owner=e.owner,
            assistant_id=self.hooks.pairwise_judge,
            run_input=self.hooks.pair_input(brief, example.expectations, post_a, post_b),
            config={},
            metadata={
                "experiment_id": e.experiment_id,
                "evaluation": "pairwise_judge",
                "example_id": example.example_id,
                "repetition": pair.repetition,
                "arms": names,
            },
            idempotency_key=(
                f"experiment:{e.experiment_id}:judge:{pair.example_index}:"
                f"{pair.repetition}:{pair.arm_a}:{pair.arm_b}"
            ),
        )
        judge = self.core.internal.get(self.hooks.pairwise_judge)
        if judge is None:
            self._decide(pair, PairOutcome(winner="tie", unavailable=True, note="no judge served"))
            return 0
        try:
            run, _ = await self.runs.create(
                spec, assistant=judge, thread_metadata={"experiment_id": e.experiment_id}
            )
        except (Unavailable, Conflict):
            return 1  # the engine takes no run now (or is stopping): next pass
        except RunsError as exc:
            pair.status, pair.error, pair.winner = "done", exc.message, "tie"
            pair.result = PairOutcome(winner="tie", unavailable=True, note=exc.message).to_json()
            self.changed_pairs[pair.key] = pair
            return 0
        pair.status, pair.run_id, pair.thread_id = "running", run.run_id, run.thread_id
        self.changed_pairs[pair.key] = pair
        self.started.append(run.run_id)
        return 1

    async def start_run(self, task: ExperimentRun) -> bool:
        """Start an arm's run of an example; False when the engine takes no run now."""
        e = self.experiment
        arm = e.arms[task.arm]
        example = await self.example(task.example_index)
        spec = experiment_spec(
            owner=e.owner,
            assistant_id=arm.assistant_id,
            run_input=self.hooks.run_input(example.input),
            config=self.hooks.arm_config(arm.models),
            metadata={
                "experiment_id": e.experiment_id,
                "experiment_arm": arm.name,
                "example_id": example.example_id,
                "repetition": task.repetition,
                **({"assistant_version": arm.version} if arm.version is not None else {}),
            },
            idempotency_key=(
                f"experiment:{e.experiment_id}:run:{task.example_index}:"
                f"{task.repetition}:{task.arm}"
            ),
        )
        try:
            if task.arm not in self._assistants:
                self._assistants[task.arm] = await arm_assistant(self.core, e.owner, arm)
            run, _ = await self.runs.create(
                spec,
                assistant=self._assistants[task.arm],
                thread_metadata={"experiment_id": e.experiment_id, "experiment_arm": arm.name},
            )
        except (Unavailable, Conflict):
            return False
        except RunsError as exc:  # its assistant is gone, its input no longer passes
            task.status, task.error = "error", exc.message
            task.result = {"post": None, "passed": False, "run_status": None}
            self.changed_runs[task.key] = task
            self.emit(
                "run",
                {
                    "example_index": task.example_index,
                    "arm": arm.name,
                    "repetition": task.repetition,
                    "status": "error",
                    "error": exc.message,
                },
            )
            return True
        task.status, task.run_id, task.thread_id = "running", run.run_id, run.thread_id
        self.changed_runs[task.key] = task
        self.started.append(run.run_id)
        self.emit(
            "run",
            {
                "example_index": task.example_index,
                "arm": arm.name,
                "repetition": task.repetition,
                "run_id": run.run_id,
                "thread_id": run.thread_id,
                "status": "running",
            },
        )
        return True

    async def finish(self) -> None:
        """End the experiment: every task ended. Its summary is its last frame but `end`."""
        e = self.experiment
        runs, pairs = await self.repository.tasks(e.experiment_id)
        runs = [self.changed_runs.get(r.key, r) for r in runs]
        pairs = [self.changed_pairs.get(p.key, p) for p in pairs]
        if not any((r.result or {}).get("post") is not None for r in runs):
            e.status, e.error = "error", "no run produced a post; see the results for why"
        else:
            e.status = "success"
        e.finished_at = now()
        self.emit("summary", summarize(e, runs, pairs))
        self.emit("end", {"status": e.status, "error": e.error})
