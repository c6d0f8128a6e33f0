"""ADK-compatible Session / Event / Content / Part models and session JSON in and out.

The models read ADK's camelCase JSON (as `adk run --save_session` writes it) and
snake_case alike, keep fields they do not know, and write camelCase JSON that
google-adk's `Session.model_validate_json` accepts. Bytes stay as the base64 text
they arrived in, so a round trip is byte-exact.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer
from pydantic.alias_generators import to_camel

from veadk_mem.adkjson import printed_event
from veadk_mem.errors import BadInput
from veadk_mem.jsonio import dumps, loads, try_loads

STATE_RECORD_KINDS = ("app_state", "user_state")
# An export's line before each session: its sessions row's create time, which ADK's session JSON has
# no field for (ADK's Session refuses unknown keys), so that a restore keeps it.
TIMES_KIND = "session_times"
RECORD_KINDS = (*STATE_RECORD_KINDS, TIMES_KIND)  # the lines that are not sessions


class AdkModel(BaseModel):
    """Base of every ADK-shaped model: camelCase aliases, snake_case accepted, extras kept.

    Each builds its validator on first use, not at import: `session get`'s timeline reads only
    the models' fields (sessions/timeline.py), and a command that validates pays the same.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", serialize_by_alias=True, defer_build=True
    )

    @model_serializer(mode="wrap")
    def _camel_extras(self, handler: Any, info: Any) -> Any:
        """Write unknown top-level keys in camelCase too, leaving their values untouched."""
        data = handler(self)
        extra = self.model_extra
        if not extra or not info.by_alias or not isinstance(data, dict):
            return data
        renamed: dict[str, Any] = {}
        for key, value in data.items():
            renamed[to_camel(key) if key in extra and "_" in key else key] = value
        return renamed


class FunctionCall(AdkModel):
    id: str | None = None
    name: str | None = None
    args: dict[str, Any] | None = None


class FunctionResponse(AdkModel):
    id: str | None = None
    name: str | None = None
    response: dict[str, Any] | None = None


class Blob(AdkModel):
    """Inline bytes; `data` is kept as the base64 text ADK wrote."""

    mime_type: str | None = None
    data: str | None = None
    display_name: str | None = None


class FileData(AdkModel):
    mime_type: str | None = None
    file_uri: str | None = None
    display_name: str | None = None


class ExecutableCode(AdkModel):
    code: str | None = None
    language: str | None = None


class CodeExecutionResult(AdkModel):
    outcome: str | None = None
    output: str | None = None


class Transcription(AdkModel):
    text: str | None = None
    finished: bool | None = None


class Part(AdkModel):
    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    executable_code: ExecutableCode | None = None
    code_execution_result: CodeExecutionResult | None = None
    tool_call: dict[str, Any] | None = None
    tool_response: dict[str, Any] | None = None


class Content(AdkModel):
    role: str | None = None
    parts: list[Part] | None = None


class EventActions(AdkModel):
    state_delta: dict[str, Any] = Field(default_factory=dict)
    artifact_delta: dict[str, Any] = Field(default_factory=dict)


class Event(AdkModel):
    id: str = ""
    invocation_id: str = ""
    author: str = ""
    timestamp: float = 0.0
    content: Content | None = None
    actions: EventActions = Field(default_factory=EventActions)
    partial: bool | None = None
    turn_complete: bool | None = None
    error_code: str | None = None
    error_message: str | None = None
    interrupted: bool | None = None
    branch: str | None = None
    long_running_tool_ids: list[str] | None = None
    input_transcription: Transcription | None = None
    output_transcription: Transcription | None = None
    custom_metadata: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as ADK prints it: camelCase at every depth, ADK's defaults filled in."""
        return printed_event(self.model_dump(mode="json", by_alias=False, exclude_none=True))


class Session(AdkModel):
    id: str
    app_name: str
    user_id: str
    state: dict[str, Any] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    last_update_time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The session as ADK prints it (its events as `Event.to_dict` gives them)."""
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"events"})
        out: dict[str, Any] = {k: data.pop(k) for k in ("id", "appName", "userId", "state") if k in data}
        out["events"] = [event.to_dict() for event in self.events]
        out.update(data)
        return out

    def to_json(self) -> str:
        """The session as one line of ADK camelCase JSON, non-ASCII kept as is."""
        return dumps(self.to_dict(), compact=True)


def event_types(event: Event) -> list[str]:
    """The memory event types of an event, as VeADK infers them, in first-seen order.

    Text counts only when non-empty (an empty or thought-flagged empty text is no type);
    within a part the order is VeADK's: text/thought, tools, media, code.
    """
    found: dict[str, None] = {}
    parts = event.content.parts if event.content and event.content.parts else []
    for part in parts:
        if part.text:
            found["thought" if part.thought else "text"] = None
        for name in ("function_call", "function_response", "tool_call", "tool_response"):
            if getattr(part, name) is not None:
                found[name] = None
        if part.inline_data is not None or part.file_data is not None:
            found["media"] = None
        for name in ("executable_code", "code_execution_result"):
            if getattr(part, name) is not None:
                found[name] = None
    if event.input_transcription is not None or event.output_transcription is not None:
        found["transcription"] = None
    if event.error_code or event.error_message:
        found["error"] = None
    return list(found)


def json_path(loc: Iterable[int | str]) -> str:
    """A pydantic error location as a JSON path: ('events', 2, 'text') -> $.events[2].text."""
    out = "$"
    for item in loc:
        out += f"[{item}]" if isinstance(item, int) else f".{item}"
    return out


def parse_session(data: Any, where: str) -> Session:
    """Validate one decoded JSON document as a session; `where` names it in errors."""
    if not isinstance(data, dict):
        raise BadInput(f"{where}: $: expected a session object, got {type(data).__name__}")
    try:
        return Session.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"{where}: {json_path(err['loc'])}: {err['msg']}") from None


def _open_text(source: str | Path, name: str | None = None) -> tuple[TextIO, str, bool]:
    if str(source) == "-":
        return sys.stdin, name or "<stdin>", False
    path = Path(source)
    try:
        return path.open(encoding="utf-8"), name or str(path), True
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a session JSON file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror}") from None


def iter_documents(source: str | Path, name: str | None = None) -> Iterator[tuple[str, Any]]:
    """Yield (location, JSON value) for each document in a JSON object, list or JSONL file.

    JSONL is streamed line by line, so an export of any size reads in constant memory.
    `name` is what locations call the source (default: its path), e.g. stdin spooled to a file.
    """
    stream, name, close = _open_text(source, name)
    try:
        try:
            first = stream.readline()
            first_line = 1
            while first and not first.strip():
                first = stream.readline()
                first_line += 1
        except UnicodeDecodeError as exc:
            raise BadInput(f"{name}: not UTF-8 text ({exc.reason})") from None
        if not first:
            raise BadInput(f"{name}: empty input, expected session JSON")
        # one JSON object per line, or one document (an object or a list) over many lines
        single = try_loads(first) if first.lstrip().startswith("{") else None
        if isinstance(single, dict):
            yield f"{name}: line {first_line}", single
            yield from _iter_jsonl(stream, name, start=first_line + 1)
            return
        text = first + stream.read()
        value = loads(text, name)
        if isinstance(value, list):
            for index, item in enumerate(value):
                yield f"{name}: [{index}]", item
        else:
            yield name, value
    finally:
        if close:
            stream.close()


def _iter_jsonl(stream: TextIO, name: str, start: int) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(stream, start):
        if line.strip():
            yield f"{name}: line {lineno}", loads(line, name, line=lineno)


def read_sessions(source: str | Path) -> Iterator[Session]:
    """Every session in a session JSON source (file path or '-'), skipping state records."""
    for where, data in iter_documents(source):
        if isinstance(data, dict) and data.get("kind") in RECORD_KINDS:
            continue
        yield parse_session(data, where)


def session_files(path: Path) -> list[Path]:
    """The *.json and *.jsonl files under a directory, sorted, for batch commands."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file())
