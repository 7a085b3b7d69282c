"""`atelier datasets`: datasets of the embedded engine, imported and exported as JSON Lines.

    atelier datasets import briefs.jsonl [--name NAME | --dataset ID]
    atelier datasets export ID [out.jsonl]
    atelier datasets list

A line is one example, `{"input": {…}, "expectations": {…}}` (what `export` writes and
`POST /datasets/{id}/examples/import` takes); `import` checks every line first and adds
all of them or none. The datasets are the CLI's owner's (`cli.run.cli_owner`: the first
API key's when AUTH_API_KEYS is set, so the console opened with that key lists them).
See docs/evaluate.md.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from app.routes.datasets import parse_jsonl
from cli.common import settings_or_exit
from cli.run import cli_owner, open_embedded_engine
from engine import DataDirInUse, DatasetRecord, Engine, RunsError

app = typer.Typer(help="Import, export and list evaluation datasets.", no_args_is_help=True)
T = TypeVar("T")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print a one-line error on stderr; return the exit to raise."""
    Console(stderr=True).print(f"[red]{escape(message)}[/red]")
    return typer.Exit(code)


def run_or_exit(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; an engine's refusal or a busy DATA_DIR is a clear exit 1."""
    try:
        return asyncio.run(coroutine)
    except DataDirInUse as exc:
        raise fail(str(exc)) from None
    except RunsError as exc:
        raise fail(exc.message) from None


async def import_file(
    engine: Engine, owner: str, text: str, *, name: str, dataset_id: str | None
) -> tuple[DatasetRecord, int]:
    """Add the examples of a JSONL text to a dataset (a new one named `name`, or `dataset_id`).

    Returns:
        The dataset and how many examples were added.

    Raises:
        RunsError: A line is wrong (nothing is added, no dataset is created), or the
            dataset is unknown or full.
    """
    examples = parse_jsonl(text)
    if dataset_id is None:
        dataset = await engine.datasets.create(owner, name=name)
        try:
            added = await engine.datasets.add_examples(owner, dataset.dataset_id, examples)
        except RunsError:
            await engine.datasets.delete(owner, dataset.dataset_id)
            raise
    else:
        added = await engine.datasets.add_examples(owner, dataset_id, examples)
    return await engine.datasets.get(owner, added[0].dataset_id), len(added)


@app.command("import")
def import_command(
    path: Annotated[Path, typer.Argument(help="A JSONL file: one example a line.")],
    name: Annotated[str | None, typer.Option(help="The new dataset's name.")] = None,
    dataset: Annotated[
        str | None, typer.Option("--dataset", metavar="ID", help="Add to this dataset instead.")
    ] = None,
) -> None:
    """Import examples from a JSONL file into a new dataset (or `--dataset ID`)."""
    if not path.is_file():
        raise fail(f"{path}: no such file", code=2)
    text = path.read_text(encoding="utf-8")
    settings = settings_or_exit()

    async def main() -> tuple[DatasetRecord, int]:
        async with open_embedded_engine(settings) as engine:
            return await import_file(
                engine, cli_owner(settings), text, name=name or path.stem, dataset_id=dataset
            )

    record, added = run_or_exit(main())
    typer.echo(f"{record.dataset_id}\t{added} examples added ({record.example_count} in all)")


@app.command("export")
def export_command(
    dataset: Annotated[str, typer.Argument(metavar="ID", help="The dataset.")],
    path: Annotated[Path | None, typer.Argument(help="Where to write (default: stdout).")] = None,
) -> None:
    """Export a dataset's examples as JSONL."""
    settings = settings_or_exit()

    async def main() -> str:
        async with open_embedded_engine(settings) as engine:
            return await engine.datasets.export_jsonl(cli_owner(settings), dataset)

    text = run_or_exit(main())
    if path is None:
        sys.stdout.write(text)
    else:
        path.write_text(text, encoding="utf-8")


@app.command("list")
def list_command() -> None:
    """List the datasets, newest first: id, examples, name (tab-separated)."""
    settings = settings_or_exit()

    async def main() -> list[DatasetRecord]:
        async with open_embedded_engine(settings) as engine:
            return await engine.datasets.search(cli_owner(settings), limit=1000)

    for record in run_or_exit(main()):
        typer.echo(f"{record.dataset_id}\t{record.example_count}\t{record.name}")
