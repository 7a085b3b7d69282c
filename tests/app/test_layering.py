"""The layers import one way, over the project's real import graph.

    cli → app (HTTP, the product's composition) → graphs (wiring) → nodes (agents)
        → agentkit (what agents share) → knowledge, providers, prompts
        → engine (runs, generic) → core

The engine is below the product: it imports none of it (the product declares its
assistants with the engine's `AssistantSpec` and hands them to its opener). `app/`
and `cli/` reach it through its public surface (`engine/__init__.py`) only, and the
route modules reach the app's services through `app.deps`, never `app.state`. No
module of the engine is over `MAX_MODULE_LINES` lines, no class over `MAX_CLASS_LINES`.

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
    "graphs": 5,
    "nodes": 4,
    "agentkit": 3,
    "knowledge": 2,
    "providers": 2,
    "prompts": 2,
    "engine": 1,
    "core": 0,
}
PACKAGES = tuple(RANK)
DRIVERS = ("aiosqlite", "sqlite3", "psycopg", "psycopg_pool", "asyncpg", "redis")
HTTP = ("fastapi", "starlette", "sse_starlette", "uvicorn", "app")
#: The engine's backends; the rest of the engine ("neutral") names none of them.
BACKENDS = ("engine.postgres", "engine.sqlite")
HTTP_MODULES = [*sorted((APP / "routes").glob("*.py")), APP / "sse.py", APP / "deps.py"]
#: Where the engine is composed, the one place that names its backends: the opener,
#: and the public surface (which names what an adapter may catch or call of a backend).
COMPOSERS = ("engine", "engine.opener")
#: The product: what the engine never imports.
PRODUCT = ("agentkit", "providers", "knowledge", "graphs", "nodes", "prompts")
#: The engine's adapters, which import its public surface (`engine`) only.
ADAPTERS = ("app", "cli")
#: Modules that serve requests: they reach services through `app.deps`, not `app.state`.
ROUTE_MODULES = [
    *sorted((APP / "routes").glob("*.py")),
    APP / "mcp.py",
    APP / "a2a.py",
    APP / "sse.py",
]
#: The most lines a module of the engine has, and a class of it.
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


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
        and name not in COMPOSERS
        and (found := {n for n in _imported(path) if n.startswith(BACKENDS) or _top(n) in DRIVERS})
    )
    assert not bad, "\n".join(bad)


def test_the_engine_imports_no_product() -> None:
    bad = sorted(
        f"{name} imports {sorted(found)}"
        for name, path in _modules().items()
        if _top(name) == "engine" and (found := {n for n in _imported(path) if _top(n) in PRODUCT})
    )
    assert not bad, "the engine imports the product:\n" + "\n".join(bad)


def _engine_modules_imported(path: Path) -> set[str]:
    """The engine's modules below its package that `path` imports (`from engine.x …`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("engine."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine."):
            names.add(node.module or "")
    return names


def test_adapters_import_only_the_engines_public_surface() -> None:
    bad = sorted(
        f"{name} imports {sorted(found)}"
        for name, path in _modules().items()
        if _top(name) in ADAPTERS and (found := _engine_modules_imported(path))
    )
    assert not bad, "import these from `engine` (its public surface):\n" + "\n".join(bad)


def _app_state_uses(path: Path) -> list[int]:
    """Lines where a module reads or writes `app.state` (`request.app.state`, `app.state`)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "state":
            owner = node.value
            if (isinstance(owner, ast.Attribute) and owner.attr == "app") or (
                isinstance(owner, ast.Name) and owner.id == "app"
            ):
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("module", ROUTE_MODULES, ids=lambda p: p.relative_to(APP).as_posix())
def test_route_modules_touch_no_app_state(module: Path) -> None:
    used = _app_state_uses(module)
    assert not used, f"{module.name} touches app.state on lines {used}; use an app.deps alias"


def _sizes() -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The engine's modules and classes by lines, biggest first."""
    modules: list[tuple[int, str]] = []
    classes: list[tuple[int, str]] = []
    for name, path in _modules().items():
        if _top(name) != "engine":
            continue
        text = path.read_text(encoding="utf-8")
        modules.append((len(text.splitlines()), name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                end = node.end_lineno or node.lineno
                classes.append((end - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(modules, reverse=True), sorted(classes, reverse=True)


def test_no_engine_module_or_class_is_too_big() -> None:
    modules, classes = _sizes()
    shown = "\n".join(
        [
            "biggest modules:",
            *(f"  {n:5d} {m}" for n, m in modules[:5]),
            "biggest classes:",
            *(f"  {n:5d} {c}" for n, c in classes[:5]),
        ]
    )
    print(shown)  # the figures, also when it passes (pytest -s / -rP)
    too_big = [f"{m} ({n} lines)" for n, m in modules if n > MAX_MODULE_LINES]
    too_big += [f"{c} ({n} lines)" for n, c in classes if n > MAX_CLASS_LINES]
    assert not too_big, f"split these: {too_big}\n{shown}"


def test_the_public_surface_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    module = tmp_path / "adapter.py"
    module.write_text(
        "from engine import RunSpec, request_scope\n"
        "import engine.records\n"
        "def f():\n"
        "    from engine.postgres.backend import open_postgres_backend\n"
    )
    assert _engine_modules_imported(module) == {"engine.records", "engine.postgres.backend"}


def test_the_app_state_check_sees_reads_and_writes(tmp_path: Path) -> None:
    module = tmp_path / "route.py"
    module.write_text(
        "def handler(request, app):\n"
        "    a = request.app.state.runs\n"
        "    app.state.x = 1\n"
        "    b = request.state.call\n"  # the request's own state is not the app's
    )
    assert _app_state_uses(module) == [2, 3]


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
