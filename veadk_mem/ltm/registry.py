"""Backends by name, imported only when chosen, so `vmem --help` never pays for an SDK.

A backend class is constructed as `cls(index, settings=..., embedder_factory=...,
**backend_config)`. Every backend, the built-in ones included, is declared in the
`veadk_mem.backends` entry-point group (`[project.entry-points."veadk_mem.backends"]` in
pyproject.toml), so a package adds one exactly as vmem adds its own:

    [project.entry-points."veadk_mem.backends"]
    mystore = "mypackage.backend:MyStoreBackend"

Code (a test, an embedding application) can also add one at run time with
`register_backend`. The configuration accepts every name this registry knows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from veadk_mem.errors import BadInput
from veadk_mem.plugins import load, own_declarations, plugin_declarations

if TYPE_CHECKING:
    from veadk_mem.ltm.base import LongTermMemoryBackend

BackendFactory = Callable[..., "LongTermMemoryBackend"]

ENTRY_POINT_GROUP = "veadk_mem.backends"
DEPRECATED_ALIASES = {"viking_mem": "viking"}


def _plugin_declarations() -> dict[str, str]:
    """Other packages' entry points in the group (a scan of every installed package: done once, when needed)."""
    global _plugins
    if _plugins is None:
        _plugins = plugin_declarations(ENTRY_POINT_GROUP)
    return _plugins


# name -> "module:attr" of vmem's own backends, from its entry points (tests may patch entries);
# other packages' are read on first need, so a configured built-in costs no scan of every package.
BUILTIN: dict[str, str] = own_declarations(ENTRY_POINT_GROUP)
_plugins: dict[str, str] | None = None
_registered: dict[str, BackendFactory] = {}


def _declared(name: str) -> str | None:
    """The `module:attr` of a declared backend: vmem's own names cannot be taken over by a package."""
    return BUILTIN.get(name) or _plugin_declarations().get(name)


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make a backend available under `name` (overrides a declared one of the same name)."""
    _registered[name] = factory


def canonical_name(name: str, warn: Callable[[str], None] | None = None) -> str:
    """The backend name after deprecated aliases (viking_mem -> viking, with a warning)."""
    if name in DEPRECATED_ALIASES:
        new = DEPRECATED_ALIASES[name]
        if warn is not None:
            warn(f"long_term_memory.backend = '{name}' is deprecated; use '{new}'")
        return new
    return name


def backend_names() -> list[str]:
    """Every backend name that can be configured (deprecated aliases aside)."""
    return sorted({*BUILTIN, *_plugin_declarations(), *_registered})


def is_known(name: str) -> bool:
    """Whether `name` is a backend this registry knows, or a deprecated alias of one."""
    return name in DEPRECATED_ALIASES or name in _registered or _declared(name) is not None


def expected_names() -> str:
    """`'local', 'mem0', ... or 'viking'`: the names a configuration may give, for messages."""
    names = [repr(n) for n in backend_names()]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def load_backend(name: str) -> BackendFactory:
    """The backend class registered under `name`, imported now."""
    if name in _registered:
        return _registered[name]
    target = _declared(name)
    if target is None:
        raise BadInput(f"unknown long-term memory backend {name!r}: expected one of {', '.join(backend_names())}")
    factory: BackendFactory = load(target, f"{name} long-term memory backend")
    return factory
