"""`atelier notes`: import and export the knowledge vault as JSON Lines.

The notes commands read and write JSON Lines, one `KnowledgeNote` per line, the
format `export` writes; `import` checks every line first and imports all of them
or none.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from cli.common import settings_or_exit
from knowledge.notes import KnowledgeNote

app = typer.Typer(help="Import and export the knowledge vault as JSON Lines.", no_args_is_help=True)


def parse_notes_jsonl(lines: Sequence[str]) -> tuple[list[tuple[int, KnowledgeNote]], list[str]]:
    """Validate JSONL lines as notes; return (line number, note) pairs and the errors.

    Blank lines are skipped. An id that appears twice in the file is an error on
    its second line.
    """
    notes: list[tuple[int, KnowledgeNote]] = []
    errors: list[str] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON ({exc.msg})")
            continue
        if not isinstance(data, dict):
            errors.append(f"line {number}: expected a JSON object")
            continue
        try:
            note = KnowledgeNote.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'note'}: {e['msg']}" for e in exc.errors()
            )
            errors.append(f"line {number}: {problems}")
            continue
        if note.id in first_line:
            errors.append(f"line {number}: id {note.id!r} repeats line {first_line[note.id]}")
            continue
        first_line[note.id] = number
        notes.append((number, note))
    return notes, errors


async def import_notes(database: str, lines: Sequence[str]) -> tuple[int, list[str]]:
    """Import JSONL notes into the vault, all or none; return (imported, errors)."""
    from knowledge.repository import DuplicateNoteError, SqliteNoteRepository

    numbered, errors = parse_notes_jsonl(lines)
    async with SqliteNoteRepository(database) as repo:
        for number, note in numbered:
            if await repo.get(note.id) is not None:
                errors.append(f"line {number}: id {note.id!r} is already in the vault")
        if errors:
            return 0, sorted(errors, key=_line_number)
        try:
            await repo.add_many(note for _, note in numbered)
        except DuplicateNoteError as exc:  # another writer took an id meanwhile
            return 0, [str(exc)]
    return len(numbered), []


def _line_number(error: str) -> int:
    head = error.split(":", 1)[0].removeprefix("line ")
    return int(head) if head.isdigit() else 0


async def export_notes(database: str) -> list[str]:
    """Return every note of the vault (archived ones too) as JSONL lines, oldest first."""
    from knowledge.repository import MAX_PAGE, SqliteNoteRepository

    lines: list[str] = []
    async with SqliteNoteRepository(database) as repo:
        offset = 0
        while page := await repo.list(limit=MAX_PAGE, offset=offset):
            lines += [note.export_json() for note in page]
            offset += len(page)
    return lines


@app.command("import")
def notes_import(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="JSONL file.")
    ],
) -> None:
    """Import notes from a JSONL file: every line is checked first; all or nothing."""

    settings = settings_or_exit()
    err = Console(stderr=True)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        err.print(f"[red]{escape(str(file))} is not UTF-8 text[/red]")
        raise typer.Exit(1) from None
    imported, errors = asyncio.run(import_notes(str(settings.database_path), lines))
    if errors:
        err.print(f"[red]Nothing imported: {len(errors)} bad line(s) in {escape(str(file))}[/red]")
        for error in errors[:50]:
            err.print(f"  {escape(error)}")
        if len(errors) > 50:
            err.print(f"  … and {len(errors) - 50} more")
        raise typer.Exit(1)
    Console().print(f"Imported {imported} note(s) into {escape(str(settings.database_path))}")


@app.command("export")
def notes_export(
    file: Annotated[
        Path | None, typer.Argument(dir_okay=False, help="Output file (default: stdout).")
    ] = None,
) -> None:
    """Export every note of the vault as JSONL, to a file or stdout."""

    settings = settings_or_exit()
    lines = asyncio.run(export_notes(str(settings.database_path)))
    text = "".join(f"{line}\n" for line in lines)
    if file is None:
        sys.stdout.write(text)
        return
    # Written beside the target and renamed, so a failed export leaves no half file.
    partial = file.with_name(f".{file.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(file)
    Console(stderr=True).print(f"Exported {len(lines)} note(s) to {escape(str(file))}")
