"""What a person wants to see of an event in a timeline: time, author, role, types, text, state delta.

ADK's context compaction (EventsCompactionConfig) writes an event whose actions.compaction
holds the time range of the events it replaces and a summary Content; the timeline shows it
as a compaction: which events it summarises and the summary text, not as an empty event.

A stored event that is no ADK event (`"author": 5`, `"content": "str"`, parts not a list:
ADK's own reader refuses it) is one row saying what is wrong with it, and the timeline goes on.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

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


def content_text(content: ev.Content | None) -> str:
    """The text of a Content for people: every part, function calls and responses spelled out."""
    parts = content.parts if content and content.parts else []
    return " ".join(t for t in (_part_text(p) for p in parts) if t)


def compaction_of(event: ev.Event) -> tuple[float, float, ev.Content | None] | None:
    """(start, end, summary) of an ADK compaction event, or None for any other event."""
    raw = (event.actions.model_extra or {}).get("compaction")
    if not isinstance(raw, dict):
        return None
    start = raw.get("startTimestamp", raw.get("start_timestamp"))
    end = raw.get("endTimestamp", raw.get("end_timestamp"))
    content = raw.get("compactedContent", raw.get("compacted_content"))
    summary = ev.Content.model_validate(content) if isinstance(content, dict) else None
    try:
        return float(start or 0.0), float(end or 0.0), summary
    except (TypeError, ValueError):
        return None


def timeline_row(event: ev.Event) -> dict[str, Any]:
    """One timeline row: epoch time, author, role, types, text (unshortened), state delta."""
    texts = [content_text(event.content)] if event.content else []
    if event.error_code or event.error_message:
        texts.append(f"error {event.error_code or ''}: {event.error_message or ''}".strip())
    return {
        "id": event.id,
        "time": event.timestamp,
        "author": event.author,
        "role": event.content.role if event.content and event.content.role else "",
        "types": event_types_or_empty(event),
        "text": " ".join(t for t in texts if t),
        "state_delta": dict(event.actions.state_delta),
    }


class Timeline:
    """Numbers the rows of a session's timeline and names the events a compaction summarises."""

    def __init__(self, first: int = 1) -> None:
        self.next = first
        self._seen: list[tuple[int, float]] = []  # (number, timestamp) of the events shown so far

    def row_of(self, data: dict[str, Any]) -> dict[str, Any]:
        """The row of the next stored event (its JSON as read), or of what is wrong with it."""
        try:
            return self.row(ev.Event.model_validate(data))
        except ValidationError as exc:
            row = odd_row(data, exc)
        row["n"] = self.next
        self.next += 1
        return row

    def row(self, event: ev.Event) -> dict[str, Any]:
        """The timeline row of the next event, numbered; a compaction says what it replaces."""
        row = timeline_row(event)
        row["n"] = self.next
        compaction = compaction_of(event)
        if compaction is not None:
            start, end, summary = compaction
            covered = [n for n, t in self._seen if start <= t <= end]
            span = f"events #{covered[0]}-#{covered[-1]}" if covered else "earlier events"
            row["types"] = ["compaction", *[t for t in row["types"] if t not in ("empty", "compaction")]]
            row["role"] = row["role"] or (summary.role if summary and summary.role else "")
            summary_text = content_text(summary)
            row["text"] = f"compaction of {span} ({_local(start)} to {_local(end)}): {summary_text}".rstrip(": ")
            row["compaction"] = {"start_time": start, "end_time": end, "events": covered}
        self._seen.append((self.next, event.timestamp))
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


def _local(epoch: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def event_types_or_empty(event: ev.Event) -> list[str]:
    """VeADK's event types of the event, 'compaction' for ADK's compaction events, or
    ['state'] / ['empty'] when it carries nothing else."""
    types = ev.event_types(event)
    if compaction_of(event) is not None:
        return ["compaction", *types]
    return types or (["state"] if event.actions.state_delta else ["empty"])
