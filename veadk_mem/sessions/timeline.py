"""What a person wants to see of an event in a timeline: time, author, role, types, text, state delta."""

from __future__ import annotations

import json
import re
from typing import Any

from veadk_mem import events as ev


def _part_text(part: ev.Part) -> str:
    if part.text is not None:
        return ("(thought) " if part.thought else "") + part.text
    if part.function_call is not None:
        args = json.dumps(part.function_call.args or {}, ensure_ascii=False)
        return f"{part.function_call.name}({args})"
    if part.function_response is not None:
        body = json.dumps(part.function_response.response or {}, ensure_ascii=False)
        return f"{part.function_response.name} -> {body}"
    if part.inline_data is not None:
        return f"[{part.inline_data.mime_type or 'inline data'}]"
    if part.file_data is not None:
        return f"[{part.file_data.mime_type or 'file'} {part.file_data.file_uri or ''}]".strip()
    if part.executable_code is not None:
        return part.executable_code.code or ""
    if part.code_execution_result is not None:
        return part.code_execution_result.output or ""
    return ""


def timeline_row(event: ev.Event) -> dict[str, Any]:
    """One timeline row: epoch time, author, role, types, text (unshortened), state delta."""
    parts = event.content.parts if event.content and event.content.parts else []
    texts = [t for t in (_part_text(p) for p in parts) if t]
    if event.error_code or event.error_message:
        texts.append(f"error {event.error_code or ''}: {event.error_message or ''}".strip())
    return {
        "id": event.id,
        "time": event.timestamp,
        "author": event.author,
        "role": event.content.role if event.content and event.content.role else "",
        "types": event_types_or_empty(event),
        "text": " ".join(texts),
        "stateDelta": dict(event.actions.state_delta),
    }


def event_types_or_empty(event: ev.Event) -> list[str]:
    """VeADK's event types of the event, or ['empty'] when it carries nothing."""
    return ev.event_types(event) or (["state"] if event.actions.state_delta else ["empty"])


# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), and the
# bidirectional overrides that reorder what a terminal shows.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(value: Any) -> Any:
    """`value` with escape sequences and control characters made visible (\\x1b), for tables.

    Chat text, ids and state come from users and models: printed raw, an ESC sequence could
    retitle the terminal, hide rows or rewrite what the operator sees. Lists and dicts are
    cleaned item by item; other values are returned as they are.
    """
    if isinstance(value, str):
        return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", value)
    if isinstance(value, list):
        return [terminal_safe(v) for v in value]
    if isinstance(value, dict):
        return {terminal_safe(k): terminal_safe(v) for k, v in value.items()}
    return value
