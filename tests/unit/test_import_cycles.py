"""No module of ``app/`` or ``workers/`` imports a module that imports it back.

Read from the source with ``ast`` (every import, in functions too), not by importing. A cycle
hides which module depends on which, and through module-level imports it makes the import
order matter. ``app/cli`` had one (the command modules reaching back into the parser's
module for its helpers; they share ``app.cli.common`` now) and ``runs watch`` another (its
view importing the client back for types; both use ``watch/state.py`` now).

A cycle closed by a deferred import (inside a function, or under ``if TYPE_CHECKING:``) is
allowed only where it is listed below, with its reason; through module-level imports, never.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parents[2]

# Cycles closed only by deferred imports, with the reason each is there.
DEFERRED_CYCLES = {
    # strawberry types that refer to each other (Agent.runs, Run.agent, ...): annotations
    # resolve through strawberry.lazy, resolvers import the other type when they run.
    frozenset(
        {
            "app.graphql.types.agents",
            "app.graphql.types.approvals",
            "app.graphql.types.memories",
            "app.graphql.types.runs",
            "app.graphql.types.schedules",
            "app.graphql.types.versions",
        }
    ),
    # the per-request context names the websocket token checks it carries.
    frozenset({"app.graphql.context", "app.graphql.ws_auth"}),
    # the run loop's I/O classes (being untangled into one state object and pure decisions).
    frozenset({"app.engine.loop", "app.engine.persist", "app.engine.turns"}),
}


def modules() -> dict[str, Path]:
    found = {}
    for base in ("app", "workers"):
        for path in (ROOT / base).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, bool]]:
    """(module imported, whether the import is deferred) for each import of one module."""
    tree = ast.parse(path.read_text())
    deferred: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            deferred.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            deferred.update(id(n) for n in ast.walk(node) if n is not node)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import mod` imports pkg.mod; `from mod import name`, mod.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, id(node) in deferred


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def graph(*, with_deferred: bool) -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for target, deferred in imports(name, path, known):
            if with_deferred or not deferred:
                edges[name].add(target)
    return edges


def test_no_cycle_through_module_level_imports() -> None:
    assert cycles(graph(with_deferred=False)) == []


def test_cycles_through_deferred_imports_are_only_the_listed_ones() -> None:
    unlisted = [sorted(c) for c in cycles(graph(with_deferred=True)) if c not in DEFERRED_CYCLES]
    assert unlisted == []


def test_the_checker_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [frozenset({"a", "b", "c"})]


def test_the_vendor_sdks_are_imported_only_when_a_model_is_asked() -> None:
    """Importing them costs seconds; the API and the CLI only validate model configs."""
    import subprocess
    import sys

    code = "import sys, app.engine.providers, app.main; print('openai' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["False", "False"]
