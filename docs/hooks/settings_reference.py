"""MkDocs hook: generate the configuration reference from `core.settings.Settings`.

A page holding the marker `<!-- settings-reference -->` (docs/configuration.md) gets, in
its place, one table per group of settings: every field's environment variable, type
and bounds, default and description, read from the model itself at build time, so the
reference cannot drift from the code. Groups are the `# --- title ---` comments of
`core/settings.py`.
"""

from __future__ import annotations

import ast
import html
import inspect
import io
import json
import re
import sys
import tokenize
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import SecretStr
from pydantic.fields import FieldInfo

MARKER = "<!-- settings-reference -->"
#: A group comment of core/settings.py: `# --- LLM ------`.
_GROUP = re.compile(r"#\s*---\s*(?P<title>.*?)\s*-{3,}\s*$")
_CODE_SPAN = re.compile(r"(`[^`]*`)")


def on_config(config: Any) -> Any:
    """Import Atelier from the tree that holds mkdocs.yml, not from an installed copy."""
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker with the generated reference."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, settings_reference())


def settings_reference() -> str:
    """Return the Markdown tables of every setting, grouped as core/settings.py groups them."""
    from core.settings import Settings

    groups: dict[str, list[str]] = {}
    titles = _group_titles(Settings)
    for name, field in Settings.model_fields.items():
        groups.setdefault(titles.get(name, "General"), []).append(_row(name, field))
    parts = []
    for title, rows in groups.items():
        parts.append(
            f"## {title}\n\n| Variable | Type | Default | What it does |\n|---|---|---|---|\n"
            + "\n".join(rows)
        )
    # A block of its own, so the stylesheet keeps the variables' names on one line.
    return '<div class="settings-reference" markdown>\n\n' + "\n\n".join(parts) + "\n\n</div>\n"


def _group_titles(model: type) -> dict[str, str]:
    """Map each field of `model` to the title of the group comment above it."""
    source = Path(inspect.getsourcefile(model) or "").read_text(encoding="utf-8")
    comments = [
        (token.start[0], _title(match.group("title")))
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT and (match := _GROUP.match(token.string))
    ]
    (cls,) = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name == model.__name__
    ]
    titles: dict[str, str] = {}
    for statement in cls.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            above = [title for line, title in comments if line < statement.lineno]
            if above:
                titles[statement.target.id] = above[-1]
    return titles


def _title(comment: str) -> str:
    """Return a heading from a group comment: its words without the module references."""
    words = re.sub(r"\s*\(.*\)\s*$", "", comment).strip()
    return words[:1].upper() + words[1:]


def _row(name: str, field: FieldInfo) -> str:
    """Return one table row: variable, type and bounds, default, description."""
    kind = _type(field.annotation)
    bounds = _bounds(field)
    cells = [
        f"`{name.upper()}`",
        f"{kind}, {bounds}" if bounds else kind,
        _default(field),
        _text(field.description or ""),
    ]
    return "| " + " | ".join(cells) + " |"


def _type(annotation: Any) -> str:
    """Return a reader's name for a setting's type."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        kinds = [_type(arg) for arg in get_args(annotation) if arg is not type(None)]
        return " or ".join(kinds)
    if origin is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in get_args(annotation))
    if origin is list:
        (item,) = get_args(annotation)
        return f"list of {_type(item)}s"
    if origin is dict:
        return "JSON object"
    names = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        Path: "path",
        SecretStr: "secret string",
    }
    return names.get(annotation, "JSON object")


def _bounds(field: FieldInfo) -> str:
    """Return the field's numeric and length bounds, and its pattern, in words."""
    rules: dict[str, Any] = {}
    for rule in field.metadata:
        for key in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            if getattr(rule, key, None) is not None:
                rules[key] = getattr(rule, key)
    found: list[str] = []
    low = ("", rules["ge"]) if "ge" in rules else ("> ", rules["gt"]) if "gt" in rules else None
    high = ("", rules["le"]) if "le" in rules else ("< ", rules["lt"]) if "lt" in rules else None
    if low and high and not low[0] and not high[0]:
        found.append(f"{_number(low[1])}–{_number(high[1])}")
    else:
        if low:
            found.append(f"{low[0] or '≥ '}{_number(low[1])}")
        if high:
            found.append(f"{high[0] or '≤ '}{_number(high[1])}")
    if "min_length" in rules or "max_length" in rules:
        found.append(f"{rules.get('min_length', 0)}–{rules.get('max_length', '…')} characters")
    if "pattern" in rules:
        found.append(f"matching `{rules['pattern']}`")
    return ", ".join(found)


def _number(value: Any) -> str:
    """Return a bound as written: 600, 0.05, 1048576."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default(field: FieldInfo) -> str:
    """Return the default as an operator would write it in `.env`, or "unset"."""
    factory = field.default_factory
    value = factory() if factory is not None else field.default  # type: ignore[call-arg]
    if value is None or value == [] or value == {}:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, Path) and not value.is_absolute():
        return f"`./{value}`"
    if isinstance(value, dict | list):
        return f"`{json.dumps(value, ensure_ascii=False)}`"
    return f"`{value}`"


def _text(description: str) -> str:
    """Return a description safe in a table cell: escaped outside its code spans."""
    parts = _CODE_SPAN.split(" ".join(description.split()))
    return "".join(
        part if part.startswith("`") else html.escape(part, quote=False).replace("|", "\\|")
        for part in parts
    )
