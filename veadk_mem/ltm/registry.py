"""Backends by name, imported only when chosen, so `vmem --help` never pays for an SDK.

A backend class is constructed as `cls(index, settings=..., embedder_factory=...,
**backend_config)`. Built-in backends are registered here as import paths; another
package (or a test) can add its own with `register_backend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, NotSupported

if TYPE_CHECKING:
    from veadk_mem.ltm.base import LongTermMemoryBackend

BackendFactory = Callable[..., "LongTermMemoryBackend"]

BUILTIN: dict[str, str] = {
    "local": "veadk_mem.ltm.backends.local:LocalBackend",
    "redis": "veadk_mem.ltm.backends.redis:RedisBackend",
    "opensearch": "veadk_mem.ltm.backends.opensearch:OpensearchBackend",
    "viking": "veadk_mem.ltm.backends.viking:VikingBackend",
    "mem0": "veadk_mem.ltm.backends.mem0:Mem0Backend",
    "openviking": "veadk_mem.ltm.backends.openviking:OpenvikingBackend",
    "tos_context": "veadk_mem.ltm.backends.tos_context:TosContextBackend",
}
DEPRECATED_ALIASES = {"viking_mem": "viking"}
VECTOR_BACKENDS = ("local", "redis", "opensearch")

_registered: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make a backend available under `name` (overrides a built-in of the same name)."""
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
    """Every backend name that can be configured."""
    return sorted({*BUILTIN, *_registered})


def load_backend(name: str) -> BackendFactory:
    """The backend class registered under `name`, imported now."""
    if name in _registered:
        return _registered[name]
    if name not in BUILTIN:
        raise BadInput(f"unknown long-term memory backend {name!r}: expected one of {', '.join(backend_names())}")
    module_name, _, attr = BUILTIN[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise NotSupported(
                f"the {name} long-term memory backend is not available in this version of vmem"
            ) from None
        raise
    factory: Any = getattr(module, attr)
    return factory
