"""Resolving a policy from `--policy` (preset name, file, JSON), the configuration or an API value."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from veadk_mem.errors import BadInput
from veadk_mem.policy.model import (
    EVENT_TYPES,
    POLICY_FIELDS,
    PRESETS,
    ROLES,
    MemoryAutoSavePolicy,
    ResolvedPolicy,
    Warn,
    preset_policy,
)

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings


def _suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _field_error(exc: ValidationError, where: str) -> BadInput:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"])
    msg = msg[0].lower() + msg[1:] if msg else msg
    got = f", got {err['input']!r}" if "input" in err and not isinstance(err["input"], dict) else ""
    hint = ""
    if isinstance(err.get("input"), str):
        field_name = str(err["loc"][0])
        choices = {"preset": PRESETS, "include_roles": ROLES, "exclude_roles": ROLES}.get(
            field_name, EVENT_TYPES if "event_types" in field_name else ()
        )
        hint = _suggest(err["input"], choices)
    return BadInput(f"{where}: {loc}: {msg}{got}{hint}")


def policy_from_mapping(
    data: dict[str, Any], *, where: str, include_assistant: bool = False, warn: Warn | None = None
) -> ResolvedPolicy:
    """A dict or MemoryAutoSavePolicy-shaped mapping over its preset's base, as VeADK merges it."""
    for key in data:
        if key not in POLICY_FIELDS and warn is not None:
            warn(f"{where}: unknown policy field '{key}' is ignored{_suggest(str(key), POLICY_FIELDS)}")
    try:
        raw = MemoryAutoSavePolicy.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc, where) from None
    return _merge(raw, where=where, include_assistant=include_assistant)


def _merge(raw: MemoryAutoSavePolicy, *, where: str, include_assistant: bool) -> ResolvedPolicy:
    base = preset_policy(raw.preset, include_assistant=include_assistant)
    overrides = {name: getattr(raw, name) for name in raw.model_fields_set if name != "preset"}
    if overrides:
        base = base.model_copy(update=overrides)
    return ResolvedPolicy(base, frozenset(overrides), where, include_assistant)


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.lower().endswith((".json", ".toml"))


def _read_policy_file(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read policy file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text ({exc.reason})") from None
    if path.suffix.lower() == ".toml":
        from veadk_mem.config import loads_toml

        return loads_toml(text, str(path))
    return _decode_json(text, str(path))


def _decode_json(text: str, where: str) -> Any:
    from veadk_mem.jsonio import loads

    return loads(text, where)


def resolve_policy(
    spec: str | dict[str, Any] | MemoryAutoSavePolicy | None,
    *,
    backend: str | None = None,
    include_assistant: bool = False,
    named: dict[str, Any] | None = None,
    warn: Warn | None = None,
) -> ResolvedPolicy:
    """The effective policy for a preset name, a [policy.NAME], a JSON/TOML file, inline JSON, a dict or a model.

    `backend="openviking"` or `include_assistant=True` adds the assistant role to the
    `default` preset, as VeADK does for OpenViking.
    """
    assistant = include_assistant or backend == "openviking"
    return _resolve(spec, assistant, named or {}, warn, "--policy", set())


def configured_policy(
    spec: str | None,
    settings: VmemSettings,
    *,
    backend: str | None = None,
    include_assistant: bool = False,
    warn: Warn | None = None,
) -> ResolvedPolicy:
    """`--policy` if given, else the config's `[policy] default`, resolved with its named policies."""
    return resolve_policy(
        spec if spec is not None else settings.policy.default,
        backend=backend or settings.long_term_memory.backend,
        include_assistant=include_assistant,
        named=settings.policy.named(),
        warn=warn,
    )


def _resolve(
    spec: Any, assistant: bool, named: dict[str, Any], warn: Warn | None, where: str, seen: set[str]
) -> ResolvedPolicy:
    if spec is None:
        return ResolvedPolicy(preset_policy("default", include_assistant=assistant), include_assistant=assistant)
    if isinstance(spec, MemoryAutoSavePolicy):
        return _merge(spec, where="policy object", include_assistant=assistant)
    if isinstance(spec, dict):
        return policy_from_mapping(spec, where=where, include_assistant=assistant, warn=warn)
    if not isinstance(spec, str):
        raise BadInput(f"{where}: expected a preset name or a policy object, got {type(spec).__name__}")
    if spec in PRESETS:
        return ResolvedPolicy(
            preset_policy(spec, include_assistant=assistant), origin=f"preset {spec}", include_assistant=assistant
        )
    text = spec.strip()
    if text in named:
        if text in seen:
            raise BadInput(f"config: [policy.{text}] refers to itself")
        return _resolve(named[text], assistant, named, warn, f"config [policy.{text}]", seen | {text})
    if text.startswith("{"):
        return _resolve(_decode_json(text, f"{where} (inline JSON)"), assistant, named, warn, "inline JSON", seen)
    path = Path(text).expanduser()
    if text and path.is_file():
        return _resolve(_read_policy_file(path), assistant, named, warn, str(path), seen)
    if _looks_like_path(text):
        raise BadInput(f"{text}: policy file not found")
    if warn is not None:
        choices = [*PRESETS, *named]
        warn(f"unknown policy preset '{spec}': VeADK treats it as 'default'{_suggest(text, choices)}")
    return ResolvedPolicy(
        preset_policy("default", include_assistant=assistant),
        origin=f"unknown preset {spec!r} (as default)",
        include_assistant=assistant,
    )
