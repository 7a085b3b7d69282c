"""The repositories of the resources beside threads and runs.

Crons, created assistants, datasets, experiments, online evaluation and campaigns. Each has one
implementation per backend (`engine/sqlite/`, `engine/postgres/`, built by
`engine.opener` for the backend's kind), owned by one API key per row (another key
reads None, as for none); the engine's services use them (`engine.services.*`). A
new resource keeps its protocol beside its service (docs/architecture.md, "Adding a
resource").
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from engine.assistants import AssistantRecord
from engine.campaigns import CampaignRecord, CampaignStatus, Publication
from engine.crons import CronRecord
from engine.datasets import DatasetRecord, ExampleRecord
from engine.experiments import (
    ExampleSnapshot,
    ExperimentPair,
    ExperimentRecord,
    ExperimentRun,
    ExperimentStatus,
)
from engine.feedback import FeedbackRecord
from engine.online_evaluation import EvaluationSetting, OnlineJudgement, ReportRow
from engine.quotas import Limits
from engine.records import Frame, RunRecord, ThreadRecord


class CronTick(Protocol):
    """A due cron claimed for firing: nobody else fires it until `fire` commits or fails."""

    #: The cron as claimed; its `next_run_at` is the tick being fired.
    cron: CronRecord

    async def fire(
        self,
        next_run_at: str | None,
        run: RunRecord | None,
        *,
        new_thread: ThreadRecord | None = None,
        exclusive: bool = True,
        limits: Limits | None = None,
    ) -> bool:
        """Record the tick's run (if any) and move `next_run_at` on, in one transaction.

        Args:
            next_run_at: The cron's next tick (None: it is over).
            run: The run to store as `RunRepository.insert` stores it, or None to
                skip the tick (its request was refused).
            new_thread: A thread to create with the run.
            exclusive: Store the run only if its thread has no pending or running run.
            limits: The owner's limits, counted as `RunRepository.insert` counts them.

        Returns:
            Whether the run was stored (False: skipped, its thread was busy, or its
            owner over a limit; the tick is spent either way).
        """
        ...

    async def disable(self) -> None:
        """Disable the cron in the claim's transaction: its owner's key may no longer run.

        Its `next_run_at` stays, so enabling it again recomputes the next tick as usual.
        """
        ...


class CronRepository(Protocol):
    """Crons, each owned by one API key, and the claiming of their due ticks."""

    async def insert(self, cron: CronRecord, *, limit: int | None = None) -> None:
        """Store a new cron.

        With `limit`, only while its owner has fewer crons, counted in the insert's
        transaction (in turn with every other process's); else `QuotaExceeded`.
        """
        ...

    async def get(self, owner: str, cron_id: str) -> CronRecord | None:
        """Return the owner's cron, or None (also when another owner has it)."""
        ...

    async def replace(self, cron: CronRecord, *, previous_next_run_at: str | None) -> bool:
        """Write a cron's schedule, payload, state and next tick, if its tick did not move.

        Returns:
            False when its `next_run_at` is no longer `previous_next_run_at` (a tick
            fired since it was read; read it again), or it is gone.
        """
        ...

    async def delete(self, owner: str, cron_id: str) -> bool:
        """Delete the owner's cron; False when the owner has none by that id."""
        ...

    async def search(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        enabled: bool | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[CronRecord]:
        """Return the owner's crons matching every given filter."""
        ...

    async def count(
        self,
        owner: str,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's crons match every given filter."""
        ...

    def claim_due(self, now: str) -> AbstractAsyncContextManager[CronTick | None]:
        """Claim one enabled cron whose `next_run_at` is at or before `now` (None: none is).

        The claim holds until the block ends; a cron another process holds is skipped.
        """
        ...


class AssistantExists(RuntimeError):
    """An assistant id is taken (by any owner)."""


class AssistantRepository(Protocol):
    """Assistants clients created, each owned by one API key, with their versions.

    A version is never changed once written; `update` adds one and makes it the
    latest, `set_latest` points the assistant at another. Every read answers the
    owner's assistant only (None or False for another owner's, as for none).
    """

    async def insert(self, record: AssistantRecord, *, limit: int | None = None) -> None:
        """Store a new assistant with its first version (`record`).

        With `limit`, only while its owner has fewer assistants, counted in the
        insert's transaction (in turn with every other process's).

        Raises:
            AssistantExists: The id is taken, by any owner.
            QuotaExceeded: The owner has `limit` assistants.
        """
        ...

    async def get(
        self, owner: str, assistant_id: str, version: int | None = None
    ) -> AssistantRecord | None:
        """Return the owner's assistant at its latest version (or at `version`), or None."""
        ...

    async def update(
        self, owner: str, assistant_id: str, changes: dict[str, Any], stamp: str
    ) -> AssistantRecord | None:
        """Write a new version: the latest one with `changes` (its fields), made the latest.

        Returns:
            The new version, or None when the owner has no such assistant.
        """
        ...

    async def set_latest(
        self, owner: str, assistant_id: str, version: int
    ) -> AssistantRecord | None:
        """Make `version` the one runs use; return it (None: no such assistant or version)."""
        ...

    async def versions(
        self,
        owner: str,
        assistant_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[AssistantRecord]:
        """Return the assistant's versions matching `metadata`, newest first."""
        ...

    async def delete(self, owner: str, assistant_id: str) -> bool:
        """Delete the owner's assistant with every version; False when there is none."""
        ...

    async def search(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[AssistantRecord]:
        """Return the owner's assistants (at their latest versions) matching every filter."""
        ...

    async def count(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's assistants match every given filter."""
        ...


class LimitReached(RuntimeError):
    """A write would pass one of an owner's bounds (datasets, examples, experiments, campaigns)."""


class DatasetRepository(Protocol):
    """Datasets and their examples, each dataset owned by one API key."""

    async def insert(self, dataset: DatasetRecord, *, limit: int) -> None:
        """Store a new dataset.

        Raises:
            LimitReached: The owner has `limit` datasets already.
        """
        ...

    async def get(self, owner: str, dataset_id: str) -> DatasetRecord | None:
        """Return the owner's dataset, or None."""
        ...

    async def update(
        self, owner: str, dataset_id: str, changes: dict[str, Any], stamp: str
    ) -> DatasetRecord | None:
        """Change its `name`, `description` or `metadata`; return it (None: no such dataset)."""
        ...

    async def delete(self, owner: str, dataset_id: str) -> bool:
        """Delete the owner's dataset with its examples; False when there is none."""
        ...

    async def search(
        self,
        owner: str,
        *,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[DatasetRecord]:
        """Return the owner's datasets whose name contains `name` and metadata `metadata`."""
        ...

    async def count(
        self, owner: str, *, name: str | None = None, metadata: dict[str, Any] | None = None
    ) -> int:
        """Return how many of the owner's datasets match."""
        ...

    async def add_examples(
        self, owner: str, dataset_id: str, examples: Sequence[ExampleRecord], *, limit: int
    ) -> list[ExampleRecord] | None:
        """Append examples (their positions follow the dataset's last); return them.

        Returns:
            The examples as stored, or None when the owner has no such dataset.

        Raises:
            LimitReached: The dataset would hold more than `limit` examples (none added).
        """
        ...

    async def examples(
        self, owner: str, dataset_id: str, *, limit: int, offset: int = 0
    ) -> list[ExampleRecord]:
        """Return the dataset's examples in order (none for another owner's dataset)."""
        ...

    async def delete_example(self, owner: str, dataset_id: str, example_id: str) -> bool:
        """Delete one example of the owner's dataset; False when there is none."""
        ...


class ExperimentPass(Protocol):
    """An experiment claimed for one pass: nobody else advances it until the pass ends."""

    #: The experiment as claimed.
    experiment: ExperimentRecord

    async def open_tasks(self) -> tuple[list[ExperimentRun], list[ExperimentPair]]:
        """Return its tasks still pending or running, in order (without results)."""
        ...

    async def results(self, keys: Collection[tuple[int, int, int]]) -> list[ExperimentRun]:
        """Return the runs (example, arm, repetition) named, with their results."""
        ...

    async def examples(self, indexes: Collection[int]) -> list[ExampleSnapshot]:
        """Return the examples at these indexes."""
        ...

    async def commit(
        self,
        experiment: ExperimentRecord,
        runs: Sequence[ExperimentRun],
        pairs: Sequence[ExperimentPair],
        events: Sequence[tuple[str, str]],
    ) -> bool:
        """Write the pass's changes in one transaction, if the experiment is still active.

        Args:
            experiment: Its new status, counts, error and times.
            runs: Changed runs, written whole.
            pairs: Changed pairs, written whole.
            events: Progress frames (event name, JSON data), numbered after its last.

        Returns:
            False when it was cancelled or deleted meanwhile (nothing written).
        """
        ...


class ExperimentRepository(Protocol):
    """Experiments, each owned by one API key, their tasks and their progress frames."""

    async def insert(
        self,
        experiment: ExperimentRecord,
        examples: Sequence[ExampleSnapshot],
        runs: Sequence[ExperimentRun],
        pairs: Sequence[ExperimentPair],
        first: tuple[str, str],
        *,
        max_active: int,
        max_total: int,
    ) -> None:
        """Store a new experiment with its tasks and its first frame (id 1).

        Raises:
            LimitReached: The owner has `max_active` experiments pending or running,
                or `max_total` in all.
        """
        ...

    async def get(self, owner: str, experiment_id: str) -> ExperimentRecord | None:
        """Return the owner's experiment, or None."""
        ...

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
        ...

    async def count(
        self, owner: str, *, dataset_id: str | None = None, status: ExperimentStatus | None = None
    ) -> int:
        """Return how many of the owner's experiments match."""
        ...

    async def examples(self, experiment_id: str) -> list[ExampleSnapshot]:
        """Return the examples the experiment runs, in order."""
        ...

    async def tasks(self, experiment_id: str) -> tuple[list[ExperimentRun], list[ExperimentPair]]:
        """Return every task of the experiment with its result."""
        ...

    async def events(self, experiment_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return up to `limit` progress frames with ids above `after`, in order."""
        ...

    async def cancel(
        self, owner: str, experiment_id: str, stamp: str, events: Sequence[tuple[str, str]]
    ) -> tuple[ExperimentRecord, list[str]] | None:
        """End an active experiment as `cancelled` with its open tasks; append `events`.

        Returns:
            The experiment as it is now and the ids of the runs its open tasks had
            started (to cancel), or None when the owner has no such experiment. An
            experiment that had ended already is returned as it is, with no run.
        """
        ...

    async def delete(self, owner: str, experiment_id: str) -> bool:
        """Delete the owner's experiment with its tasks and frames; False when there is none."""
        ...

    def claim(
        self, exclude: Collection[str] = (), only: str | None = None
    ) -> AbstractAsyncContextManager[ExperimentPass | None]:
        """Claim the active experiment advanced least recently (None: none is free).

        Args:
            exclude: Experiments not to claim (those advanced in this pass already).
            only: Claim this experiment or none.
        """
        ...


class OnlineEvaluationRepository(Protocol):
    """Sampling rates per (API key, assistant), and the runs they sent to the judge."""

    async def put_setting(self, setting: EvaluationSetting) -> None:
        """Store the owner's setting for an assistant, replacing any."""
        ...

    async def get_setting(self, owner: str, assistant_id: str) -> EvaluationSetting | None:
        """Return the owner's setting for an assistant, or None."""
        ...

    async def sampling(self) -> list[EvaluationSetting]:
        """Return every setting with a rate above 0 (every owner's)."""
        ...

    async def unseen_runs(self, setting: EvaluationSetting, limit: int) -> list[OnlineJudgement]:
        """Return runs to look at: the setting's assistant's, by its owner, with `success`.

        Finished at or after `since`, not an experiment's, with no judgement row yet;
        oldest first. Their `status` is for the caller to set.
        """
        ...

    async def record(self, judgements: Sequence[OnlineJudgement]) -> None:
        """Insert judgement rows; a run that has one keeps it (another process was first)."""
        ...

    async def open(self, limit: int) -> list[OnlineJudgement]:
        """Return judgements `pending` or `judging`, oldest first (every owner's)."""
        ...

    async def start(self, run_id: str, judge_run_id: str, judge_thread_id: str) -> bool:
        """Record the judge's run of a `pending` judgement; False when it is no longer pending."""
        ...

    async def finish(
        self, judgement: OnlineJudgement, feedback: FeedbackRecord | None, *, expected: str
    ) -> bool:
        """Record a judgement's end and its feedback entry in one transaction.

        Only while the judgement's stored status is still `expected` (`pending` for one
        that needs no judge, `judging` for one the judge answered).

        Returns:
            False when it was no longer `expected` (another process moved it on):
            nothing written.
        """
        ...

    async def report_rows(
        self, owner: str, assistant_id: str, since: str, until: str, limit: int
    ) -> list[ReportRow]:
        """Return the judge's verdict and people's latest `quality` per run in the window.

        The owner's runs of the assistant that finished in [since, until), not an
        experiment's, that have either; newest first, at most `limit`.
        """
        ...

    async def pending(self, owner: str, assistant_id: str) -> int:
        """Return how many of the owner's runs of the assistant wait for the judge."""
        ...


class CampaignClaim(Protocol):
    """An active campaign claimed by one driver pass: nobody else drives it until it ends."""

    #: The campaign as claimed.
    campaign: CampaignRecord

    async def save(
        self, campaign: CampaignRecord, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write the campaign (its version bumped) and its new publications with the claim.

        Returns:
            False when it changed since it was claimed (a person's edit): nothing was
            written; the next pass reads it again.
        """
        ...


class CampaignRepository(Protocol):
    """Campaigns, each owned by one API key, their publications, and the claims on both.

    A campaign is written whole (its items are a JSON document of the row) and only
    while its `version` is the one read (`replace`), so a person's edit and a driver
    pass never overwrite each other. Publications are rows of their own: the
    publisher claims the due ones (`claim_calls`, `hand_to_outbox`) in any process.
    """

    async def insert(self, campaign: CampaignRecord, *, limit: int) -> None:
        """Store a new campaign.

        Raises:
            LimitReached: The owner has `limit` campaigns already.
        """
        ...

    async def get(self, owner: str, campaign_id: str) -> CampaignRecord | None:
        """Return the owner's campaign, or None (also when another owner has it)."""
        ...

    async def replace(
        self, campaign: CampaignRecord, *, version: int, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write a campaign read at `version` (bumping it) and its new publications.

        Returns:
            False when its version moved (or it is gone): nothing was written.
        """
        ...

    async def delete(self, owner: str, campaign_id: str) -> bool:
        """Delete the owner's campaign and its publications; False when there is none."""
        ...

    async def search(
        self,
        owner: str,
        *,
        status: CampaignStatus | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[CampaignRecord]:
        """Return the owner's campaigns (of one status, if given), newest first."""
        ...

    def claim_next(self, after: str) -> AbstractAsyncContextManager[CampaignClaim | None]:
        """Claim the active campaign with the smallest id above `after` that nobody holds."""
        ...

    async def publications(self, owner: str, campaign_id: str) -> list[Publication]:
        """Return a campaign's publications by slot (a webhook's as its delivery stands)."""
        ...

    async def due_owners(self, now: str, limit: int) -> list[str]:
        """Return the owners of publications due at `now` (webhooks and calls), at most `limit`."""
        ...

    async def hand_to_outbox(self, now: str, skip: Collection[str] = ()) -> int:
        """Queue the webhook publications due at `now` in the webhook outbox; return how many.

        Each is queued once (its delivery's id is derived from it, `engine.publishing`),
        in the transaction that marks it handed over; from then on its delivery's
        status, attempts and error are its own. The publications of the owners in
        `skip` (keys that may no longer act) stay where they are.
        """
        ...

    async def claim_calls(
        self, now: str, worker: str, lease_seconds: float, limit: int, skip: Collection[str] = ()
    ) -> list[Publication]:
        """Lease up to `limit` due MCP publications to `worker`, marking them `sending`.

        Each claim counts an attempt; what is claimed is committed before it returns.
        The publications of the owners in `skip` are not claimed.
        """
        ...

    async def record_call(
        self,
        publication: Publication,
        *,
        worker: str,
        status: str,
        error: str | None = None,
        external_id: str | None = None,
        answer: str | None = None,
        published_at: str | None = None,
        next_attempt_at: str | None = None,
    ) -> bool:
        """Record how a claimed call went; False when `worker` no longer held it."""
        ...

    async def expire_calls(self) -> int:
        """Mark `unknown` the calls whose sender's lease ran out mid-call; return how many."""
        ...
