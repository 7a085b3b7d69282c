"""The HTTP layer talks to the run engine, never to a database driver."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
DRIVERS = ("aiosqlite", "sqlite3", "psycopg", "psycopg_pool", "asyncpg", "redis")
HTTP_MODULES = [*sorted((APP / "routes").glob("*.py")), APP / "sse.py", APP / "deps.py"]


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", HTTP_MODULES, ids=lambda p: p.relative_to(APP).as_posix())
def test_http_modules_import_no_database_driver(module: Path) -> None:
    drivers = {n for n in _imported(module) if n.split(".")[0] in DRIVERS}
    assert not drivers, f"{module.name} imports {sorted(drivers)}; go through app.runs instead"


def test_the_check_sees_a_driver_import(tmp_path: Path) -> None:
    module = tmp_path / "route.py"
    module.write_text("import aiosqlite\nfrom psycopg.errors import UniqueViolation\n")
    assert {"aiosqlite", "psycopg.errors"} <= _imported(module)
