"""Datasets: named lists of examples (a run input, and what its post is expected to be).

A dataset belongs to the API key that made it (another key reads it as missing). Each
example holds the input of one run of the example assistant (`EvaluationHooks.example_assistant`,
`atelier` here) — checked against that assistant's input model when it is added — and
optional `expectations`, checked by the product's hook (`check_expectations`). An
example made from a thread records where it came from (`source`). Experiments
(`engine.experiments`) run every example of a dataset on two or more assistants.

Everything is bounded: datasets per key, examples per dataset, the size of an example.
See docs/evaluate.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Datasets one API key keeps at most (one more is refused: delete one first).
MAX_DATASETS_PER_OWNER = 200
#: Examples one dataset holds at most.
MAX_EXAMPLES_PER_DATASET = 1000
#: Examples one request adds at most.
MAX_EXAMPLES_PER_REQUEST = 500
#: Largest example input, and largest expectations, in bytes of JSON.
MAX_EXAMPLE_INPUT_BYTES = 32_768
MAX_EXPECTATIONS_BYTES = 16_384
#: Longest dataset name and description, in characters.
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 2000
#: Threads one "examples from threads" request reads at most.
MAX_THREADS_PER_REQUEST = 100


@dataclass(frozen=True, slots=True)
class ExampleInput:
    """An example as a caller gives it, before it is checked."""

    #: The run input (checked against the example assistant's input model).
    input: Any
    #: What the post is expected to be (checked by the product's hook), or None.
    expectations: Any = None
    #: Where it came from (`{"thread_id", "run_id"}`), or None.
    source: dict[str, Any] | None = None


@dataclass(slots=True)
class DatasetRecord:
    """A dataset: a name, a description, and how many examples it holds."""

    dataset_id: str
    #: The API key that made it (only it sees the dataset).
    owner: str
    name: str
    description: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    example_count: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the dataset as the HTTP API answers it (the owner is not shown)."""
        return {
            "dataset_id": self.dataset_id,
            "name": self.name,
            "description": self.description,
            "metadata": self.metadata,
            "example_count": self.example_count,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(slots=True)
class ExampleRecord:
    """One example of a dataset: a run input and what its post is expected to be."""

    example_id: str
    dataset_id: str
    #: Its place in the dataset (0, 1, …, in the order examples were added).
    position: int
    #: The run input, as the example assistant's input model accepted it.
    input: dict[str, Any]
    #: What the post is expected to be (the product's `Expectations`), or None.
    expectations: dict[str, Any] | None
    created_at: str
    #: Where it came from: `{"thread_id", "run_id"}` for an example made from a thread.
    source: dict[str, Any] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """Return the example as the HTTP API answers it (and a JSONL line holds it)."""
        return {
            "example_id": self.example_id,
            "dataset_id": self.dataset_id,
            "position": self.position,
            "input": self.input,
            "expectations": self.expectations,
            "source": self.source,
            "created_at": self.created_at,
        }


__all__ = [
    "MAX_DATASETS_PER_OWNER",
    "MAX_DESCRIPTION_CHARS",
    "MAX_EXAMPLES_PER_DATASET",
    "MAX_EXAMPLES_PER_REQUEST",
    "MAX_EXAMPLE_INPUT_BYTES",
    "MAX_EXPECTATIONS_BYTES",
    "MAX_NAME_CHARS",
    "MAX_THREADS_PER_REQUEST",
    "DatasetRecord",
    "ExampleInput",
    "ExampleRecord",
]
