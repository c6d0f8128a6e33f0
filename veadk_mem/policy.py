"""VeADK's auto-save memory policy: which session events become long-term memories, and why.

`memory_strings` returns exactly the list of strings VeADK 1.1.x's
`LongTermMemory.add_session_to_memory` hands to a backend, and `evaluate` explains the
decision for every event. VeADK dumps `event.content` with google-genai's pydantic
models; vmem does not import google-genai, so it replays that dump from GENAI_SCHEMA
(field order, bytes, enums and floats of every genai type a Content can hold).
"""

from __future__ import annotations

import base64
import difflib
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from veadk_mem.errors import BadInput
from veadk_mem.events import Event, Session

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings

MemoryEventType = Literal[
    "text",
    "thought",
    "function_call",
    "function_response",
    "tool_call",
    "tool_response",
    "media",
    "executable_code",
    "code_execution_result",
    "transcription",
    "error",
]
MemoryRole = Literal["user", "assistant", "system"]
MemoryAutoSavePreset = Literal["default", "all", "custom"]

EVENT_TYPES: tuple[str, ...] = MemoryEventType.__args__  # type: ignore[attr-defined]
ROLES: tuple[str, ...] = MemoryRole.__args__  # type: ignore[attr-defined]
PRESETS: tuple[str, ...] = MemoryAutoSavePreset.__args__  # type: ignore[attr-defined]
_TEXTUAL = frozenset({"text", "thought"})

Warn = Callable[[str], None]


class MemoryAutoSavePolicy(BaseModel):
    """Controls which events automatic long-term-memory saving persists (VeADK's model)."""

    preset: MemoryAutoSavePreset = "default"
    include_roles: list[MemoryRole] | None = None
    exclude_roles: list[MemoryRole] = Field(default_factory=list)
    include_authors: list[str] | None = None
    exclude_authors: list[str] = Field(default_factory=list)
    include_event_types: list[MemoryEventType] | None = None
    exclude_event_types: list[MemoryEventType] = Field(default_factory=list)
    text_only: bool = True
    include_thought: bool = False
    include_empty_text: bool = False


POLICY_FIELDS: tuple[str, ...] = tuple(MemoryAutoSavePolicy.model_fields)


def preset_policy(preset: str, *, include_assistant: bool = False) -> MemoryAutoSavePolicy:
    """The base policy of a preset; any string other than `all` / `custom` means `default`, as in VeADK."""
    if preset == "all":
        return MemoryAutoSavePolicy(
            preset="all",
            include_roles=["user", "assistant", "system"],
            include_event_types=None,
            text_only=False,
            include_thought=True,
            include_empty_text=True,
        )
    if preset == "custom":
        return MemoryAutoSavePolicy(preset="custom")
    return MemoryAutoSavePolicy(
        preset="default",
        include_roles=["user", "assistant"] if include_assistant else ["user"],
        include_event_types=["text"],
        text_only=True,
        include_thought=False,
        include_empty_text=False,
    )


@dataclass(frozen=True)
class ResolvedPolicy:
    """The effective policy, which fields an override set, and where the policy came from."""

    policy: MemoryAutoSavePolicy
    overridden: frozenset[str] = frozenset()
    origin: str = "preset default"
    include_assistant: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Every field of the effective policy, as JSON data."""
        return self.policy.model_dump(mode="json")

    def source_of(self, name: str) -> str:
        """`override` for a field the policy set explicitly, else `preset <name>`; the preset itself: the origin."""
        if name == "preset":
            return self.origin
        return "override" if name in self.overridden else f"preset {self.policy.preset}"

    def describe(self) -> dict[str, Any]:
        """The `vmem policy show --json` object: origin, every field, and each field's source."""
        return {
            "origin": self.origin,
            "include_assistant": self.include_assistant,
            "policy": self.to_dict(),
            "sources": {name: self.source_of(name) for name in POLICY_FIELDS},
        }


# --- resolving a --policy / config / API value ---------------------------------------


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
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BadInput(f"{path}: invalid TOML: {exc}") from None
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


# --- google-genai's dump of Content, replayed -----------------------------------------

# Generated by bench/genai_schema.py from google-genai 2.34.0 (the version veadk-python
# 1.1.19 installs); tests/test_policy_schema.py checks it against the installed genai.
GENAI_SCHEMA: dict[str, list[tuple[str, str, Any]]] = {
    "Content": [("parts", "list", "Part"), ("role", "any", None)],
    "Transcription": [
        ("text", "any", None),
        ("finished", "any", None),
        ("language_code", "any", None),
        ("speaker_label", "any", None),
        ("words", "list", "WordInfo"),
        ("start_offset", "any", None),
        ("end_offset", "any", None),
    ],
    "Part": [
        ("media_resolution", "model", "PartMediaResolution"),
        ("code_execution_result", "model", "CodeExecutionResult"),
        ("executable_code", "model", "ExecutableCode"),
        ("file_data", "model", "FileData"),
        ("function_call", "model", "FunctionCall"),
        ("function_response", "model", "FunctionResponse"),
        ("inline_data", "model", "Blob"),
        ("text", "any", None),
        ("thought", "any", None),
        ("thought_signature", "bytes", None),
        ("video_metadata", "model", "VideoMetadata"),
        ("tool_call", "model", "ToolCall"),
        ("tool_response", "model", "ToolResponse"),
        ("part_metadata", "any", None),
        ("audio_transcription", "model", "Transcription"),
        ("media_processing", "enum", ("MEDIA_PROCESSING_UNSPECIFIED", "STATIC", "AGENTIC")),
        ("speech_metadata", "model", "SpeechMetadata"),
    ],
    "WordInfo": [("word", "any", None), ("start_offset", "any", None), ("end_offset", "any", None)],
    "PartMediaResolution": [
        (
            "level",
            "enum",
            (
                "MEDIA_RESOLUTION_UNSPECIFIED",
                "MEDIA_RESOLUTION_LOW",
                "MEDIA_RESOLUTION_MEDIUM",
                "MEDIA_RESOLUTION_HIGH",
                "MEDIA_RESOLUTION_ULTRA_HIGH",
            ),
        ),
        ("num_tokens", "any", None),
    ],
    "CodeExecutionResult": [
        ("outcome", "enum", ("OUTCOME_UNSPECIFIED", "OUTCOME_OK", "OUTCOME_FAILED", "OUTCOME_DEADLINE_EXCEEDED")),
        ("output", "any", None),
        ("id", "any", None),
    ],
    "ExecutableCode": [
        ("code", "any", None),
        ("language", "enum", ("LANGUAGE_UNSPECIFIED", "PYTHON")),
        ("id", "any", None),
    ],
    "FileData": [("display_name", "any", None), ("file_uri", "any", None), ("mime_type", "any", None)],
    "FunctionCall": [
        ("id", "any", None),
        ("args", "any", None),
        ("name", "any", None),
        ("partial_args", "list", "PartialArg"),
        ("will_continue", "any", None),
    ],
    "FunctionResponse": [
        ("will_continue", "any", None),
        ("scheduling", "enum", ("SCHEDULING_UNSPECIFIED", "SILENT", "WHEN_IDLE", "INTERRUPT")),
        ("parts", "list", "FunctionResponsePart"),
        ("id", "any", None),
        ("name", "any", None),
        ("response", "any", None),
    ],
    "Blob": [("data", "bytes", None), ("display_name", "any", None), ("mime_type", "any", None)],
    "VideoMetadata": [("end_offset", "any", None), ("fps", "float", None), ("start_offset", "any", None)],
    "ToolCall": [
        ("id", "any", None),
        (
            "tool_type",
            "enum",
            (
                "TOOL_TYPE_UNSPECIFIED",
                "GOOGLE_SEARCH_WEB",
                "GOOGLE_SEARCH_IMAGE",
                "URL_CONTEXT",
                "GOOGLE_MAPS",
                "FILE_SEARCH",
                "MEDIA_PROCESSING",
            ),
        ),
        ("args", "any", None),
    ],
    "ToolResponse": [
        ("id", "any", None),
        (
            "tool_type",
            "enum",
            (
                "TOOL_TYPE_UNSPECIFIED",
                "GOOGLE_SEARCH_WEB",
                "GOOGLE_SEARCH_IMAGE",
                "URL_CONTEXT",
                "GOOGLE_MAPS",
                "FILE_SEARCH",
                "MEDIA_PROCESSING",
            ),
        ),
        ("response", "any", None),
    ],
    "SpeechMetadata": [("speaker", "any", None), ("style", "any", None)],
    "PartialArg": [
        ("bool_value", "any", None),
        ("json_path", "any", None),
        ("null_value", "any", None),
        ("number_value", "float", None),
        ("string_value", "any", None),
        ("will_continue", "any", None),
    ],
    "FunctionResponsePart": [
        ("inline_data", "model", "FunctionResponseBlob"),
        ("file_data", "model", "FunctionResponseFileData"),
        ("media_processing", "enum", ("MEDIA_PROCESSING_UNSPECIFIED", "STATIC", "AGENTIC")),
    ],
    "FunctionResponseBlob": [("mime_type", "any", None), ("data", "bytes", None), ("display_name", "any", None)],
    "FunctionResponseFileData": [("file_uri", "any", None), ("mime_type", "any", None), ("display_name", "any", None)],
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


# Accepted input key (snake_case or camelCase) -> (position, field, kind, arg), per genai type.
_KEYS: dict[str, dict[str, tuple[int, str, str, Any]]] = {
    type_name: {
        key: (position, *entry) for position, entry in enumerate(fields) for key in (entry[0], _camel(entry[0]))
    }
    for type_name, fields in GENAI_SCHEMA.items()
}

_B64_STD = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_B64_URL = re.compile(r"[A-Za-z0-9\-_]*={0,2}")
_B64_INDEX = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_B64_INDEX.update({"-": 62, "_": 63})
_TO_URLSAFE = str.maketrans("+/", "-_")


def urlsafe_base64(text: str) -> str | None:
    """Base64 text re-spelt as pydantic writes bytes (URL-safe, padded), or None if pydantic would refuse it.

    pydantic's `val_json_bytes='base64'` takes one alphabet (standard or URL-safe, not
    mixed), no, partial or full padding, no whitespace, and no stray bits in the last
    symbol; checking that needs no decoding.
    """
    urlsafe = "-" in text or "_" in text
    if not (_B64_URL if urlsafe else _B64_STD).fullmatch(text):
        return None
    body = text.rstrip("=")
    rest = len(body) % 4
    if rest == 1 or len(text) - len(body) > (4 - rest) % 4:
        return None
    if rest and _B64_INDEX[body[-1]] & (15 if rest == 2 else 3):
        return None
    return (body if urlsafe else body.translate(_TO_URLSAFE)) + "=" * (-len(body) % 4)


def decode_base64(text: str) -> bytes | None:
    """The bytes pydantic reads from base64 text, or None if it would refuse it."""
    spelt = urlsafe_base64(text)
    return None if spelt is None else base64.urlsafe_b64decode(spelt)


def _bytes_value(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise BadInput(f"{path}: expected base64 text, got {type(value).__name__}")
    spelt = urlsafe_base64(value)
    if spelt is None:
        raise BadInput(f"{path}: invalid base64 (VeADK could not load this event)")
    return spelt


def _items(data: Any, path: str) -> Iterable[tuple[str, Any]]:
    """The (key, value) pairs of a vmem model (fields, then kept extras) or of a plain dict."""
    if isinstance(data, BaseModel):
        extra = data.__pydantic_extra__
        return [*data.__dict__.items(), *extra.items()] if extra else data.__dict__.items()
    if isinstance(data, dict):
        return data.items()
    raise BadInput(f"{path}: expected an object, got {type(data).__name__}")


def genai_dump(data: Any, type_name: str, path: str, unknown: list[str]) -> dict[str, Any]:
    """`data` as google-genai's `model_dump(exclude_none=True, mode="json")` writes that type.

    `data` is a vmem model or a dict with snake_case or camelCase keys; keys genai does
    not know are left out and their paths appended to `unknown` (genai would refuse them).
    """
    keys = _KEYS[type_name]
    found: list[tuple[int, str, Any]] = []
    for key, value in _items(data, path):
        if value is None:
            continue
        entry = keys.get(key)
        if entry is None:
            unknown.append(f"{path}.{key}")
            continue
        position, name, kind, arg = entry
        if kind == "model":
            value = genai_dump(value, arg, f"{path}.{name}", unknown)
        elif kind == "list":
            if not isinstance(value, list):
                raise BadInput(f"{path}.{name}: expected a list, got {type(value).__name__}")
            value = [genai_dump(item, arg, f"{path}.{name}[{i}]", unknown) for i, item in enumerate(value)]
        elif kind == "bytes":
            value = _bytes_value(value, f"{path}.{name}")
        elif kind == "enum":
            value = value.upper() if isinstance(value, str) and value.upper() in arg else value
        elif kind == "float":
            value = float(value) if isinstance(value, int) and not isinstance(value, bool) else value
        elif isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=False, exclude_none=True)
        found.append((position, name, value))
    found.sort(key=lambda item: item[0])
    return {name: value for _, name, value in found}


# --- the decision --------------------------------------------------------------------


@dataclass
class Decision:
    """What VeADK does with one event: saved (with its memory string) or dropped, and why."""

    event: Event
    saved: bool
    reason: str
    memory: str | None
    role: str
    types: list[str] = field(default_factory=list)
    session_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The event's entry in `vmem policy test --json`."""
        return {
            "id": self.event.id,
            "author": self.event.author,
            "role": self.role,
            "types": self.types,
            "decision": "saved" if self.saved else "dropped",
            "reason": self.reason,
            "memory": self.memory,
        }


def _names(values: Iterable[str] | None) -> str:
    return "[" + ", ".join(values or []) + "]"


def part_types(part: dict[str, Any]) -> list[str]:
    """The event types of one genai-dumped part, in VeADK's order."""
    found: list[str] = []
    if part.get("text"):
        found.append("thought" if part.get("thought") else "text")
    for name in ("function_call", "function_response", "tool_call", "tool_response"):
        if part.get(name) is not None:
            found.append(name)
    if part.get("inline_data") is not None or part.get("file_data") is not None:
        found.append("media")
    for name in ("executable_code", "code_execution_result"):
        if part.get(name) is not None:
            found.append(name)
    return found


def _role(event: Event, message: dict[str, Any]) -> str:
    role = message.get("role")
    if event.author == "user" or role == "user":
        return "user"
    if role == "system":
        return "system"
    return "assistant"


def _role_refusal(role: str, author: str, p: MemoryAutoSavePolicy) -> str | None:
    if p.include_roles is not None and role not in p.include_roles:
        return f"role {role} not in include_roles {_names(p.include_roles)}"
    if role in p.exclude_roles:
        return f"role {role} in exclude_roles {_names(p.exclude_roles)}"
    if p.include_authors is not None and author not in p.include_authors:
        return f"author {author!r} not in include_authors {_names(p.include_authors)}"
    if author in p.exclude_authors:
        return f"author {author!r} in exclude_authors {_names(p.exclude_authors)}"
    return None


def _type_refusal(types: list[str], p: MemoryAutoSavePolicy) -> str | None:
    if not types:
        return None if p.include_empty_text else "no content and include_empty_text is off"
    left = [t for t in types if t not in p.exclude_event_types]
    if not left:
        return f"event types {_names(types)} all in exclude_event_types {_names(p.exclude_event_types)}"
    if p.include_event_types is not None and not set(left) & set(p.include_event_types):
        return f"event types {_names(left)} not in include_event_types {_names(p.include_event_types)}"
    return None


def _part_refusal(types: list[str], p: MemoryAutoSavePolicy) -> str | None:
    """Why a part is left out of the memory, or None when it is kept."""
    if not types:
        return "empty part (no text, data or call)"
    if p.text_only and p.include_event_types is None and not set(types) <= _TEXTUAL:
        return f"{'+'.join(types)} part: text_only keeps only text and thought parts"
    excluded = [t for t in types if t in p.exclude_event_types]
    if excluded:
        return f"{'+'.join(types)} part: {', '.join(excluded)} in exclude_event_types"
    if p.include_event_types is not None and not set(types) & set(p.include_event_types):
        return f"{'+'.join(types)} part: not in include_event_types {_names(p.include_event_types)}"
    if types == ["thought"] and not p.include_thought:
        return "thought part: include_thought is off"
    return None


def _metadata_refusal(event_type: str, p: MemoryAutoSavePolicy) -> str | None:
    """Why a transcription or error of the event is not appended as a part, or None when it is."""
    if p.text_only and p.include_event_types is None and event_type not in _TEXTUAL:
        return f"{event_type}: text_only keeps only text and thought parts"
    if event_type in p.exclude_event_types:
        return f"{event_type}: in exclude_event_types"
    if p.include_event_types is not None and event_type not in p.include_event_types:
        return f"{event_type}: not in include_event_types {_names(p.include_event_types)}"
    return None


def _sanitize(part: dict[str, Any]) -> dict[str, Any]:
    blob = part.get("inline_data")
    if isinstance(blob, dict) and "data" in blob:
        blob = dict(blob)
        data = blob.pop("data")
        blob["data_size"] = len(str(data))
        blob["data_omitted"] = True
        part = {**part, "inline_data": blob}
    return part


def _metadata_parts(
    event: Event, p: MemoryAutoSavePolicy, unknown: list[str], dropped: list[str]
) -> list[dict[str, Any]]:
    """Transcriptions and the error as text parts, when the policy allows their type."""
    out: list[dict[str, Any]] = []
    names = [n for n in ("input_transcription", "output_transcription") if getattr(event, n) is not None]
    if names:
        why = _metadata_refusal("transcription", p)
        if why:
            dropped.append(why)
        for name in [] if why else names:
            dumped = genai_dump(getattr(event, name), "Transcription", name, unknown)
            out.append({"text": json.dumps(dumped, ensure_ascii=False), "part_metadata": {"event_type": name}})
    if event.error_code or event.error_message:
        why = _metadata_refusal("error", p)
        if why:
            dropped.append(why)
        else:
            text = ": ".join(str(v) for v in (event.error_code, event.error_message) if v)
            out.append({"text": text, "part_metadata": {"event_type": "error"}})
    return out


def _summary(reasons: list[str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return "; ".join(f"{r} (x{n})" if n > 1 else r for r, n in counts.items())


def decide(event: Event, policy: ResolvedPolicy, unknown: list[str] | None = None) -> Decision:
    """The decision VeADK's `_convert_event_to_memory_message` takes for one event, with a reason."""
    p = policy.policy
    unknown = [] if unknown is None else unknown
    where = f"event {event.id or '?'}: content"
    message = genai_dump(event.content, "Content", where, unknown) if event.content is not None else {"parts": []}
    role = _role(event, message)
    author = str(event.author or "")
    parts: list[dict[str, Any]] = message.get("parts") or []
    per_part = [part_types(part) for part in parts]
    types: list[str] = list(dict.fromkeys(t for found in per_part for t in found))
    if event.input_transcription is not None or event.output_transcription is not None:
        types.append("transcription")
    if event.error_code or event.error_message:
        types.append("error")

    refusal = _role_refusal(role, author, p) or _type_refusal(types, p)
    if refusal:
        return Decision(event, False, refusal, None, role, types)

    kept: list[dict[str, Any]] = []
    dropped: list[str] = []
    stripped = 0
    for part, found in zip(parts, per_part, strict=True):
        why = _part_refusal(found, p)
        if why:
            dropped.append(why)
            continue
        if "thought" in found and not p.include_thought:
            part = {k: v for k, v in part.items() if k not in ("thought", "thought_signature")}
            stripped += 1
        kept.append(_sanitize(part))
    kept.extend(_metadata_parts(event, p, unknown, dropped))
    if not kept and not p.include_empty_text:
        if dropped and all(d == "thought part: include_thought is off" for d in dropped):
            reason = "only thought parts and include_thought is off"
        else:
            reason = "no part left: " + (_summary(dropped) or "no content")
        return Decision(event, False, reason, None, role, types)

    message["role"] = role
    message["parts"] = kept
    if author and p.preset != "default":
        message["author"] = author
    notes = [f"role {role}, types {_names(types)} allowed"]
    if dropped:
        notes.append("dropped " + _summary(dropped))
    if stripped:
        notes.append("thought flag removed from a mixed part" + (f" (x{stripped})" if stripped > 1 else ""))
    if not kept:
        notes.append("kept empty: include_empty_text is on")
    return Decision(event, True, "; ".join(notes), json.dumps(message, ensure_ascii=False), role, types)


def evaluate(events: Iterable[Event], policy: ResolvedPolicy, *, warn: Warn | None = None) -> Iterator[Decision]:
    """One decision per event, in order; `warn` hears once about content fields google-genai does not know."""
    warned: set[str] = set()
    for event in events:
        unknown: list[str] = []
        decision = decide(event, policy, unknown)
        if unknown and warn is not None:
            for path in unknown:
                key = path.rsplit(".", 1)[-1]
                if key not in warned:
                    warned.add(key)
                    warn(f"{path}: not a google-genai field; left out of the memory (VeADK would refuse the event)")
        yield decision


def memory_strings(events: Iterable[Event], policy: ResolvedPolicy) -> list[str]:
    """Exactly the list of strings VeADK hands to the long-term-memory backend for these events."""
    return [d.memory for d in evaluate(events, policy) if d.memory is not None]


# --- a dry run over sessions, for `vmem policy test` and `vmem ltm save --dry-run` ---


@dataclass
class DryRun:
    """Every decision of a policy over one or more sessions, in event order."""

    policy: ResolvedPolicy
    decisions: list[Decision] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)

    @property
    def saved(self) -> list[str]:
        """The memory strings VeADK would save, session after session."""
        return [d.memory for d in self.decisions if d.memory is not None]

    def summary(self) -> str:
        """`n saved / m events, b bytes` for people."""
        size = sum(len(s.encode("utf-8")) for s in self.saved)
        sessions = f" in {len(self.session_ids)} sessions" if len(self.session_ids) > 1 else ""
        return f"{len(self.saved)} saved / {len(self.decisions)} events{sessions}, {size} bytes"

    def to_dict(self) -> dict[str, Any]:
        """The `vmem policy test --json` object of DESIGN.md."""
        return {
            "policy": self.policy.to_dict(),
            "saved": self.saved,
            "events": [d.to_dict() for d in self.decisions],
        }


def dry_run(sessions: Iterable[Session], policy: ResolvedPolicy, *, warn: Warn | None = None) -> DryRun:
    """Apply a policy to every event of every session, as VeADK's add_session_to_memory would."""
    result = DryRun(policy)
    for session in sessions:
        result.session_ids.append(session.id)
        for decision in evaluate(session.events, policy, warn=warn):
            decision.session_id = session.id
            result.decisions.append(decision)
    return result
