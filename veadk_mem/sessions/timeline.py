"""What a person wants to see of an event in a timeline: time, author, role, types, text, state delta.

Rows are read from the event's JSON as stored, without building a pydantic model per event:
an event whose every field ADK declares holds the type ADK's reader takes as is (`_plain`) is
read directly; anything else (a coercible value, a field given twice) goes through
`events.Event`, so a row says exactly what the model would. A stored event that is no ADK
event (`"author": 5`, `"content": "str"`, parts not a list: ADK's own reader refuses it) is one
row saying what is wrong with it, and the timeline goes on.

ADK's context compaction (EventsCompactionConfig) writes an event whose actions.compaction
holds the time range of the events it replaces and a summary Content; the timeline shows it
as a compaction: which events it summarises and the summary text, not as an empty event.

A terminal timeline of a long session shows its last TABLE_EVENTS events unless asked for
more (`window`).
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from veadk_mem import events as ev
from veadk_mem.timefmt import format_time

TABLE_EVENTS = 1000  # events a terminal timeline shows when no count is given


@dataclass(frozen=True)
class Window:
    """Which events of a session a timeline shows: the last `last` (None: all), `shown` of
    them, numbered from `first`; `capped` when cut to TABLE_EVENTS because none was asked for."""

    last: int | None
    shown: int
    first: int
    capped: bool


def window(event_count: int, last: int | None, *, cap: bool) -> Window:
    """The events a timeline of `event_count` events shows: the last `last`, or with `cap` (a
    terminal table: 100k rows help nobody and take minutes to draw) at most TABLE_EVENTS."""
    capped = cap and last is None and event_count > TABLE_EVENTS
    if capped:
        last = TABLE_EVENTS
    shown = event_count if last is None else min(last, event_count)
    return Window(last, shown, event_count - shown + 1, capped)


# --- reading an event's JSON as the model would -------------------------------------------

Check = Callable[[Any], bool]


def _check_of(annotation: Any) -> Check:
    """A test that a value already has this declared type (no coercion needed)."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        one = _check_of(inner[0]) if len(inner) == 1 else (lambda v: False)
        return lambda v: v is None or one(v)
    if annotation is str:
        return lambda v: type(v) is str
    if annotation is bool:
        return lambda v: type(v) is bool
    if annotation is float:
        return lambda v: type(v) is float or (type(v) is int and -(2**53) <= v <= 2**53)
    if get_origin(annotation) is dict:
        return lambda v: type(v) is dict and all(type(k) is str for k in v)
    if get_origin(annotation) is list:
        item = _check_of(get_args(annotation)[0])
        return lambda v: type(v) is list and all(item(x) for x in v)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = _fields_of(annotation)
        return lambda v: type(v) is dict and _plain(v, fields)
    return lambda v: False  # a type this reader does not know: the model reads it


def _fields_of(model: type[BaseModel]) -> dict[str, tuple[str, Check]]:
    """Every key the model reads (its camelCase alias and snake_case name) -> (field, check)."""
    table: dict[str, tuple[str, Check]] = {}
    for name, field in model.model_fields.items():
        spec = (name, _check_of(field.annotation))
        table[name] = spec
        table[field.alias or name] = spec
    return table


def _plain(data: dict[str, Any], fields: dict[str, tuple[str, Check]]) -> bool:
    """True when every declared field in `data` is given once, already of its type: the
    model would take the JSON as it is (unknown keys are kept as extras either way)."""
    seen: set[str] = set()
    for key, value in data.items():
        spec = fields.get(key)
        if spec is None:
            continue
        name, check = spec
        if name in seen or not check(value):
            return False
        seen.add(name)
    return True


_EVENT = _fields_of(ev.Event)
_CONTENT = _fields_of(ev.Content)


def _readable(data: Any, model: type[BaseModel], fields: dict[str, tuple[str, Check]]) -> dict[str, Any]:
    """`data` when the model would take it as it is, else the model's reading of it
    (snake_case keys); ValidationError when ADK's reader refuses it."""
    if type(data) is dict and _plain(data, fields):
        return data
    dumped: dict[str, Any] = _dump(model.model_validate(data))
    return dumped


def _dump(value: Any) -> Any:
    """A model's fields by snake_case name, at every depth, with the extras it kept that name
    no field (a key given twice, once by alias and once by name, is the alias's value)."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        taken = {*fields, *(f.alias for f in fields.values() if f.alias)}
        out = {k: v for k, v in (value.model_extra or {}).items() if k not in taken}
        out.update({name: _dump(getattr(value, name)) for name in fields})
        return out
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value


def _get(data: dict[str, Any], name: str, alias: str) -> Any:
    """A field given by its camelCase alias or its snake_case name (the alias first, as pydantic)."""
    return data[alias] if alias in data else data.get(name)


# --- rows ------------------------------------------------------------------------------------


def _part_text(part: dict[str, Any]) -> str:
    if part.get("text") is not None:
        return ("(thought) " if part.get("thought") else "") + part["text"]
    call = _get(part, "function_call", "functionCall")
    if call is not None:
        return f"{call.get('name')}({json.dumps(call.get('args') or {}, ensure_ascii=False)})"
    response = _get(part, "function_response", "functionResponse")
    if response is not None:
        return f"{response.get('name')} -> {json.dumps(response.get('response') or {}, ensure_ascii=False)}"
    inline = _get(part, "inline_data", "inlineData")
    if inline is not None:
        return f"[{_get(inline, 'mime_type', 'mimeType') or 'inline data'}]"
    file = _get(part, "file_data", "fileData")
    if file is not None:
        return f"[{_get(file, 'mime_type', 'mimeType') or 'file'} {_get(file, 'file_uri', 'fileUri') or ''}]".strip()
    code = _get(part, "executable_code", "executableCode")
    if code is not None:
        return str(code.get("code") or "")
    result = _get(part, "code_execution_result", "codeExecutionResult")
    if result is not None:
        return str(result.get("output") or "")
    return ""


def content_text(content: dict[str, Any] | None) -> str:
    """The text of a Content (its JSON) for people: every part, function calls and responses spelled out."""
    parts = (content.get("parts") if content else None) or []
    return " ".join(t for t in (_part_text(p) for p in parts) if t)


_PART_TOOLS = (
    ("function_call", "functionCall"),
    ("function_response", "functionResponse"),
    ("tool_call", "toolCall"),
    ("tool_response", "toolResponse"),
)
_PART_CODE = (("executable_code", "executableCode"), ("code_execution_result", "codeExecutionResult"))


def event_types(event: dict[str, Any]) -> list[str]:
    """`events.event_types` of an event's JSON: VeADK's memory event types, first seen first."""
    found: dict[str, None] = {}
    content = event.get("content")
    for part in (content.get("parts") if content else None) or []:
        if part.get("text"):
            found["thought" if part.get("thought") else "text"] = None
        for name, alias in _PART_TOOLS:
            if _get(part, name, alias) is not None:
                found[name] = None
        if _get(part, "inline_data", "inlineData") is not None or _get(part, "file_data", "fileData") is not None:
            found["media"] = None
        for name, alias in _PART_CODE:
            if _get(part, name, alias) is not None:
                found[name] = None
    transcribed = _get(event, "input_transcription", "inputTranscription") is not None
    if transcribed or _get(event, "output_transcription", "outputTranscription") is not None:
        found["transcription"] = None
    if _get(event, "error_code", "errorCode") or _get(event, "error_message", "errorMessage"):
        found["error"] = None
    return list(found)


def _actions(event: dict[str, Any]) -> dict[str, Any]:
    actions: dict[str, Any] = event.get("actions") or {}
    return actions


def _state_delta(event: dict[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = _get(_actions(event), "state_delta", "stateDelta") or {}
    return delta


def compaction_of(event: dict[str, Any]) -> tuple[float, float, dict[str, Any] | None] | None:
    """(start, end, summary Content JSON) of an ADK compaction event, or None for any other event;
    ValidationError when the summary is no ADK Content."""
    raw = _actions(event).get("compaction")
    if not isinstance(raw, dict):
        return None
    start = raw.get("startTimestamp", raw.get("start_timestamp"))
    end = raw.get("endTimestamp", raw.get("end_timestamp"))
    content = raw.get("compactedContent", raw.get("compacted_content"))
    summary = _readable(content, ev.Content, _CONTENT) if isinstance(content, dict) else None
    try:
        return float(start or 0.0), float(end or 0.0), summary
    except (TypeError, ValueError):
        return None


def event_types_or_empty(event: dict[str, Any]) -> list[str]:
    """VeADK's event types of the event, 'compaction' for ADK's compaction events, or
    ['state'] / ['empty'] when it carries nothing else."""
    found = event_types(event)
    if compaction_of(event) is not None:
        return ["compaction", *found]
    return found or (["state"] if _state_delta(event) else ["empty"])


def timeline_row(event: dict[str, Any]) -> dict[str, Any]:
    """One timeline row of an event's JSON (as `_readable` gives it): epoch time, author, role,
    types, text (unshortened), state delta."""
    content = event.get("content")
    texts = [content_text(content)] if content is not None else []
    code, message = _get(event, "error_code", "errorCode"), _get(event, "error_message", "errorMessage")
    if code or message:
        texts.append(f"error {code or ''}: {message or ''}".strip())
    return {
        "id": event.get("id", ""),
        "time": float(event.get("timestamp", 0.0)),
        "author": event.get("author", ""),
        "role": (content.get("role") if content is not None else None) or "",
        "types": event_types_or_empty(event),
        "text": " ".join(t for t in texts if t),
        "state_delta": dict(_state_delta(event)),
    }


class Timeline:
    """Numbers the rows of a session's timeline and names the events a compaction summarises."""

    def __init__(self, first: int = 1) -> None:
        self.next = first
        self._seen: list[tuple[int, float]] = []  # (number, timestamp) of the events shown so far

    def row_of(self, data: Any) -> dict[str, Any]:
        """The row of the next stored event (its JSON as read), or of what is wrong with it."""
        try:
            return self._row(_readable(data, ev.Event, _EVENT))
        except ValidationError as exc:
            row = odd_row(data, exc)
        row["n"] = self.next
        self.next += 1
        return row

    def _row(self, event: dict[str, Any]) -> dict[str, Any]:
        """The timeline row of the next event, numbered; a compaction says what it replaces."""
        row = timeline_row(event)
        row["n"] = self.next
        compaction = compaction_of(event)
        if compaction is not None:
            start, end, summary = compaction
            covered = [n for n, t in self._seen if start <= t <= end]
            span = f"events #{covered[0]}-#{covered[-1]}" if covered else "earlier events"
            row["types"] = ["compaction", *[t for t in row["types"] if t not in ("empty", "compaction")]]
            row["role"] = row["role"] or ((summary.get("role") if summary else None) or "")
            when = f"{format_time(start)} to {format_time(end)}"
            row["text"] = f"compaction of {span} ({when}): {content_text(summary)}".rstrip(": ")
            row["compaction"] = {"start_time": start, "end_time": end, "events": covered}
        self._seen.append((self.next, row["time"]))
        self.next += 1
        return row


def odd_row(data: Any, error: ValidationError) -> dict[str, Any]:
    """The row of an event ADK cannot read: its id, time and author where they are usable,
    types ["invalid"], and one line of what is wrong (the first field pydantic names)."""
    data = data if isinstance(data, dict) else {}
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "event"
    got = repr(first.get("input"))
    got = got if len(got) <= 40 else got[:39] + "…"
    more = f"; {error.error_count() - 1} more" if error.error_count() > 1 else ""
    stamp, author = data.get("timestamp"), data.get("author")
    return {
        "id": data.get("id") if isinstance(data.get("id"), str) else "",
        "time": stamp if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else None,
        "author": author if isinstance(author, str) else "",
        "role": "",
        "types": ["invalid"],
        "text": f"[not an ADK event: {where}: {first['msg']}, got {got}{more}]",
        "state_delta": {},
    }
