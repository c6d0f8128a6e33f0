"""Third-party internals vmem reaches into, each fenced in one module, checked against what it was written for.

Issue 24 item 7: a release that renames or drops one of these fails here, naming the module, before it
fails a user's import or save. redis-py's pool internals have theirs in tests/test_ltm_redis.py.
"""

from __future__ import annotations

import pickle
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _installed(dist: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version(dist))[:3])


def _pin(name: str) -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [spec] = [d for d in pyproject["project"]["dependencies"] if re.match(rf"{name}(\[[^\]]*\])?>", d)]
    return spec


def test_sqlalchemy_internals_are_those_the_driver_plans_were_written_for() -> None:
    from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.types import TypeEngine

    from veadk_mem.sessions import driver

    low, high = driver.WRITTEN_FOR
    assert low <= _installed("sqlalchemy") < high, (
        f"SQLAlchemy {version('sqlalchemy')}: driver.py was written for {low} to {high}"
    )
    assert _pin("sqlalchemy") == f"sqlalchemy[asyncio]>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
    assert callable(TypeEngine._cached_bind_processor)
    table = Table("t", MetaData(), Column("id", String), Column("n", Integer))
    for stmt in (select(table).where(table.c.id == "x"), insert(table)):
        compiled = stmt.compile(dialect=sqlite.dialect())
        for name in driver.COMPILED_ATTRS:
            assert hasattr(compiled, name), f"SQLAlchemy's compiled statement has no {name}"
    assert driver.InsertPlan.make(table, sqlite.dialect()) is None  # pysqlite is not a driver the plans cover


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


def test_typer_internals_are_used_in_one_module_only() -> None:
    """Only cli/typer_internals.py names typer's vendored Click or its private attributes."""
    fenced = ROOT / "veadk_mem" / "cli" / "typer_internals.py"
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "veadk_mem").rglob("*.py"))
        if path != fenced
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "typer._click" in line or "_usage_display_name" in line
    ]
    assert not offenders, f"typer internals outside cli/typer_internals.py: {offenders}"
