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


# --- layers --------------------------------------------------------------------------------------
# From the top: the CLI, the jobs that span both stores, the stores and the policy, the models
# they share, the foundations. A module imports its own layer or a lower one, never a higher one;
# and inside the store layer, sessions and long-term memory never import each other (what needs
# both is a cross-store job). A module is placed by the longest prefix listed.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("veadk_mem.cli", "veadk_mem.__main__")),
    ("cross-store jobs", ("veadk_mem.ops",)),
    ("stores", ("veadk_mem.sessions", "veadk_mem.ltm", "veadk_mem.policy")),
    ("models", ("veadk_mem.events", "veadk_mem.embedding", "veadk_mem.adkjson", "veadk_mem.adk_schema")),
    (
        "foundations",
        (
            "veadk_mem.config",
            "veadk_mem.jsonio",
            "veadk_mem.errors",
            "veadk_mem.files",
            "veadk_mem.failure",
            "veadk_mem.masking",
            "veadk_mem.check_outcome",
            "veadk_mem.timefmt",
            "veadk_mem.plugins",
            # the backend registry is a table of entry-point names the config validates against;
            # it imports no backend (each is loaded by name when a command asks for it)
            "veadk_mem.ltm.registry",
            # the embedder registry likewise, for the provider name
            "veadk_mem.embedding.registry",
            "veadk_mem",
        ),
    ),
]
# Store packages that must not import each other (cross-store work lives in the jobs layer).
SEPARATE = ("veadk_mem.sessions", "veadk_mem.ltm")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> tuple[int, str]:
    """(depth, prefix) of the longest listed prefix that holds the module; depth 0 is the top."""
    best: tuple[int, str] | None = None
    for depth, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and (best is None or len(prefix) > len(best[1])):
                best = (depth, prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import that goes up a layer, or across the two stores."""
    found = []
    for src in sorted(graph):
        src_depth, src_prefix = layer_of(src)
        for dst in sorted(graph[src]):
            dst_depth, dst_prefix = layer_of(dst)
            if dst_depth < src_depth:
                found.append(f"{src} ({LAYERS[src_depth][0]}) imports {dst} ({LAYERS[dst_depth][0]})")
            elif src_depth == dst_depth and src_prefix != dst_prefix:
                pair = {p for p in SEPARATE if _within(src, p) or _within(dst, p)}
                if len(pair) == 2:
                    found.append(f"{src} imports {dst}: the two stores meet only in a cross-store job")
    return found


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_imports_go_down_the_layers() -> None:
    """cli above cross-store jobs above sessions/ltm/policy above events/embedding above foundations."""
    violations = layer_violations(import_graph())
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_a_layer_violation_is_seen() -> None:
    graph = {
        "veadk_mem.errors": {"veadk_mem.cli.app"},
        "veadk_mem.cli.app": set(),
        "veadk_mem.sessions.store": {"veadk_mem.ltm.facade"},
        "veadk_mem.ltm.facade": set(),
        "veadk_mem.ops.doctor": {"veadk_mem.ltm.facade", "veadk_mem.sessions.store"},
    }
    assert layer_violations(graph) == [
        "veadk_mem.errors (foundations) imports veadk_mem.cli.app (cli)",
        "veadk_mem.sessions.store imports veadk_mem.ltm.facade: the two stores meet only in a cross-store job",
    ]


# --- function-level imports ------------------------------------------------------------------------
# A vmem module imported inside a function is allowed only when importing it at the top would load
# a heavy dependency on a path that does not need it (`vmem --help`, completion, a command of the
# other store). The heavy dependencies, each with why it is deferred; a lazy import of a module
# that loads none of them (errors, files, timespec, ...) belongs at the top of the file.
HEAVY: dict[str, str] = {
    "pydantic": "validation models: about 0.3 s to import, not needed by --help or completion",
    "pydantic_core": "comes with pydantic",
    "sqlalchemy": "the session databases: about 0.5 s, only the session commands need it",
    "numpy": "vectors: only the long-term commands that embed or score",
    "httpx": "HTTP clients of the hosted backends and embedders",
    "tenacity": "the retry policy of store calls",
    "google": "google-adk / google-genai types, for the policy and the events",
    "openai": "the OpenAI-compatible embedder",
    "redis": "the Redis backend",
    "opensearchpy": "the OpenSearch backend",
    "tokenizers": "the offline embedding model",
    "safetensors": "the offline embedding model",
}


# Light modules imported late on purpose, each (importer, imported) with why.
DEFERRED: dict[tuple[str, str], str] = {
    ("veadk_mem.cli.names", "veadk_mem.ltm.backends.local"): (
        "the CLI imports names.py at startup to attach completers; the local backend (and the ltm base "
        "under it) loads only when --index is completed, for its store's default path"
    ),
    ("veadk_mem.sessions.store", "veadk_mem.sessions.validate"): (
        "the store's parts load on first use: `session stats` pays for none of the import machinery "
        "(test_sessions_store.test_importing_the_store_leaves_its_parts_unimported)"
    ),
    ("veadk_mem.sessions.checks", "veadk_mem.config"): (
        "cli/session.py imports the import machinery at startup; config pulls in pydantic, which startup must not"
    ),
    ("veadk_mem.cli.app", "veadk_mem.cli.completion"): (
        "startup: a run loads only the top-level command it invokes (cli/app.py build_app); the completion "
        "command prints the whole tree's script, so it is loaded with all the rest"
    ),
    ("veadk_mem.cli.erasure", "veadk_mem.ops.erasure"): (
        "startup: only an erasure (`session delete --with-memories`, `forget --session`) needs it; `session "
        "list` and `get` import cli/erasure.py for the option types of `session delete`"
    ),
    ("veadk_mem.cli.erasure", "veadk_mem.ops.memory_show"): "startup: only `ltm show` needs it",
    ("veadk_mem.cli.session", "veadk_mem.ops.erasure"): "startup: only `session delete --with-memories` needs it",
    ("veadk_mem.cli.session", "veadk_mem.sessions.importer"): (
        "startup: only `session import` needs the import machinery (its file checks, the long-line reader)"
    ),
    ("veadk_mem.cli.session", "veadk_mem.sessions.delete_flow"): "startup: only `session delete` needs it",
    ("veadk_mem.cli.retention", "veadk_mem.ops.erasure"): "startup: only `session prune --with-memories` needs it",
}


def _third_party_roots(tree: ast.AST) -> set[str]:
    """Root packages a module imports at module level (not in a function, not TYPE_CHECKING)."""
    roots: set[str] = set()
    for node in _module_level_imports(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif not node.level and node.module:
            roots.add(node.module.split(".")[0])
    roots.discard(PACKAGE)
    return roots


def _module_level_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def heavy_loads() -> dict[str, set[str]]:
    """Module -> the HEAVY packages importing it loads, through its module-level imports."""
    modules = _modules()
    known = set(modules)
    direct: dict[str, set[str]] = {}
    eager: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        direct[name] = _third_party_roots(tree) & set(HEAVY)
        edges: set[str] = set()
        for node in _module_level_imports(tree):
            edges |= _targets(name, path, node, known)
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        parts = name.split(".")
        edges |= {".".join(parts[:i]) for i in range(1, len(parts))} & known
        eager[name] = edges - {name}
    loads: dict[str, set[str]] = {}

    def visit(name: str, seen: set[str]) -> set[str]:
        if name in loads:
            return loads[name]
        found = set(direct[name])
        for dep in eager[name]:
            if dep not in seen:
                found |= visit(dep, seen | {dep})
        loads[name] = found
        return found

    for name in modules:
        visit(name, {name})
    return loads


def lazy_light_imports() -> list[str]:
    """Each function-level import of a vmem module that loads no heavy dependency."""
    modules = _modules()
    known = set(modules)
    loads = heavy_loads()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    for target in sorted(_targets(name, path, node, known)):
                        if not loads[target] and target != name and (name, target) not in DEFERRED:
                            found.append(f"{name}.{fn.name} (line {node.lineno}) imports {target} lazily")
    return sorted(set(found))


def test_heavy_loads_follow_module_level_imports() -> None:
    loads = heavy_loads()
    assert "sqlalchemy" in loads["veadk_mem.sessions.store"]
    assert not loads["veadk_mem.errors"]


def test_function_level_imports_only_defer_heavy_dependencies() -> None:
    """A lazy import earns its place by deferring a package of HEAVY (or is listed in DEFERRED);
    the others go to the top."""
    found = lazy_light_imports()
    assert not found, "lazy imports that defer nothing heavy (import them at the top):\n" + "\n".join(found)
