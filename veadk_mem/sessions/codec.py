"""Rows of each layout to ADK event data and back, plus a fast path to camelCase JSON.

`event_from_row` gives the event as ADK stored it (snake_case dict, the shape
`Event.model_validate` reads). `camel_event` turns such a dict into the camelCase data
`events.Event(...).to_dict()` would produce, without building pydantic objects: export
and `get --json` stream tens of thousands of events a second through it. The structure
it follows is read off the models in `veadk_mem.events`, so the two cannot drift; a test
checks they agree.
"""

from __future__ import annotations

import functools
import json
import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args, get_origin

from pydantic import BaseModel
from pydantic.alias_generators import to_camel, to_snake
from pydantic_core import from_json

from veadk_mem.jsonio import compact_json
from veadk_mem.sessions.layout import Layout, Tables, to_epoch
from veadk_mem.sessions.safepickle import decode_actions, encode_actions, record_undecoded

if TYPE_CHECKING:
    from veadk_mem.sessions.rawsession import RawEvent

# --- camelCase fast path ----------------------------------------------------------------


@dataclass
class _Shape:
    """One model's fields: any accepted key -> (output alias, nested shape, is list)."""

    fields: dict[str, tuple[str, _Shape | None, bool]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    aliases: set[str] = field(default_factory=set)
    plans: dict[tuple[str, ...], Any] = field(default_factory=dict)


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = get_origin(annotation)
    args = [a for a in get_args(annotation) if a is not type(None)]
    if origin is list and len(args) == 1:
        inner, _ = _model_of(args[0])
        return inner, inner is not None
    if len(args) == 1:
        return _model_of(args[0])
    return None, False


def _shape(model: type[BaseModel], cache: dict[type[BaseModel], _Shape]) -> _Shape:
    if model in cache:
        return cache[model]
    shape = _Shape()
    cache[model] = shape
    for name, info in model.model_fields.items():
        alias = info.alias or name
        sub_model, is_list = _model_of(info.annotation)
        sub = _shape(sub_model, cache) if sub_model is not None else None
        shape.fields[name] = shape.fields[alias] = (alias, sub, is_list)
        shape.aliases.add(alias)
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if default is not None:
                if isinstance(default, BaseModel):
                    default = default.model_dump(mode="json", by_alias=True, exclude_none=True)
                shape.defaults[alias] = default
    return shape


_SHAPES: dict[type[BaseModel], _Shape] = {}


_EVENT_MODEL: list[type[BaseModel]] = []


def _event_shape() -> _Shape:
    from veadk_mem import events as ev

    return _shape(ev.Event, _SHAPES)


_RENAMED: dict[str, str] = {}


def _rename(key: str) -> str:
    """An unknown key as the models write extras: camelCase when it has an underscore."""
    name = _RENAMED.get(key)
    if name is None:
        name = _RENAMED[key] = to_camel(key) if "_" in key else key
    return name


def _fresh(default: Any) -> Any:
    if isinstance(default, dict):
        return {k: _fresh(v) for k, v in default.items()} if default else {}
    if isinstance(default, list):
        return [_fresh(v) for v in default]
    return default


def _plan(shape: _Shape, keys: tuple[str, ...]) -> Any:
    """How to convert a dict with exactly these keys, compiled: a function of the dict.

    Leaf values are copied under their output names (Nones dropped), nested models
    converted, then the defaults the keys leave out added, in that order (the order
    `Event.to_dict()` writes them). The function is straight-line code for this key order
    (the generic loop cost a branch and a tuple unpack per value, and this runs for every
    event an export or `get --json` writes); names from the data never enter its source:
    it reads them from a tuple.
    """
    ns: dict[str, Any] = {"_camel": _camel, "_fresh": _fresh}
    names: list[str] = []
    leaves: list[str] = []
    nested: list[str] = []
    aliases = set()
    for i, key in enumerate(keys):
        spec = shape.fields.get(key)
        v, put = f"v{i}", f"out[A[{i}]]"
        if spec is None or spec[1] is None:
            names.append(_rename(key) if spec is None else spec[0])
            if spec is not None:
                aliases.add(spec[0])
            leaves += [f"    if {v} is not None:", f"        {put} = {v}"]
            continue
        alias, sub, is_list = spec
        names.append(alias)
        aliases.add(alias)
        ns[f"S{i}"] = sub
        nested += [f"    if {v} is not None:"]
        if is_list:
            nested += [
                f"        if isinstance({v}, list):",
                f"            {v} = [_camel(S{i}, x) if isinstance(x, dict) else x for x in {v}]",
                f"        elif isinstance({v}, dict):",
                f"            {v} = _camel(S{i}, {v})",
            ]
        else:
            nested += [f"        if isinstance({v}, dict):", f"            {v} = _camel(S{i}, {v})"]
        nested.append(f"        {put} = {v}")
    ns["A"] = tuple(names)
    lines = ["def convert(data):", "    out = {}"]
    if keys:
        lines.append(f"    ({', '.join(f'v{i}' for i in range(len(keys)))},) = data.values()")
    lines += leaves + nested
    defaults = [(alias, value) for alias, value in shape.defaults.items() if alias not in aliases]
    for j, (alias, default) in enumerate(defaults):
        ns[f"D{j}"], ns[f"DN{j}"] = default, alias
        fresh = isinstance(default, (dict, list))
        lines.append(f"    out[DN{j}] = _fresh(D{j})" if fresh else f"    out[DN{j}] = D{j}")
    lines.append("    return out")
    exec("\n".join(lines), ns)  # the source is built from the model's structure only
    convert = ns["convert"]
    if len(shape.plans) < 256:
        shape.plans[keys] = convert
    return convert


def _camel(shape: _Shape, data: dict[str, Any]) -> dict[str, Any]:
    keys = tuple(data)
    convert = shape.plans.get(keys) or _plan(shape, keys)
    out: dict[str, Any] = convert(data)
    return out


def camel_event(data: dict[str, Any]) -> dict[str, Any]:
    """ADK event data (snake or camel keys) as the camelCase dict `Event.to_dict()` gives."""
    shape = _SHAPES.get(_EVENT_MODEL[0]) if _EVENT_MODEL else None
    if shape is None:
        from veadk_mem import events as ev

        _EVENT_MODEL[:] = [ev.Event]
        shape = _event_shape()
    return _camel(shape, data)


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


class UndecodableActions(Exception):
    """A v0 `actions` pickle the restricted unpickler refused; the event is read without it."""


def event_from_row(tables: Tables, row: Any, warnings: list[str] | None = None) -> dict[str, Any]:
    """The stored event as ADK event data (snake_case), reading the row the way ADK does."""
    layout = tables.layout
    if layout is Layout.SQLITE:
        raw = row.event_data
        data: dict[str, Any] = from_json(raw) if isinstance(raw, (str, bytes)) else dict(raw or {})
        return data
    if layout is Layout.V1:
        raw = row.event_data
        data = from_json(raw) if isinstance(raw, (str, bytes)) else dict(raw or {})
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
    from veadk_mem.sessions.layout import stored_time

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
