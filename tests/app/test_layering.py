"""The layers import one way, over the project's real import graph.

    cli → app (HTTP) → engine (runs) → graphs (wiring) → nodes (agents)
        → studio (what agents share) → knowledge, providers, prompts → core

Every import counts: at module level, inside functions and under `TYPE_CHECKING`
(a type-only import still ties the layers together for a reader and a type checker).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
#: A package may import its own layer and the layers below it, never one above.
RANK = {
    "cli": 7,
    "app": 6,
    "engine": 5,
    "graphs": 4,
    "nodes": 3,
    "agentkit": 2,
    "knowledge": 1,
    "providers": 1,
    "prompts": 1,
    "core": 0,
}
PACKAGES = tuple(RANK)
DRIVERS = ("aiosqlite", "sqlite3", "psycopg", "psycopg_pool", "asyncpg", "redis")
HTTP = ("fastapi", "starlette", "sse_starlette", "uvicorn", "app")
#: The engine's backends; the rest of the engine ("neutral") names none of them.
BACKENDS = ("engine.postgres", "engine.sqlite")
HTTP_MODULES = [*sorted((APP / "routes").glob("*.py")), APP / "sse.py", APP / "deps.py"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imported(path: Path) -> set[str]:
    """Every module `path` imports (`from m import n` also names `m.n`; no relative imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import; the project imports absolutely"
            module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


@cache
def _graph() -> dict[str, frozenset[str]]:
    """The project's import graph: module → the project modules it imports."""
    modules = _modules()
    return {
        name: frozenset(n for n in _imported(path) if n in modules and n != name)
        for name, path in modules.items()
    }


def _edges() -> Iterator[tuple[str, str]]:
    for source, targets in _graph().items():
        for target in sorted(targets):
            yield source, target


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _top(name: str) -> str:
    return name.split(".")[0]


def test_every_import_points_down_the_layers() -> None:
    upward = [
        f"{source} → {target}"
        for source, target in _edges()
        if RANK[_top(target)] > RANK[_top(source)]
    ]
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_there_is_no_import_circle_in_the_project() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import circles:\n" + "\n".join(" ⇄ ".join(c) for c in cycles)


def test_nodes_never_import_another_node() -> None:
    crossing = [
        f"{source} → {target}"
        for source, target in _edges()
        if _top(source) == "nodes" and _top(target) == "nodes"
    ]
    assert not crossing, "nodes importing nodes:\n" + "\n".join(crossing)


def test_the_shared_layer_imports_no_node_and_no_wiring() -> None:
    upward = [
        f"{source} → {target}"
        for source, target in _edges()
        if _top(source) == "agentkit" and _top(target) in ("nodes", "graphs")
    ]
    assert not upward, "\n".join(upward)


def test_the_engine_imports_no_http() -> None:
    bad = sorted(
        f"{name} imports {sorted(found)}"
        for name, path in _modules().items()
        if _top(name) == "engine" and (found := {n for n in _imported(path) if _top(n) in HTTP})
    )
    assert not bad, "\n".join(bad)


def test_the_neutral_engine_imports_no_backend() -> None:
    bad = sorted(
        f"{name} imports {sorted(found)}"
        for name, path in _modules().items()
        if _top(name) == "engine"
        and not name.startswith(BACKENDS)
        and (found := {n for n in _imported(path) if n.startswith(BACKENDS) or _top(n) in DRIVERS})
    )
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", HTTP_MODULES, ids=lambda p: p.relative_to(APP).as_posix())
def test_http_modules_import_no_database_driver(module: Path) -> None:
    drivers = {n for n in _imported(module) if n.split(".")[0] in DRIVERS}
    assert not drivers, f"{module.name} imports {sorted(drivers)}; go through the engine instead"


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    module = tmp_path / "route.py"
    module.write_text(
        "import aiosqlite\n"
        "from psycopg.errors import UniqueViolation\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from nodes import planner\n"
        "def f():\n"
        "    import engine.postgres\n"
    )
    assert {"aiosqlite", "psycopg.errors", "nodes.planner", "engine.postgres"} <= _imported(module)


def test_the_cycle_check_finds_a_circle() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert _cycles(graph) == [["a", "b", "c"]]
