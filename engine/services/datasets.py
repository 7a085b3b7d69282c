"""The datasets service: a caller's datasets and their examples, checked as they come in.

An example's input is checked against the example assistant's input model
(`EvaluationHooks.example_assistant`, as a run of it would be), its expectations by
the product's hook; a fault is an `InvalidFields` at `examples.<i>.input.<field>`
(or `…expectations…`), and nothing of the request is added. Examples come from the
adapters (a request body, a JSONL file) or from the caller's threads (the input of
each thread's first run, `EvaluationHooks.example_of`); `export_jsonl` writes one
`{"input", "expectations"}` object a line. See docs/evaluate.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from engine.datasets import (
    MAX_DATASETS_PER_OWNER,
    MAX_EXAMPLE_INPUT_BYTES,
    MAX_EXAMPLES_PER_DATASET,
    MAX_EXAMPLES_PER_REQUEST,
    MAX_EXPECTATIONS_BYTES,
    MAX_THREADS_PER_REQUEST,
    DatasetRecord,
    ExampleInput,
    ExampleRecord,
)
from engine.errors import Conflict, InvalidFields, NotFound
from engine.experiments import EvaluationHooks
from engine.records import now
from engine.repositories import DatasetRepository, LimitReached
from engine.serde import dumps
from engine.services.core import EngineCore


def _errors_at(prefix: tuple[Any, ...], exc: ValidationError) -> list[dict[str, Any]]:
    return [{**e, "loc": (*prefix, *e["loc"])} for e in exc.errors(include_url=False)]


class DatasetsService:
    """Datasets, each owned by one API key, and their examples."""

    def __init__(
        self, core: EngineCore, datasets: DatasetRepository, hooks: EvaluationHooks
    ) -> None:
        """Serve datasets from `datasets`; check examples with the example assistant and `hooks`."""
        self._core = core
        self._datasets = datasets
        self._hooks = hooks

    # -- datasets ------------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        *,
        name: str,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> DatasetRecord:
        """Store a new, empty dataset; raise Conflict when the caller keeps too many."""
        stamp = now()
        dataset = DatasetRecord(
            dataset_id=str(uuid.uuid4()),
            owner=owner,
            name=name,
            description=description,
            metadata=dict(metadata or {}),
            created_at=stamp,
            updated_at=stamp,
        )
        try:
            await self._datasets.insert(dataset, limit=MAX_DATASETS_PER_OWNER)
        except LimitReached as exc:
            raise Conflict(f"{exc}; delete one first") from None
        return dataset

    async def get(self, owner: str, dataset_id: str) -> DatasetRecord:
        """Return the owner's dataset; raise NotFound (also for another owner's)."""
        dataset = await self._datasets.get(owner, dataset_id)
        if dataset is None:
            raise NotFound(f"dataset {dataset_id!r} not found")
        return dataset

    async def update(self, owner: str, dataset_id: str, changes: dict[str, Any]) -> DatasetRecord:
        """Change a dataset's `name`, `description` or `metadata`; return it."""
        await self.get(owner, dataset_id)
        updated = await self._datasets.update(owner, dataset_id, changes, now())
        if updated is None:
            raise NotFound(f"dataset {dataset_id!r} not found")
        return updated

    async def delete(self, owner: str, dataset_id: str) -> None:
        """Delete the owner's dataset with its examples (experiments keep their copies)."""
        if not await self._datasets.delete(owner, dataset_id):
            raise NotFound(f"dataset {dataset_id!r} not found")

    async def search(
        self,
        owner: str,
        *,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[DatasetRecord]:
        """Return the owner's datasets whose name contains `name`, newest first."""
        return await self._datasets.search(
            owner, name=name, metadata=metadata, limit=limit, offset=offset
        )

    async def count(
        self, owner: str, *, name: str | None = None, metadata: dict[str, Any] | None = None
    ) -> int:
        """Return how many of the owner's datasets match."""
        return await self._datasets.count(owner, name=name, metadata=metadata)

    # -- examples ------------------------------------------------------------------------

    def check_example(self, index: int, example: ExampleInput) -> tuple[dict, dict | None]:
        """Return an example's input and expectations as stored.

        Raises:
            InvalidFields: Each fault, at `examples.<index>.<field>…`.
        """
        where: tuple[Any, ...] = ("examples", index)
        if not isinstance(example.input, dict):
            raise InvalidFields.at(f"examples.{index}.input", "input must be a JSON object")
        served = self._core.builtins.get(self._hooks.example_assistant)
        spec = served.spec if served is not None else None
        checked: dict[str, Any] = dict(example.input)
        if spec is not None and spec.input_model is not None:
            try:
                model = spec.input_model.model_validate(checked)
            except ValidationError as exc:
                raise InvalidFields(_errors_at((*where, "input"), exc)) from None
            checked = model.model_dump(mode="json", exclude_unset=True)
        if len(dumps(checked).encode()) > MAX_EXAMPLE_INPUT_BYTES:
            raise InvalidFields.at(
                f"examples.{index}.input",
                f"an example's input may be at most {MAX_EXAMPLE_INPUT_BYTES} bytes of JSON",
            )
        expected = example.expectations
        if expected is not None:
            try:
                expected = self._hooks.check_expectations(expected)
            except ValidationError as exc:
                raise InvalidFields(_errors_at((*where, "expectations"), exc)) from None
            except ValueError as exc:
                raise InvalidFields.at(f"examples.{index}.expectations", str(exc)) from None
            if len(dumps(expected).encode()) > MAX_EXPECTATIONS_BYTES:
                raise InvalidFields.at(
                    f"examples.{index}.expectations",
                    f"expectations may be at most {MAX_EXPECTATIONS_BYTES} bytes of JSON",
                )
        return checked, expected

    async def add_examples(
        self, owner: str, dataset_id: str, examples: Sequence[ExampleInput]
    ) -> list[ExampleRecord]:
        """Check every example, then add them all to the owner's dataset (or none).

        Raises:
            RunsError: NotFound (the dataset), InvalidFields (an example), Conflict
                (the dataset would hold more than `MAX_EXAMPLES_PER_DATASET`).
        """
        await self.get(owner, dataset_id)
        if not examples:
            raise InvalidFields.at("examples", "give at least one example")
        if len(examples) > MAX_EXAMPLES_PER_REQUEST:
            raise InvalidFields.at(
                "examples", f"at most {MAX_EXAMPLES_PER_REQUEST} examples may be added at once"
            )
        stamp = now()
        records = []
        for index, example in enumerate(examples):
            checked, expected = self.check_example(index, example)
            records.append(
                ExampleRecord(
                    example_id=str(uuid.uuid4()),
                    dataset_id=dataset_id,
                    position=-1,
                    input=checked,
                    expectations=expected,
                    source=example.source,
                    created_at=stamp,
                )
            )
        try:
            stored = await self._datasets.add_examples(
                owner, dataset_id, records, limit=MAX_EXAMPLES_PER_DATASET
            )
        except LimitReached as exc:
            raise Conflict(str(exc)) from None
        if stored is None:
            raise NotFound(f"dataset {dataset_id!r} not found")
        return stored

    async def add_from_threads(
        self, owner: str, dataset_id: str, thread_ids: Sequence[str]
    ) -> list[ExampleRecord]:
        """Add one example per thread of the caller: the input of the thread's first run.

        Raises:
            RunsError: NotFound (the dataset, a thread, another owner's thread), or
                InvalidFields at `thread_ids.<i>` for a thread with no run to take.
        """
        await self.get(owner, dataset_id)
        if not 0 < len(thread_ids) <= MAX_THREADS_PER_REQUEST:
            raise InvalidFields.at("thread_ids", f"give 1 to {MAX_THREADS_PER_REQUEST} thread ids")
        examples: list[ExampleInput] = []
        for index, thread_id in enumerate(thread_ids):
            await self._core.thread(owner, thread_id)
            runs = await self._core.runs.for_thread(thread_id, limit=1000, offset=0)
            first = next((r for r in reversed(runs) if r.options.input is not None), None)
            example = self._hooks.example_of(first.options.input) if first is not None else None
            if first is None or example is None:
                raise InvalidFields.at(
                    f"thread_ids.{index}", f"thread {thread_id!r} has no run with a request"
                )
            source = {"thread_id": thread_id, "run_id": first.run_id}
            examples.append(ExampleInput(input=example, source=source))
        return await self.add_examples(owner, dataset_id, examples)

    async def examples(
        self, owner: str, dataset_id: str, *, limit: int = 100, offset: int = 0
    ) -> list[ExampleRecord]:
        """Return the owner's dataset's examples in order; raise NotFound."""
        await self.get(owner, dataset_id)
        return await self._datasets.examples(owner, dataset_id, limit=limit, offset=offset)

    async def all_examples(self, owner: str, dataset_id: str) -> list[ExampleRecord]:
        """Return every example of the owner's dataset (at most `MAX_EXAMPLES_PER_DATASET`)."""
        return await self.examples(owner, dataset_id, limit=MAX_EXAMPLES_PER_DATASET)

    async def delete_example(self, owner: str, dataset_id: str, example_id: str) -> None:
        """Delete one example of the owner's dataset; raise NotFound."""
        await self.get(owner, dataset_id)
        if not await self._datasets.delete_example(owner, dataset_id, example_id):
            raise NotFound(f"example {example_id!r} not found in dataset {dataset_id!r}")

    async def export_jsonl(self, owner: str, dataset_id: str) -> str:
        """Return the dataset's examples as JSONL: `{"input", "expectations"}` a line."""
        lines = [
            dumps({"input": e.input, "expectations": e.expectations})
            for e in await self.all_examples(owner, dataset_id)
        ]
        return "".join(f"{line}\n" for line in lines)
