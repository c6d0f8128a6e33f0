"""Entry-point groups read the same way for every kind of plugin (backends, embedders).

vmem's own plugins are declared in its own distribution's entry points, read without a scan
of every installed package; a source checkout adds what its pyproject.toml declares beyond
the installed metadata. Other packages' are read on first need.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

from veadk_mem.errors import NotSupported

OWN = "veadk_mem."
DISTRIBUTION = "veadk-mem"


def source_tree_declarations(group: str) -> dict[str, str]:
    """vmem's own entry points in the group from pyproject.toml, in a source checkout (else none)."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        import tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        declared = project["entry-points"][group]
    except (OSError, ValueError, KeyError):
        return {}
    return {str(k): str(v) for k, v in declared.items()}


@functools.cache
def _own_points() -> tuple[tuple[str, str, str], ...]:
    """(group, name, value) of every entry point vmem's distribution declares, read once."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        points = distribution(DISTRIBUTION).entry_points
    except PackageNotFoundError:
        return ()
    return tuple((p.group, p.name, p.value) for p in points)


def own_declarations(group: str) -> dict[str, str]:
    """name -> `module:attr` of vmem's own entry points in the group."""
    own = {name: value for g, name, value in _own_points() if g == group and value.startswith(OWN)}
    return {**source_tree_declarations(group), **own}


def plugin_declarations(group: str) -> dict[str, str]:
    """Other packages' entry points in the group (a scan of every installed package)."""
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    for point in entry_points(group=group):
        if not point.value.startswith(OWN):
            found.setdefault(point.name, point.value)
    return found


def load(target: str, what: str) -> Any:
    """The object a `module:attr` declaration names, imported now; NotSupported when its module is gone."""

    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise NotSupported(f"the {what} is not available in this version of vmem") from None
        raise
    return getattr(module, attr)
