"""Datasets: briefs to run experiments on, each with what its post is expected to be.

    POST   /datasets                                  a new, empty dataset
    POST   /datasets/search                           the caller's datasets
    GET    /datasets/{d}                              one dataset
    PATCH  /datasets/{d}                              rename it, describe it, tag it
    DELETE /datasets/{d}                              delete it with its examples
    POST   /datasets/{d}/examples                     add examples (`input`, `expectations`)
    GET    /datasets/{d}/examples                     its examples, in order, paged
    DELETE /datasets/{d}/examples/{e}                 delete one example
    POST   /datasets/{d}/examples/import              add the examples of a JSONL text
    POST   /datasets/{d}/examples/from-threads        add the first request of threads
    GET    /datasets/{d}/export.jsonl                 the examples as JSONL

A dataset belongs to the API key that made it; another key gets 404 and never sees it
listed. An example's `input` is what a run of the `atelier` assistant takes (checked
as a run's would be: a 422 names `examples.<i>.input.<field>`), its `expectations`
what code checks the post against (`must_include`, `must_avoid`, `title_max`,
`body_max`) and what the judge reads (`reference_post`, `judge_notes`). Nothing of a
refused request is added. See docs/evaluate.md.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from app.access import READ, WRITE
from app.deps import DatasetsDep, PrincipalDep
from app.schemas import DIGITS_ONLY, ID_PATTERN, MAX_OFFSET, JsonObject, search_metadata
from engine import (
    MAX_DESCRIPTION_CHARS,
    MAX_EXAMPLES_PER_DATASET,
    MAX_EXAMPLES_PER_REQUEST,
    MAX_NAME_CHARS,
    MAX_THREADS_PER_REQUEST,
    DatasetRecord,
    ExampleInput,
    ExampleRecord,
    InvalidFields,
)

router = APIRouter(tags=["datasets"])

DatasetId = Annotated[str, Path(pattern=ID_PATTERN, description="Dataset id.")]
ExampleId = Annotated[str, Path(pattern=ID_PATTERN, description="Example id.")]
Name = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_NAME_CHARS),
    Field(description="A name people read.", examples=["护肤笔记 · 四条简报"]),
]
Description = Annotated[
    str,
    StringConstraints(max_length=MAX_DESCRIPTION_CHARS),
    Field(description="What the dataset is for.", examples=["学生党护肤的常见请求"]),
]
#: The media type of a JSONL text (one JSON object a line).
JSONL = "application/x-ndjson"
BRIEF_EXAMPLE: dict[str, Any] = {
    "input": {"request": "写一篇小红书笔记：平价护肤，学生党友好", "auto_confirm": True},
    "expectations": {"must_include": ["氨基酸"], "title_max": 20},
}


#: Free-form labels: at most 64 keys and 16 KiB of JSON, keys a search can filter by.
Metadata = Annotated[
    dict[str, Any],
    AfterValidator(search_metadata),
    Field(description="Free-form labels (at most 64 keys, 16 KiB of JSON)."),
]


class DatasetCreate(BaseModel):
    """Body of `POST /datasets`."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    description: Description | None = None
    metadata: Metadata | None = None


class DatasetUpdate(BaseModel):
    """Body of `PATCH /datasets/{dataset_id}`: the fields to change."""

    model_config = ConfigDict(extra="forbid")

    name: Name | None = None
    description: Description | None = None
    metadata: Metadata | None = None


class DatasetSearch(BaseModel):
    """Body of `POST /datasets/search`."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)] | None = Field(
        default=None, description="Part of the name (case-insensitive)."
    )
    metadata: Metadata | None = Field(default=None, description="Metadata the dataset contains.")
    limit: int = Field(default=10, ge=1, le=1000, strict=True)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET, strict=True)


class DatasetOut(BaseModel):
    """A dataset."""

    dataset_id: str
    name: str
    description: str | None
    metadata: dict[str, Any]
    example_count: int = Field(description="Examples it holds.")
    created_at: str
    updated_at: str


class ExampleIn(BaseModel):
    """One example: a run input and, optionally, what its post is expected to be."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [BRIEF_EXAMPLE]})

    input: JsonObject = Field(
        description="The input of a run of the `atelier` assistant (request, platform, "
        "audience, constraints, images, …), checked as a run's input is."
    )
    expectations: JsonObject | None = Field(
        default=None,
        description="What the post is expected to be: must_include, must_avoid (terms), "
        "title_max, body_max (characters), reference_post, judge_notes.",
    )

    def as_input(self) -> ExampleInput:
        """Return the example as the datasets service takes it."""
        return ExampleInput(input=self.input, expectations=self.expectations)


class ExamplesIn(BaseModel):
    """Body of `POST /datasets/{dataset_id}/examples`."""

    model_config = ConfigDict(extra="forbid")

    examples: list[ExampleIn] = Field(
        min_length=1,
        max_length=MAX_EXAMPLES_PER_REQUEST,
        description=f"1–{MAX_EXAMPLES_PER_REQUEST} examples (a dataset holds at most "
        f"{MAX_EXAMPLES_PER_DATASET}).",
    )


class ThreadsIn(BaseModel):
    """Body of `POST /datasets/{dataset_id}/examples/from-threads`."""

    model_config = ConfigDict(extra="forbid")

    thread_ids: list[Annotated[str, StringConstraints(pattern=ID_PATTERN)]] = Field(
        min_length=1,
        max_length=MAX_THREADS_PER_REQUEST,
        description="The caller's threads; each gives the input of its first run.",
    )


class ExampleOut(BaseModel):
    """An example of a dataset."""

    example_id: str
    dataset_id: str
    position: int = Field(description="Its place in the dataset (0, 1, …).")
    input: dict[str, Any]
    expectations: dict[str, Any] | None
    source: dict[str, Any] | None = Field(
        description="The thread and run it was made from (`thread_id`, `run_id`), or null."
    )
    created_at: str


def parse_jsonl(text: str) -> list[ExampleInput]:
    """Return the examples of a JSONL text: one `{"input", "expectations"?}` object a line.

    Blank lines are skipped; lines count from 1.

    Raises:
        InvalidFields: A line is not such an object (at `lines.<n>…`), or there are
            more than `MAX_EXAMPLES_PER_REQUEST`.
    """
    examples: list[ExampleInput] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(examples) == MAX_EXAMPLES_PER_REQUEST:
            raise InvalidFields.at(
                "lines", f"at most {MAX_EXAMPLES_PER_REQUEST} examples may be imported at once"
            )
        try:
            example = ExampleIn.model_validate_json(line)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            raise InvalidFields(
                [{**e, "loc": ("lines", number, *e["loc"])} for e in errors]
            ) from None
        examples.append(example.as_input())
    if not examples:
        raise InvalidFields.at("lines", "the text holds no example")
    return examples


def _dataset(dataset: DatasetRecord) -> dict[str, Any]:
    return dataset.to_json()


def _examples(examples: list[ExampleRecord]) -> list[dict[str, Any]]:
    return [example.to_json() for example in examples]


@router.post(
    "/datasets", response_model=DatasetOut, summary="Create a dataset", dependencies=[WRITE]
)
async def create_dataset(
    body: DatasetCreate, datasets: DatasetsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Create an empty dataset of the caller's."""
    dataset = await datasets.create(
        owner, name=body.name, description=body.description, metadata=body.metadata
    )
    return _dataset(dataset)


@router.post(
    "/datasets/search",
    response_model=list[DatasetOut],
    summary="Search datasets",
    dependencies=[READ],
)
async def search_datasets(
    body: DatasetSearch, datasets: DatasetsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the caller's datasets whose name contains `name`, newest first."""
    found = await datasets.search(
        owner, name=body.name, metadata=body.metadata, limit=body.limit, offset=body.offset
    )
    return [_dataset(d) for d in found]


@router.get(
    "/datasets/{dataset_id}",
    response_model=DatasetOut,
    summary="Get a dataset",
    dependencies=[READ],
)
async def get_dataset(
    dataset_id: DatasetId, datasets: DatasetsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Return one of the caller's datasets."""
    return _dataset(await datasets.get(owner, dataset_id))


@router.patch(
    "/datasets/{dataset_id}",
    response_model=DatasetOut,
    summary="Update a dataset",
    dependencies=[WRITE],
)
async def update_dataset(
    dataset_id: DatasetId, body: DatasetUpdate, datasets: DatasetsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Change a dataset's name, description or metadata."""
    given = body.model_fields_set
    changes: dict[str, Any] = {}
    if "name" in given and body.name is not None:
        changes["name"] = body.name
    if "description" in given:
        changes["description"] = body.description
    if "metadata" in given:
        changes["metadata"] = body.metadata or {}
    return _dataset(await datasets.update(owner, dataset_id, changes))


@router.delete(
    "/datasets/{dataset_id}", status_code=204, summary="Delete a dataset", dependencies=[WRITE]
)
async def delete_dataset(
    dataset_id: DatasetId, datasets: DatasetsDep, owner: PrincipalDep
) -> Response:
    """Delete a dataset with its examples (experiments keep their own copies)."""
    await datasets.delete(owner, dataset_id)
    return Response(status_code=204)


@router.post(
    "/datasets/{dataset_id}/examples",
    response_model=list[ExampleOut],
    summary="Add examples to a dataset",
    dependencies=[WRITE],
)
async def add_examples(
    dataset_id: DatasetId, body: ExamplesIn, datasets: DatasetsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Add examples at the end of the dataset, all or none."""
    added = await datasets.add_examples(owner, dataset_id, [e.as_input() for e in body.examples])
    return _examples(added)


@router.get(
    "/datasets/{dataset_id}/examples",
    response_model=list[ExampleOut],
    summary="List a dataset's examples",
    dependencies=[READ],
)
async def list_examples(
    dataset_id: DatasetId,
    datasets: DatasetsDep,
    owner: PrincipalDep,
    limit: Annotated[
        int, Field(ge=1, le=MAX_EXAMPLES_PER_DATASET), DIGITS_ONLY, Query(description="Page size.")
    ] = 100,
    offset: Annotated[
        int, Field(ge=0, le=MAX_OFFSET), DIGITS_ONLY, Query(description="Examples to skip.")
    ] = 0,
) -> list[dict[str, Any]]:
    """Return the dataset's examples in order."""
    return _examples(await datasets.examples(owner, dataset_id, limit=limit, offset=offset))


@router.delete(
    "/datasets/{dataset_id}/examples/{example_id}",
    status_code=204,
    summary="Delete an example",
    dependencies=[WRITE],
)
async def delete_example(
    dataset_id: DatasetId, example_id: ExampleId, datasets: DatasetsDep, owner: PrincipalDep
) -> Response:
    """Delete one example of a dataset."""
    await datasets.delete_example(owner, dataset_id, example_id)
    return Response(status_code=204)


@router.post(
    "/datasets/{dataset_id}/examples/import",
    response_model=list[ExampleOut],
    summary="Add the examples of a JSONL text",
    dependencies=[WRITE],
)
async def import_examples(
    dataset_id: DatasetId,
    datasets: DatasetsDep,
    owner: PrincipalDep,
    body: Annotated[
        str,
        Body(
            media_type="text/plain",
            description='One example a line: `{"input": {…}, "expectations": {…}}` (what '
            "`export.jsonl` writes), as text/plain or application/x-ndjson.",
        ),
    ],
) -> list[dict[str, Any]]:
    """Add every example of a JSONL text, all or none."""
    return _examples(await datasets.add_examples(owner, dataset_id, parse_jsonl(body)))


@router.post(
    "/datasets/{dataset_id}/examples/from-threads",
    response_model=list[ExampleOut],
    summary="Add the requests of threads as examples",
    dependencies=[WRITE],
)
async def examples_from_threads(
    dataset_id: DatasetId, body: ThreadsIn, datasets: DatasetsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Add one example per thread of the caller's: the brief of its first run."""
    return _examples(await datasets.add_from_threads(owner, dataset_id, body.thread_ids))


@router.get(
    "/datasets/{dataset_id}/export.jsonl",
    summary="Export a dataset's examples as JSONL",
    response_class=Response,
    responses={200: {"content": {JSONL: {"schema": {"type": "string"}}}}},
    dependencies=[READ],
)
async def export_examples(
    dataset_id: DatasetId, datasets: DatasetsDep, owner: PrincipalDep
) -> Response:
    """Answer the examples as JSONL, one `{"input", "expectations"}` object a line."""
    text = await datasets.export_jsonl(owner, dataset_id)
    return Response(
        text,
        media_type=JSONL,
        headers={"Content-Disposition": f'attachment; filename="dataset-{dataset_id[:8]}.jsonl"'},
    )
