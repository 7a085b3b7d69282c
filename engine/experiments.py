"""Experiments: every example of a dataset run on two or more arms, checked, judged in pairs.

An experiment runs each example of a dataset on every *arm* (an assistant: a built-in
one, or a created one at a pinned version, optionally with a model per LLM role),
`repetitions` times, as ordinary runs of the engine. Each finished run is scored by
the product's code checks (`EvaluationHooks.score_post`); then every pair of arms is
compared per example and repetition by the product's pairwise judge, itself an
ordinary run of a hidden assistant (`EvaluationHooks.pairwise_judge`). `summarize`
turns the results into a summary per arm (wins, ties and losses, the win rate with its
Wilson interval, the pass rate, mean critic score, cost, time, calls and tokens;
`engine.experiment_summary`).

Progress lives in the database as *tasks*: one `ExperimentRun` per example × arm ×
repetition and one `ExperimentPair` per example × repetition × pair of arms, each
`pending` → `running` (its run started) → `done` / `error` / `cancelled`. Any process
advances an experiment (`engine.services.experiments`), one at a time per experiment,
so its runs are started and judged once each. See docs/evaluate.md.

The engine knows no product: the hooks (`EvaluationHooks`) say how an example becomes a
run input, what a post is and whether it passes, what the judge reads and answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

#: An experiment's status: the SDK's run statuses, plus `cancelled`.
ExperimentStatus = Literal["pending", "running", "success", "error", "cancelled"]
EXPERIMENT_STATUSES: tuple[ExperimentStatus, ...] = (
    "pending",
    "running",
    "success",
    "error",
    "cancelled",
)
ACTIVE_EXPERIMENT: tuple[ExperimentStatus, ...] = ("pending", "running")
#: A task's status: waiting for its run, its run started, or ended.
TaskStatus = Literal["pending", "running", "done", "error", "cancelled"]
OPEN_TASK: tuple[TaskStatus, ...] = ("pending", "running")
#: Which post of a pair won (the judge's answer mapped back to the arms).
PairWinner = Literal["a", "b", "tie"]

#: Arms of one experiment, at least and at most.
MIN_ARMS, MAX_ARMS = 2, 8
#: Repetitions of each example on each arm, at most.
MAX_REPETITIONS = 10
#: Runs (examples × arms × repetitions) of one experiment at most.
MAX_EXPERIMENT_RUNS = 2000
#: Runs (arms' and judges') one experiment keeps executing at once, at most / by default.
MAX_CONCURRENCY, DEFAULT_CONCURRENCY = 16, 4
#: Experiments of one API key that are pending or running at once, and kept in all.
MAX_ACTIVE_EXPERIMENTS = 5
MAX_EXPERIMENTS_PER_OWNER = 1000


@dataclass(frozen=True, slots=True)
class Arm:
    """One configuration an experiment compares: an assistant, a version, models per role."""

    name: str
    assistant_id: str
    #: The created assistant's version its runs use (pinned at creation; None: a built-in).
    version: int | None = None
    #: A model per LLM role (`EvaluationHooks.arm_config` puts it in the runs' config).
    models: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the arm as stored and answered."""
        return {
            "name": self.name,
            "assistant_id": self.assistant_id,
            "version": self.version,
            "models": dict(self.models),
        }

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> Arm:
        """Return the arm a stored object holds."""
        return cls(
            name=str(stored["name"]),
            assistant_id=str(stored["assistant_id"]),
            version=stored.get("version"),
            models=dict(stored.get("models") or {}),
        )


@dataclass(slots=True)
class ExperimentRecord:
    """An experiment: a dataset, its arms, and where it stands."""

    experiment_id: str
    #: The API key that made it (only it sees the experiment; its runs are that key's).
    owner: str
    dataset_id: str
    name: str | None
    arms: list[Arm]
    repetitions: int
    max_concurrency: int
    status: ExperimentStatus
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    example_count: int
    runs_total: int
    pairs_total: int
    runs_done: int = 0
    pairs_done: int = 0
    finished_at: str | None = None
    error: str | None = None
    #: The id of its progress stream's last frame.
    last_event_id: int = 0

    @property
    def active(self) -> bool:
        """Whether it is pending or running."""
        return self.status in ACTIVE_EXPERIMENT

    def to_json(self) -> dict[str, Any]:
        """Return the experiment as the HTTP API answers it (without summary and results)."""
        return {
            "experiment_id": self.experiment_id,
            "dataset_id": self.dataset_id,
            "name": self.name,
            "status": self.status,
            "arms": [arm.to_json() for arm in self.arms],
            "repetitions": self.repetitions,
            "max_concurrency": self.max_concurrency,
            "metadata": self.metadata,
            "progress": {
                "examples": self.example_count,
                "runs_total": self.runs_total,
                "runs_done": self.runs_done,
                "pairs_total": self.pairs_total,
                "pairs_done": self.pairs_done,
            },
            "error": self.error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
        }


@dataclass(frozen=True, slots=True)
class ExampleSnapshot:
    """An example as the experiment took it from its dataset (later edits do not change it)."""

    example_index: int
    example_id: str
    input: dict[str, Any]
    expectations: dict[str, Any] | None


@dataclass(slots=True)
class ExperimentRun:
    """One example run on one arm, once (a task of the experiment)."""

    example_index: int
    arm: int
    repetition: int
    status: TaskStatus = "pending"
    run_id: str | None = None
    thread_id: str | None = None
    #: The scored post (`PostOutcome.to_json()` with the run's `status` and `seconds`).
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        """(example, arm, repetition)."""
        return self.example_index, self.arm, self.repetition

    @property
    def open(self) -> bool:
        """Whether it still waits for its run (or its run's end)."""
        return self.status in OPEN_TASK


@dataclass(slots=True)
class ExperimentPair:
    """The posts of two arms for one example and repetition, judged once (a task)."""

    example_index: int
    repetition: int
    arm_a: int
    arm_b: int
    status: TaskStatus = "pending"
    run_id: str | None = None
    thread_id: str | None = None
    winner: PairWinner | None = None
    #: The verdict (`PairOutcome.to_json()`).
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def key(self) -> tuple[int, int, int, int]:
        """(example, repetition, arm a, arm b)."""
        return self.example_index, self.repetition, self.arm_a, self.arm_b

    @property
    def open(self) -> bool:
        """Whether it still waits for its judgement."""
        return self.status in OPEN_TASK


@dataclass(frozen=True, slots=True)
class PostOutcome:
    """What the product read of a finished run: its post, its checks, its cost."""

    #: The post as the product shows it (None: the run produced no post).
    post: dict[str, Any] | None
    #: Whether every code check passed (False without a post).
    passed: bool
    #: The names of the failing checks.
    failing: list[str] = field(default_factory=list)
    #: The critic's score of the post (None: not judged).
    critic_score: float | None = None
    #: The run's LLM cost (None: unknown), calls and tokens.
    cost: float | None = None
    calls: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: How the run ended, in the product's words (`completed`, `exhausted`, …).
    outcome: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the outcome as stored in its task."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class PairOutcome:
    """What the pairwise judge decided about a pair of posts."""

    winner: PairWinner
    #: Both orders preferred the same post (or both saw a tie).
    agreed: bool = False
    #: An order had no usable answer (the pair is then a tie).
    unavailable: bool = False
    #: Each order's answer and reasons (`order`, `answer`, `preferred`, `reasons`).
    orders: list[dict[str, Any]] = field(default_factory=list)
    cost: float | None = None
    calls: int = 0
    #: Why no judge was asked (a side without a post), or None.
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the verdict as stored in its task."""
        return asdict(self)


class EvaluationHooks(Protocol):
    """The product's side of evaluations: inputs, checks, the judges and what they answered.

    `app.composition` passes one to the engine's opener; the engine calls it from its
    datasets, experiments and online-evaluation services, and never reads a product
    value itself.
    """

    #: The built-in assistant whose input an example holds (examples are checked with
    #: its input model; an arm must run its graph).
    example_assistant: str
    #: The hidden assistants of the judges: pairwise (experiments) and absolute (online).
    pairwise_judge: str
    post_judge: str

    def check_expectations(self, expectations: Any) -> dict[str, Any]:
        """Return an example's expectations as stored; raise ValueError (pydantic's) when wrong."""
        ...

    def check_models(self, models: Mapping[str, str]) -> dict[str, str]:
        """Return an arm's models per role as stored; raise ValueError naming the role."""
        ...

    def arm_config(self, models: Mapping[str, str]) -> dict[str, Any]:
        """Return the run config that makes a run use `models` (empty: the deployment's)."""
        ...

    def example_of(self, run_input: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the example input a past run's input makes (None: it makes none)."""
        ...

    def run_input(self, example_input: Mapping[str, Any]) -> dict[str, Any]:
        """Return the input an experiment's run of an example starts with."""
        ...

    def score_post(
        self, run_input: Any, values: Mapping[str, Any] | None, expectations: Any
    ) -> PostOutcome:
        """Read a finished run's post from its thread's values and check it."""
        ...

    def pair_input(
        self,
        run_input: Any,
        expectations: Any,
        post_a: Mapping[str, Any],
        post_b: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Return the pairwise judge's run input for two posts of the same brief."""
        ...

    def pair_outcome(self, values: Mapping[str, Any] | None) -> PairOutcome:
        """Read the pairwise judge's verdict from its run's values (none: a tie, unavailable)."""
        ...

    def post_judge_input(
        self, run_input: Any, values: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """Return the post judge's run input for a finished run (None: it has no post)."""
        ...

    def post_judgement(self, values: Mapping[str, Any] | None) -> PostJudgement:
        """Read the post judge's verdict from its run's values."""
        ...


@dataclass(frozen=True, slots=True)
class PostJudgement:
    """The post judge's verdict on one live run (online evaluation)."""

    #: 0–1, or None when no usable answer came (nothing is recorded then).
    score: float | None
    passed: bool | None
    #: The run feedback entry to record: `{"key", "score", "comment"}` (None: none).
    feedback: Mapping[str, Any] | None
    cost: float | None = None


class NoEvaluation:
    """The hooks of an engine opened without the product's: examples hold any JSON object.

    No assistant runs examples, so no experiment can be created; nothing is judged.
    """

    example_assistant = ""
    pairwise_judge = ""
    post_judge = ""

    def check_expectations(self, expectations: Any) -> dict[str, Any]:
        """Return the expectations as they are (a JSON object)."""
        if not isinstance(expectations, Mapping):
            raise ValueError("expectations must be a JSON object")
        return dict(expectations)

    def check_models(self, models: Mapping[str, str]) -> dict[str, str]:
        """Return the models as they are."""
        return dict(models)

    def arm_config(self, models: Mapping[str, str]) -> dict[str, Any]:
        """Return no config."""
        return {}

    def example_of(self, run_input: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the run input as it is."""
        return dict(run_input) if isinstance(run_input, Mapping) else None

    def run_input(self, example_input: Mapping[str, Any]) -> dict[str, Any]:
        """Return the example's input as it is."""
        return dict(example_input)

    def score_post(
        self, run_input: Any, values: Mapping[str, Any] | None, expectations: Any
    ) -> PostOutcome:
        """Return no post."""
        return PostOutcome(post=None, passed=False)

    def pair_input(
        self,
        run_input: Any,
        expectations: Any,
        post_a: Mapping[str, Any],
        post_b: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Return no input."""
        return {}

    def pair_outcome(self, values: Mapping[str, Any] | None) -> PairOutcome:
        """Return a tie."""
        return PairOutcome(winner="tie", unavailable=True)

    def post_judge_input(
        self, run_input: Any, values: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """Return nothing to judge."""
        return None

    def post_judgement(self, values: Mapping[str, Any] | None) -> PostJudgement:
        """Return no verdict."""
        return PostJudgement(score=None, passed=None, feedback=None)


NO_EVALUATION = NoEvaluation()


__all__ = [
    "ACTIVE_EXPERIMENT",
    "DEFAULT_CONCURRENCY",
    "EXPERIMENT_STATUSES",
    "MAX_ACTIVE_EXPERIMENTS",
    "MAX_ARMS",
    "MAX_CONCURRENCY",
    "MAX_EXPERIMENTS_PER_OWNER",
    "MAX_EXPERIMENT_RUNS",
    "MAX_REPETITIONS",
    "MIN_ARMS",
    "NO_EVALUATION",
    "OPEN_TASK",
    "Arm",
    "EvaluationHooks",
    "ExampleSnapshot",
    "ExperimentPair",
    "ExperimentRecord",
    "ExperimentRun",
    "ExperimentStatus",
    "NoEvaluation",
    "PairOutcome",
    "PairWinner",
    "PostJudgement",
    "PostOutcome",
    "TaskStatus",
]
