"""The experiments service: create, read, follow, cancel and delete experiments; advance them.

`create` checks the dataset and the arms (each a built-in assistant or the caller's
own, pinned at a version, running the examples' graph; models checked by the
product), copies the dataset's examples into the experiment and records its tasks
(`engine.experiments`). From then on any process advances it: the service's
scheduler claims active experiments every `EXPERIMENT_POLL` seconds, one pass each
(`engine.services.experiment_pass`); `drive` advances one experiment until it ends
(`atelier eval`, on the embedded engine). Progress is a stream of frames in the
database (`metadata` first, `end` last), which `follow` reads from any process.
See docs/evaluate.md.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from itertools import combinations
from typing import Any

from engine.crons import CronScheduler
from engine.datasets import MAX_EXAMPLES_PER_DATASET
from engine.errors import Conflict, Invalid, InvalidFields, NotFound
from engine.experiment_summary import results_by_example, summarize
from engine.experiments import (
    DEFAULT_CONCURRENCY,
    MAX_ACTIVE_EXPERIMENTS,
    MAX_ARMS,
    MAX_CONCURRENCY,
    MAX_EXPERIMENT_RUNS,
    MAX_EXPERIMENTS_PER_OWNER,
    MAX_REPETITIONS,
    MIN_ARMS,
    Arm,
    EvaluationHooks,
    ExampleSnapshot,
    ExperimentPair,
    ExperimentRecord,
    ExperimentRun,
    ExperimentStatus,
)
from engine.follow import IDLE, Idle
from engine.records import Frame, now
from engine.repositories import DatasetRepository, ExperimentRepository, LimitReached
from engine.serde import dumps
from engine.services.core import EngineCore
from engine.services.experiment_pass import ExperimentAdvance
from engine.services.runs import RunsService

log = logging.getLogger(__name__)

#: Seconds between two passes of the scheduler (and between two reads of a stream).
EXPERIMENT_POLL = 0.5
#: Experiments one scheduler pass advances at most.
EXPERIMENTS_PER_PASS = 20
#: Results (examples) a read answers at most.
MAX_RESULTS_PAGE = 100


class ExperimentsService:
    """Experiments, each owned by one API key, and the scheduler that advances them."""

    def __init__(
        self,
        core: EngineCore,
        runs: RunsService,
        experiments: ExperimentRepository,
        datasets: DatasetRepository,
        hooks: EvaluationHooks,
        *,
        interval: float = EXPERIMENT_POLL,
    ) -> None:
        """Serve experiments from `experiments`, their examples from `datasets`."""
        self._core = core
        self._runs = runs
        self._experiments = experiments
        self._datasets = datasets
        self._hooks = hooks
        self._pass_lock = asyncio.Lock()  # one pass at a time in this process
        self.interval = interval
        self.scheduler = CronScheduler(self._scheduled_pass, interval=interval)

    def start(self) -> None:
        """Start advancing active experiments in a task of this loop."""
        self.scheduler.start()

    async def stop(self) -> None:
        """Stop advancing (a pass in progress is cancelled; its writes roll back)."""
        await self.scheduler.stop()

    # -- create --------------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        *,
        dataset_id: str,
        arms: Sequence[Arm],
        repetitions: int = 1,
        max_concurrency: int = DEFAULT_CONCURRENCY,
        name: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ExperimentRecord:
        """Record an experiment of the owner's dataset on `arms`; the scheduler runs it.

        Args:
            owner: The caller, who owns the experiment and its runs.
            dataset_id: The caller's dataset (at least one example).
            arms: What to compare: an empty `name` is the assistant id (with `@v<n>`
                for a created assistant at a version given); `version` None is the
                assistant's latest (pinned now).
            repetitions: Runs of each example on each arm (1–`MAX_REPETITIONS`).
            max_concurrency: Runs in flight at once (1–`MAX_CONCURRENCY`).
            name: A name to show.
            metadata: Kept with the experiment.

        Raises:
            RunsError: NotFound (dataset, an arm's assistant or version), InvalidFields
                (arms, repetitions, sizes), Conflict (the caller's bounds).
        """
        if not MIN_ARMS <= len(arms) <= MAX_ARMS:
            raise InvalidFields.at("arms", f"give {MIN_ARMS} to {MAX_ARMS} arms")
        if not 1 <= repetitions <= MAX_REPETITIONS:
            raise InvalidFields.at("repetitions", f"repetitions is 1 to {MAX_REPETITIONS}")
        if not 1 <= max_concurrency <= MAX_CONCURRENCY:
            raise InvalidFields.at("max_concurrency", f"max_concurrency is 1 to {MAX_CONCURRENCY}")
        dataset = await self._datasets.get(owner, dataset_id)
        if dataset is None:
            raise NotFound(f"dataset {dataset_id!r} not found", field="dataset_id")
        examples = await self._datasets.examples(owner, dataset_id, limit=MAX_EXAMPLES_PER_DATASET)
        if not examples:
            raise Invalid(f"dataset {dataset_id!r} has no examples yet", field="dataset_id")
        pinned = [await self._arm(owner, index, arm) for index, arm in enumerate(arms)]
        names = [arm.name for arm in pinned]
        for index, arm_name in enumerate(names):
            if names.index(arm_name) != index:
                raise InvalidFields.at(
                    f"arms.{index}.name", f"two arms are named {arm_name!r}; name them apart"
                )
        runs_total = len(examples) * len(pinned) * repetitions
        if runs_total > MAX_EXPERIMENT_RUNS:
            raise InvalidFields.at(
                "repetitions",
                f"{len(examples)} examples × {len(pinned)} arms × {repetitions} repetitions "
                f"make {runs_total} runs; an experiment makes at most {MAX_EXPERIMENT_RUNS}",
            )
        tasks = [
            ExperimentRun(example_index=i, arm=a, repetition=r)
            for i in range(len(examples))
            for r in range(repetitions)
            for a in range(len(pinned))
        ]
        pairs = [
            ExperimentPair(example_index=i, repetition=r, arm_a=a, arm_b=b)
            for i in range(len(examples))
            for r in range(repetitions)
            for a, b in combinations(range(len(pinned)), 2)
        ]
        stamp = now()
        experiment = ExperimentRecord(
            experiment_id=str(uuid.uuid4()),
            owner=owner,
            dataset_id=dataset_id,
            name=name,
            arms=pinned,
            repetitions=repetitions,
            max_concurrency=max_concurrency,
            status="pending",
            metadata=dict(metadata or {}),
            created_at=stamp,
            updated_at=stamp,
            example_count=len(examples),
            runs_total=len(tasks),
            pairs_total=len(pairs),
        )
        snapshots = [
            ExampleSnapshot(
                example_index=i,
                example_id=e.example_id,
                input=e.input,
                expectations=e.expectations,
            )
            for i, e in enumerate(examples)
        ]
        first = {
            "experiment_id": experiment.experiment_id,
            "dataset_id": dataset_id,
            "status": "pending",
            "arms": names,
            "runs_total": len(tasks),
            "pairs_total": len(pairs),
        }
        try:
            await self._experiments.insert(
                experiment,
                snapshots,
                tasks,
                pairs,
                ("metadata", dumps(first)),
                max_active=MAX_ACTIVE_EXPERIMENTS,
                max_total=MAX_EXPERIMENTS_PER_OWNER,
            )
        except LimitReached as exc:
            raise Conflict(str(exc)) from None
        return experiment

    async def _arm(self, owner: str, index: int, arm: Arm) -> Arm:
        """Return an arm checked and pinned: its assistant resolved, its version fixed."""
        where = f"arms.{index}"
        try:
            assistant = await self._core.resolve(owner, arm.assistant_id)
        except NotFound as exc:
            raise NotFound(exc.message, field=f"{where}.assistant_id") from None
        example = self._core.builtins.get(self._hooks.example_assistant)
        if example is None:
            raise NotFound("this server runs no experiments (no assistant takes examples)")
        graph = example.graph_id
        if assistant.graph_id != graph:
            raise InvalidFields.at(
                f"{where}.assistant_id",
                f"assistant {arm.assistant_id!r} runs graph {assistant.graph_id!r}; an arm "
                f"runs graph {graph!r}, whose input the examples are",
            )
        version: int | None = None
        if assistant.record is None:
            if arm.version not in (None, 1):
                raise InvalidFields.at(
                    f"{where}.version", f"built-in assistant {arm.assistant_id!r} has version 1"
                )
        else:
            version = arm.version or assistant.record.version
            found = await self._core.created.get(owner, arm.assistant_id, version)
            if found is None:
                raise NotFound(
                    f"assistant {arm.assistant_id!r} has no version {version}",
                    field=f"{where}.version",
                )
        try:
            models = self._hooks.check_models(arm.models)
        except ValueError as exc:
            raise InvalidFields.at(f"{where}.models", str(exc)) from None
        record = assistant.record
        default = arm.assistant_id if record is None else f"{record.name}@v{version}"
        return Arm(
            name=arm.name or default, assistant_id=arm.assistant_id, version=version, models=models
        )

    # -- read ----------------------------------------------------------------------------

    async def get(self, owner: str, experiment_id: str) -> ExperimentRecord:
        """Return the owner's experiment; raise NotFound (also for another owner's)."""
        experiment = await self._experiments.get(owner, experiment_id)
        if experiment is None:
            raise NotFound(f"experiment {experiment_id!r} not found")
        return experiment

    async def detail(
        self, owner: str, experiment_id: str, *, offset: int = 0, limit: int = 20
    ) -> dict[str, Any]:
        """Return the experiment with its summary so far and a page of its results.

        The results are per example: the posts side by side, and each judged pair
        with the judge's answers and reasons in both orders.
        """
        experiment = await self.get(owner, experiment_id)
        runs, pairs = await self._experiments.tasks(experiment_id)
        examples = await self._experiments.examples(experiment_id)
        page = examples[offset : offset + min(limit, MAX_RESULTS_PAGE)]
        shown = {ex.example_index for ex in page}
        return {
            **experiment.to_json(),
            "summary": summarize(experiment, runs, pairs),
            "results": results_by_example(
                experiment,
                page,
                [r for r in runs if r.example_index in shown],
                [p for p in pairs if p.example_index in shown],
            ),
            "results_total": len(examples),
        }

    async def search(
        self,
        owner: str,
        *,
        dataset_id: str | None = None,
        status: ExperimentStatus | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[ExperimentRecord]:
        """Return the owner's experiments, newest first."""
        return await self._experiments.search(
            owner, dataset_id=dataset_id, status=status, limit=limit, offset=offset
        )

    async def count(
        self, owner: str, *, dataset_id: str | None = None, status: ExperimentStatus | None = None
    ) -> int:
        """Return how many of the owner's experiments match."""
        return await self._experiments.count(owner, dataset_id=dataset_id, status=status)

    async def follow(
        self, owner: str, experiment_id: str, *, after: int = 0, idle: float = 15.0
    ) -> AsyncIterator[Frame | Idle]:
        """Yield the experiment's progress frames after `after`, live, until `end`.

        `IDLE` whenever nothing came for `idle` seconds. It ends after the `end`
        frame, or when the experiment is deleted.

        Raises:
            NotFound: The owner has no such experiment (before anything is yielded).
        """
        await self.get(owner, experiment_id)
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            frames = await self._experiments.events(experiment_id, after)
            for frame in frames:
                yield frame
                after = frame.id
                if frame.event == "end":
                    return
            if frames:
                quiet_since = loop.time()
                continue
            if await self._experiments.get(owner, experiment_id) is None:
                return
            if loop.time() - quiet_since >= idle:
                quiet_since = loop.time()
                yield IDLE
            await asyncio.sleep(self.interval)

    # -- cancel, delete --------------------------------------------------------------------

    async def cancel(self, owner: str, experiment_id: str) -> ExperimentRecord:
        """End an active experiment as `cancelled` and cancel the runs it started.

        An experiment that has ended already is answered as it is.
        """
        async with self._pass_lock:  # no pass of this process starts a run meanwhile
            ended = await self._experiments.cancel(
                owner, experiment_id, now(), [("end", dumps({"status": "cancelled"}))]
            )
        if ended is None:
            raise NotFound(f"experiment {experiment_id!r} not found")
        experiment, started = ended
        for run_id in started:
            self._runs.cancel_soon(run_id)
        return experiment

    async def delete(self, owner: str, experiment_id: str) -> None:
        """Cancel the experiment's runs still going, then delete it (its runs stay)."""
        await self.cancel(owner, experiment_id)
        if not await self._experiments.delete(owner, experiment_id):
            raise NotFound(f"experiment {experiment_id!r} not found")

    # -- advance ---------------------------------------------------------------------------

    async def _scheduled_pass(self, _now: Any) -> int:
        return await self.advance()

    async def advance(self, only: str | None = None) -> int:
        """Advance each active experiment (or `only` that one) by one pass; return how many."""
        advanced: set[str] = set()
        async with self._pass_lock:
            for _ in range(1 if only else EXPERIMENTS_PER_PASS):
                if self._core.closing or not await self._advance_one(advanced, only):
                    break
        return len(advanced)

    async def _advance_one(self, advanced: set[str], only: str | None) -> bool:
        """Claim one experiment not in `advanced` and run a pass over it; False: none is free.

        A pass that fails writes nothing (its transaction, if any, rolls back) and is
        logged; the experiment is advanced again next time, its runs found again by
        their idempotency keys.
        """
        claimed_id = None
        try:
            async with self._experiments.claim(advanced, only) as claimed:
                if claimed is None:
                    return False
                claimed_id = claimed.experiment.experiment_id
                advanced.add(claimed_id)
                step = ExperimentAdvance(
                    self._core, self._runs, self._experiments, self._hooks, claimed
                )
                await step.run()
        except Exception:
            if claimed_id is None:
                raise  # the claim itself failed (the database): the scheduler logs it
            log.exception("experiment %s: a pass failed; the next one goes on", claimed_id)
        return True

    async def drive(
        self,
        owner: str,
        experiment_id: str,
        on_pass: Callable[[ExperimentRecord], None] | None = None,
    ) -> ExperimentRecord:
        """Advance one experiment until it ends; return it (`atelier eval`).

        Args:
            owner: The experiment's owner.
            experiment_id: The experiment.
            on_pass: Called with the experiment after each pass (its progress).

        A task cancelled while it drives (Ctrl-C) cancels the experiment first.
        """
        try:
            while True:
                await self.advance(only=experiment_id)
                experiment = await self.get(owner, experiment_id)
                if on_pass is not None:
                    on_pass(experiment)
                if not experiment.active:
                    return experiment
                await asyncio.sleep(self.interval)
        except asyncio.CancelledError:
            await self.cancel(owner, experiment_id)
            raise
