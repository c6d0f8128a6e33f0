"""Third-party internals vmem reaches into, each fenced in one module, checked against what it was written for.

FENCES is the table: a private name (or pattern), the one module allowed to use it, and why. The
scan reads every module of the package, the tests and the benchmarks with `ast`: imports of a
`_`-prefixed module or name from another package, `_`-prefixed attributes (dotted, or given to
getattr/setattr/hasattr/monkeypatch.setattr as a string) that vmem's own code does not define,
and subclasses of pickle's Unpickler or calls of pickle.load(s). A use outside its module, or a
private name no fence names, fails; so does a fence its module no longer uses. This file may name
every fenced internal: it checks that they still exist.

Issue 24 item 7: a release that renames or drops one of these fails here, naming the module, before
it fails a user's import or save. redis-py's pool internals (public names, reached past the
client) have theirs in tests/test_ltm_redis.py.
"""

from __future__ import annotations

import ast
import pickle
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("veadk_mem", "tests", "bench")


@dataclass(frozen=True)
class Fence:
    """`name`: a dotted path up to its private part (`typer._click`), or `*._attr` for an attribute
    of any object; `module`: the one file allowed to use it, relative to the repository (None: none)."""

    name: str
    module: str | None
    why: str


FENCES = (
    Fence(
        "typer._click",
        "veadk_mem/cli/typer_internals.py",
        "Typer vendors Click 8 there: the CLI's usage errors and current context; the rest of cli/ imports them "
        "from here",
    ),
    Fence(
        "*._usage_display_name",
        "veadk_mem/cli/typer_internals.py",
        "what Typer's help draws an argument's usage from (set_usage_name); no public way to name it",
    ),
    Fence(
        "*._custom_shell_complete",
        "veadk_mem/cli/typer_internals.py",
        "the shell_complete callback Click's completion asks for a parameter's values (set_completer): the names "
        "completed from the session database (cli/names.py); Typer's own autocompletion= takes it at declaration",
    ),
    Fence(
        "typer._completion_classes",
        "veadk_mem/cli/typer_internals.py",
        "registers Typer's bash/zsh/fish completion classes (enable_completion): the app is built with "
        "add_completion=False, and the scripts in completions/ ask `_VMEM_COMPLETE=complete_bash` for names",
    ),
    Fence(
        "pickle._Pickler",
        "veadk_mem/sessions/safepickle.py",
        "the pure-Python pickler's save_global writes ADK's EventActions classes without importing ADK",
    ),
    Fence(
        "pickle.Unpickler",
        "veadk_mem/sessions/safepickle.py",
        "one restricted unpickler: ADK's v0 actions and vmem's own process frames are decoded only there",
    ),
    Fence(
        "pickle.load*",
        None,
        "a pickle is a program: vmem loads one only through safepickle's restricted unpicklers",
    ),
    Fence(
        "*._hypothesis_internal_use_settings",
        "tests/conftest.py",
        "caps a test's own @settings(max_examples) under the fast profile; hypothesis offers no public hook "
        "and refuses a second @settings",
    ),
    Fence(
        "google.adk.sessions._restricted_pickle",
        "tests/test_sessions_safety.py",
        "ADK's own restricted loader: the reference the actions pickles vmem writes must load under",
    ),
    Fence(
        "google.adk.sessions.database_session_service._get_or_create_state",
        "tests/test_sessions_deletes.py",
        "holds ADK's own create_session between its read of the state rows and its insert, so the "
        "purge-state race runs deterministically (ADK has no hook there)",
    ),
    Fence(
        "*._filter_and_convert_events",
        "bench/policy_reference.py",
        "VeADK's own event filter: the reference the policy benchmark measures beside",
    ),
)

# Underscored but public, documented API: not fenced.
PUBLIC = {
    "*._make": "NamedTuple's documented constructor",
    "*._asdict": "NamedTuple's documented method",
    "*._replace": "NamedTuple's documented method",
    "*._fields": "NamedTuple's documented attribute",
    "*._mapping": "SQLAlchemy's documented Row._mapping view",
    "os._exit": "documented: leave a child process without running its parent's cleanup",
    "_typeshed": "type stubs, imported only under TYPE_CHECKING",
}


def _installed(dist: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version(dist))[:3])


def _pin(name: str) -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [spec] = [d for d in pyproject["project"]["dependencies"] if re.match(rf"{name}(\[[^\]]*\])?>", d)]
    return spec


def test_the_pure_python_pickler_has_what_the_actions_pickler_calls() -> None:
    import io

    from veadk_mem.sessions import safepickle

    pickler = pickle._Pickler(io.BytesIO())  # type: ignore[attr-defined]
    for name in safepickle.PICKLER_CALLS:  # `write` is set per instance, the others are methods
        assert callable(getattr(pickler, name, None)), f"pickle._Pickler().{name} is gone"


def test_typer_internals_are_those_the_cli_was_written_for() -> None:
    import inspect

    import typer
    from typer.core import TyperArgument

    from veadk_mem.cli import typer_internals

    spec = _pin("typer")
    low, high = re.findall(r"[\d.]+", spec)
    as_tuple = lambda v: tuple(int(n) for n in v.split("."))  # noqa: E731
    assert as_tuple(low) <= _installed("typer") < as_tuple(high), (
        f"typer {typer.__version__}: cli/ was written for {spec}"
    )
    assert issubclass(typer_internals.NoArgsIsHelpError, typer_internals.UsageError)
    assert callable(typer_internals.current_context)
    # set_usage_name writes this per argument to draw usage lines; typer's help must still read it
    assert "_usage_display_name" in inspect.getsource(TyperArgument)
    # set_completer writes this per parameter; typer's shell_complete must still call it
    import typer.core

    assert "_custom_shell_complete" in inspect.getsource(typer.core)
    from typer._completion_classes import completion_init

    assert callable(completion_init)


def _private(name: str) -> bool:
    """`_name`, or pydantic's own dunders (`__pydantic_extra__`: `model_extra` is the public face)."""
    return name.startswith("__pydantic_") or (
        name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
    )


def _sources() -> dict[str, ast.Module]:
    files = sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py"))
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in files}


def _own_modules(sources: dict[str, ast.Module]) -> set[str]:
    """Top-level names that are vmem's own code: the package and the tests' and benchmarks' helpers."""
    return {"veadk_mem"} | {Path(rel).stem for rel in sources if not rel.startswith("veadk_mem/")}


def _defines(store: ast.Attribute) -> bool:
    """`self._x = ...` in a class of vmem's, or a `_vmem_` marker it sets on another object."""
    on_self = isinstance(store.value, ast.Name) and store.value.id in ("self", "cls")
    return on_self or store.attr.startswith("_vmem_")


def _own_names(sources: dict[str, ast.Module]) -> set[str]:
    """Every name vmem's own code defines: functions, classes, variables, arguments, attributes of
    self/cls, the markers it sets on other objects (`_vmem_*`) and the SQL labels it gives columns
    (`.label("_tie")`)."""
    names: set[str] = set()
    for tree in sources.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _defines(node):
                names.add(node.attr)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "label":
                names.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return names


def _up_to_private(dotted: str) -> str:
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[: i + 1])
    return dotted


def _bindings(tree: ast.Module, own: set[str]) -> tuple[dict[str, str], set[str]]:
    """Names bound to other packages' modules or objects (name -> dotted path), and names bound to own modules."""
    theirs: dict[str, str] = {}
    ours: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                target = alias.name if alias.asname else alias.name.split(".")[0]
                (ours.add(bound) if target.split(".")[0] in own else theirs.__setitem__(bound, target))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                bound = alias.asname or alias.name
                if node.level or module.split(".")[0] in own:
                    ours.add(bound)
                else:
                    theirs[bound] = f"{module}.{alias.name}"
    return theirs, ours


def _root(node: ast.expr) -> tuple[ast.expr, list[str]]:
    chain: list[str] = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    return node, chain[::-1]


def _attribute_use(
    target: ast.expr, attr: str, theirs: dict[str, str], ours: set[str], own_names: set[str]
) -> str | None:
    """The fenced name for `target.attr`, or None when it is vmem's own or public."""
    base, chain = _root(target)
    dotted = [*chain, attr]
    if isinstance(base, ast.Name) and base.id in theirs:
        return _up_to_private(".".join([theirs[base.id], *dotted]))
    if isinstance(base, ast.Name) and base.id in ours:
        return None  # vmem's own module
    if _private(attr) and attr not in own_names:
        return f"*.{attr}"
    return None


SETTERS = {"getattr", "setattr", "hasattr", "delattr"}


def _uses(tree: ast.Module, own: set[str], own_names: set[str]) -> Iterator[tuple[int, str]]:
    """(line, name) of every use of another package's private name in one module."""
    theirs, ours = _bindings(tree, own)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            for dotted in names:
                if dotted.split(".")[0] not in own and any(_private(p) for p in dotted.split(".")):
                    yield node.lineno, _up_to_private(dotted)
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            found = _attribute_use(node.value, node.attr, theirs, ours, own_names)
            if found:
                yield node.lineno, found
        elif isinstance(node, ast.Call):
            func = node.func
            is_setter = isinstance(func, ast.Name) and func.id in SETTERS
            is_setter |= isinstance(func, ast.Attribute) and func.attr == "setattr"  # monkeypatch.setattr
            if is_setter and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                    found = _attribute_use(node.args[0], name.value, theirs, ours, own_names)
                    if found:
                        yield node.lineno, found
            if isinstance(func, ast.Attribute):
                base, chain = _root(func)
                if isinstance(base, ast.Name) and theirs.get(base.id) == "pickle" and chain in (["load"], ["loads"]):
                    yield node.lineno, f"pickle.{chain[0]}"
        elif isinstance(node, ast.ClassDef):
            for base_expr in node.bases:
                base, chain = _root(base_expr)
                if isinstance(base, ast.Name) and ".".join([theirs.get(base.id, ""), *chain]) in (
                    "pickle.Unpickler",
                    "pickle._Unpickler",
                ):
                    yield node.lineno, "pickle.Unpickler"


def _fence(name: str) -> Fence | None:
    return next((f for f in FENCES if fnmatchcase(name, f.name)), None)


def test_every_private_internal_is_used_only_in_its_fenced_module() -> None:
    """Each third-party private name is used in the one module FENCES allows, tests and benchmarks included."""
    sources = _sources()
    own, own_names = _own_modules(sources), _own_names(sources)
    this = str(Path(__file__).relative_to(ROOT))
    offenders: list[str] = []
    used: set[Fence] = set()
    for rel, tree in sources.items():
        for line, name in _uses(tree, own, own_names):
            if any(fnmatchcase(name, public) for public in PUBLIC):
                continue
            fence = _fence(name)
            if fence is None:
                offenders.append(f"{rel}:{line}: {name} is private and no fence names it")
            elif rel == fence.module:
                used.add(fence)
            elif rel != this:
                offenders.append(f"{rel}:{line}: {name} is fenced in {fence.module or 'no module'}: {fence.why}")
    assert not offenders, "private internals past their fences:\n" + "\n".join(offenders)
    stale = [f"{f.name} ({f.module})" for f in FENCES if f.module and f not in used]
    assert not stale, f"fences whose module no longer uses them (remove them): {stale}"


def test_the_scan_finds_each_kind_of_use() -> None:
    """The scanner sees what the table fences: a test for the test, so an empty scan cannot pass."""
    code = """
import pickle
import typer._click.core
from typer._click.exceptions import UsageError
from google.adk.sessions import _restricted_pickle
from veadk_mem.sessions import upgrade

class Mine(pickle.Unpickler):
    pass

def f(column, test, monkeypatch):
    column._cached_bind_processor(None)
    getattr(test, "_hypothesis_internal_use_settings", None)
    monkeypatch.setattr(upgrade, "_PAGE", 8)  # vmem's own module: not a third-party private
    pickle.loads(b"")
    row._make(())  # public
    model.__pydantic_extra__
    return pickle._Pickler
"""
    found = sorted(name for _, name in _uses(ast.parse(code), {"veadk_mem"}, set()))
    assert found == [
        "*.__pydantic_extra__",
        "*._cached_bind_processor",
        "*._hypothesis_internal_use_settings",
        "*._make",
        "google.adk.sessions._restricted_pickle",
        "pickle.Unpickler",
        "pickle._Pickler",
        "pickle.loads",
        "typer._click",
        "typer._click",
    ]
