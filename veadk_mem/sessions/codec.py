"""Rows of each layout to ADK event data and back.

`event_from_row` gives the event as ADK stored it (snake_case dict, the shape
`Event.model_validate` reads); `adkjson.printed_event` gives it as ADK prints it.
"""

from __future__ import annotations

import functools
import json
import pickle
from typing import TYPE_CHECKING, Any

from pydantic.alias_generators import to_snake

from veadk_mem.jsonio import compact_json, stored_json
from veadk_mem.sessions.layout import Layout, Tables, stored_time, to_epoch
from veadk_mem.sessions.safepickle import decode_actions, encode_actions, record_undecoded

if TYPE_CHECKING:
    from veadk_mem.sessions.rawsession import RawEvent

# --- rows -> event data -----------------------------------------------------------------

V0_JSON_COLUMNS = (
    "content",
    "grounding_metadata",
    "custom_metadata",
    "usage_metadata",
    "citation_metadata",
    "input_transcription",
    "output_transcription",
)
V0_SCALAR_COLUMNS = ("author", "branch", "partial", "turn_complete", "error_code", "error_message", "interrupted")


def event_from_row(tables: Tables, row: Any, warnings: list[str] | None = None) -> dict[str, Any]:
    """The stored event as ADK event data (snake_case), reading the row the way ADK does."""
    layout = tables.layout
    if layout is Layout.SQLITE:
        raw = row.event_data
        data: dict[str, Any] = stored_json(raw) if isinstance(raw, (str, bytes)) else dict(raw or {})
        return data
    if layout is Layout.V1:
        raw = row.event_data
        data = stored_json(raw) if isinstance(raw, (str, bytes)) else dict(raw or {})
        data["id"] = row.id
        data["invocation_id"] = row.invocation_id
        if data.get("timestamp") is None:
            data["timestamp"] = to_epoch(row.timestamp)
        return data
    data = {"id": row.id, "invocation_id": row.invocation_id, "timestamp": to_epoch(row.timestamp)}
    # An old ADK's table lacks some columns (tables.missing): those fields are simply absent
    # (skipped by name: a missing attribute costs SQLAlchemy's slow lookup path per row).
    missing = tables.missing
    for name in V0_SCALAR_COLUMNS:
        value = None if name in missing else getattr(row, name, None)
        if value is not None:
            data[name] = bool(value) if name in ("partial", "turn_complete", "interrupted") else value
    for name in V0_JSON_COLUMNS:
        value = None if name in missing else getattr(row, name, None)
        if isinstance(value, dict):
            data[name] = value
    # ADK's v0 reader gives an empty set when the column is NULL; so do we
    ids = getattr(row, "long_running_tool_ids_json", None)
    data["long_running_tool_ids"] = json.loads(ids) if ids else []
    try:
        actions = decode_actions(row.actions)
    except pickle.UnpicklingError as exc:
        # an upgrade (safepickle.converting) records the event, to stop or keep its pickle raw
        if not record_undecoded(row, exc, data) and warnings is not None:
            warnings.append(f"event {row.id}: actions not decoded ({exc}); shown without them")
        actions = {}
    data["actions"] = {k: v for k, v in actions.items() if v is not None}
    return data


# --- event -> row values ----------------------------------------------------------------


# transferToAgent -> transfer_to_agent (snake_case names pass unchanged); cached: it runs per
# key of every event written into a v0 table
_snake = functools.lru_cache(maxsize=4096)(to_snake)


def event_row(
    tables: Tables, app: str, user: str, session_id: str, event: RawEvent, dropped: dict[str, int] | None = None
) -> dict[str, Any]:
    """Column values storing `event` in this layout, as ADK's own from_event would write them.

    Into an old v0 table, a field it has no column for is left out and counted in `dropped`.
    """
    data = event.data
    stamp = stored_time(tables, event.timestamp)
    layout = tables.layout
    if layout is Layout.SQLITE or layout is Layout.V1:  # one dict, built once: this runs per event
        return {
            "id": event.id,
            "app_name": app,
            "user_id": user,
            "session_id": session_id,
            "invocation_id": event.invocation_id,
            "timestamp": stamp,
            "event_data": compact_json(data) if layout is Layout.SQLITE else data,
        }
    key = {"id": event.id, "app_name": app, "user_id": user, "session_id": session_id}
    row: dict[str, Any] = {**key, "invocation_id": event.invocation_id, "timestamp": stamp}
    # Fields vmem's model does not declare (usageMetadata, groundingMetadata, ...) keep the
    # camelCase of the JSON they came from; the v0 columns are snake_case.
    data = {_snake(k): v for k, v in data.items()}
    for name in V0_SCALAR_COLUMNS:
        row[name] = data.get(name)
    row["author"] = event.author
    for name in V0_JSON_COLUMNS:
        row[name] = data.get(name)
    ids = data.get("long_running_tool_ids")
    row["long_running_tool_ids_json"] = json.dumps(list(ids)) if ids is not None else None
    # Fields vmem's model does not declare (transferToAgent, requestedAuthConfigs, ...) keep
    # the camelCase of the JSON they came from; EventActions' own names are snake_case.
    actions = {_snake(k): v for k, v in (data.get("actions") or {}).items()}
    row["actions"] = encode_actions(actions)
    for name in tables.missing:
        if row.pop(name, None) is not None and dropped is not None:
            dropped[name] = dropped.get(name, 0) + 1
    return row
