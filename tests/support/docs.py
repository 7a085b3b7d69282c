"""Read the documentation site's pages and the code blocks that tests run as written.

The pages are the Markdown files under `docs/` (the MkDocs site, mkdocs.yml). A test
that keeps a page's snippet true finds it here by page, optionally by the heading it
sits under, and by its fence's language:

    script = code_block("feedback", "bash")
    verify = code_block("webhooks", "python", heading="Headers and signature")
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_FENCE = re.compile(r"^(`{3,})(\S*)")


def page(name: str) -> str:
    """Return the Markdown of `docs/<name>.md`."""
    path = DOCS / f"{name}.md"
    assert path.is_file(), f"docs/{name}.md does not exist"
    return path.read_text(encoding="utf-8")


def section(name: str, heading: str) -> str:
    """Return what is under `heading` in a page, up to the next heading of its level or above.

    Args:
        name: The page, e.g. "api" for docs/api.md.
        heading: The heading's text as written, without its `#`s.
    """
    lines = page(name).splitlines(keepends=True)
    start = level = None
    for number, line in _outside_code(lines):
        match = _HEADING.match(line)
        if match is None:
            continue
        depth = len(match.group(1))
        if start is None and match.group(2) == heading:
            start, level = number + 1, depth
        elif start is not None and level is not None and depth <= level:
            return "".join(lines[start:number])
    assert start is not None, f"docs/{name}.md has no heading {heading!r}"
    return "".join(lines[start:])


def code_blocks(name: str, language: str, *, heading: str | None = None) -> list[str]:
    """Return the code blocks fenced as `language` in a page (or one of its sections)."""
    text = section(name, heading) if heading is not None else page(name)
    blocks: list[str] = []
    fence = kind = ""
    body: list[str] = []
    for line in text.splitlines(keepends=True):
        if not fence:
            match = _FENCE.match(line)
            if match:
                fence, kind, body = match.group(1), match.group(2), []
        elif line.rstrip() == fence:
            if kind == language:
                blocks.append("".join(body))
            fence = ""
        else:
            body.append(line)
    return blocks


def code_block(
    name: str, language: str, *, heading: str | None = None, containing: str | None = None
) -> str:
    """Return the one `language` block of a page (or section) that holds `containing`."""
    blocks = [
        block
        for block in code_blocks(name, language, heading=heading)
        if containing is None or containing in block
    ]
    where = f"docs/{name}.md" + (f" under {heading!r}" if heading else "")
    assert len(blocks) == 1, f"{where} has {len(blocks)} {language} blocks, expected one"
    return blocks[0]


def _outside_code(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Yield the numbered lines that are not inside (or fencing) a code block."""
    fence = ""
    for number, line in enumerate(lines):
        match = _FENCE.match(line)
        if not fence and match:
            fence = match.group(1)
        elif fence and line.rstrip() == fence:
            fence = ""
        elif not fence:
            yield number, line
