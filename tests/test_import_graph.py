"""The package's import graph has no cycle.

Read from the source with ``ast``: every ``import`` counts as an edge, at module level or
inside a function (a lazy import still ties the two modules together: each needs the other to
be understood, and a refactor that moves the lazy one to the top fails at import time), except
those under ``if TYPE_CHECKING:``, which never run. A cycle is a strongly connected component
of more than one module (or a module importing itself); the test names each one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "veadk_mem"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# Cycles we knowingly keep, each as the sorted tuple of its modules, with a one-line reason.
# Any cycle not listed here fails the test; a listed one that is gone fails it too, so the
# list stays true.
ALLOWED: dict[tuple[str, ...], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: skips the body of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The package modules this statement loads (only modules inside the package)."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            mod = alias.name
            while mod and mod not in known:
                mod = mod.rpartition(".")[0]
            if mod:
                found.add(mod)
        return found
    if node.level:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base not in known:
        return found
    plain_names = False
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        if sub in known:
            found.add(sub)
        else:
            plain_names = True
    if plain_names:
        found.add(base)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module name -> the package modules it imports (lazily or not)."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _imports(tree):
            edges |= _targets(name, path, node, known)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components that are cycles (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[tuple[str, ...]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(tuple(sorted(component)))
    return sorted(found)


def _describe(component: tuple[str, ...], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"    {src} -> {dst}" for src in component for dst in sorted(graph[src] & members)]
    return f"{len(component)} modules: {', '.join(component)}\n" + "\n".join(edges)


def test_the_graph_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    """The reader counts a function-level import and ignores one under TYPE_CHECKING."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from a import b\n"
        "else:\n    import c\n"
        "def f():\n    from .d import e\n"
    )
    seen = [(n.module if isinstance(n, ast.ImportFrom) else n.names[0].name) for n in _imports(tree)]
    assert sorted(seen) == ["c", "d", "typing"]


def test_the_sessions_package_is_read() -> None:
    """The graph is not empty by accident: the store's known imports are there."""
    graph = import_graph()
    assert "veadk_mem.sessions.store" in graph
    assert "veadk_mem.sessions.batches" in graph["veadk_mem.sessions.store"]


def test_no_import_cycle() -> None:
    """No new cycle, and every allowed one still exists (so the allow-list stays honest)."""
    graph = import_graph()
    found = cycles(graph)
    new = [c for c in found if c not in ALLOWED]
    gone = [c for c in ALLOWED if c not in found]
    message = "\n".join(
        [f"import cycle, {_describe(c, graph)}" for c in new]
        + [f"allowed cycle no longer exists, drop it from ALLOWED: {c}" for c in gone]
    )
    assert not new and not gone, message
