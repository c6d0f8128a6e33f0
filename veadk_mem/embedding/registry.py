"""Embedders by name, imported only when chosen, declared as entry points like backends.

Every embedder, vmem's own included, is a class in the `veadk_mem.embedders` entry-point
group (`[project.entry-points."veadk_mem.embedders"]`), built with
`cls.from_settings(settings, **options)`; a package adds one as vmem adds its own:

    [project.entry-points."veadk_mem.embedders"]
    myembed = "mypackage.embed:MyEmbedder"

Code (a test, an application) can add one at run time with `register_embedder`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veadk_mem.errors import BadInput
from veadk_mem.plugins import load, own_declarations, plugin_declarations

if TYPE_CHECKING:
    from veadk_mem.embedding.base import Embedder

ENTRY_POINT_GROUP = "veadk_mem.embedders"
BUILTIN: dict[str, str] = own_declarations(ENTRY_POINT_GROUP)
_plugins: dict[str, str] | None = None
_registered: dict[str, type[Embedder]] = {}


def register_embedder(name: str, cls: type[Embedder]) -> None:
    """Make an embedder class available under `name` (overrides a declared one of the same name)."""
    _registered[name] = cls


def _declared(name: str) -> str | None:
    global _plugins
    if name in BUILTIN:
        return BUILTIN[name]
    if _plugins is None:
        _plugins = plugin_declarations(ENTRY_POINT_GROUP)
    return _plugins.get(name)


def embedder_names() -> list[str]:
    """Every embedder name that can be configured (`auto` aside)."""
    global _plugins
    if _plugins is None:
        _plugins = plugin_declarations(ENTRY_POINT_GROUP)
    return sorted({*BUILTIN, *_plugins, *_registered})


def is_known(name: str) -> bool:
    """Whether `name` is an embedder this registry knows (or `auto`), for the config's validation."""
    return name == "auto" or name in _registered or _declared(name) is not None


def expected_names() -> str:
    """`'auto', 'ark', ... or 'openai'`: the names a configuration may give, for messages."""
    names = [repr(n) for n in ["auto", *embedder_names()]]
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def load_embedder(name: str) -> type[Embedder]:
    """The embedder class registered under `name`, imported now."""
    if name in _registered:
        return _registered[name]
    target = _declared(name)
    if target is None:
        raise BadInput(f"unknown embedding provider {name!r}: expected one of auto, {', '.join(embedder_names())}")
    found: type[Embedder] = load(target, f"{name} embedder")
    return found
