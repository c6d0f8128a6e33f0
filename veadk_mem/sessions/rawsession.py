"""Import records straight from parsed JSON, without building pydantic objects.

`session import` reads a file twice (check, then write) and stores each event as the
snake_case dict `Event.model_dump(mode="json", exclude_none=True)` gives. Validating and
dumping through the models cost most of an import's time, so `raw_session` does both in
one walk over the data, following the structure read off the models in
`veadk_mem.events`. It takes only input the models would keep unchanged (the declared
type exactly, an int where a float is declared); anything else (a string where a bool
is declared, say) returns None and the caller goes through the models, which coerce or
refuse it with their own message. A property test checks the two agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import UnionType
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

from pydantic import BaseModel

from veadk_mem.adkjson import adk_ordered, fresh_source, stored_event, stored_field

if TYPE_CHECKING:
    from veadk_mem import events as ev

_FLOAT_INT = 2**53  # ints a float field takes exactly


# The kinds of field the walk knows (plain ints: compared once per value).
_EXTRA, _STR, _BOOL, _FLOAT, _DICT, _STR_LIST, _MODEL, _MODEL_LIST = range(8)


_Spec = tuple[str, int, "_Strict | None", bool]  # field name, kind, nested model, None allowed


@dataclass
class _Strict:
    """One model: accepted key -> spec; defaults by field name; a compiled walk per key order seen."""

    model: str = ""  # the model's name: ADK's model of that name stores the keys it does not declare
    fields: dict[str, _Spec] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    walkers: dict[tuple[str, ...], Any] = field(default_factory=dict)


def _kind_of(annotation: Any, cache: dict[type, _Strict]) -> tuple[int, _Strict | None, bool]:
    origin = get_origin(annotation)
    optional = False
    if origin in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        if len(args) != 1:
            raise TypeError(f"unsupported field type {annotation!r}")
        annotation, origin = args[0], get_origin(args[0])
    simple = {str: _STR, bool: _BOOL, float: _FLOAT}
    if annotation in simple:
        return simple[annotation], None, optional
    if annotation is dict or origin is dict:
        return _DICT, None, optional
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _MODEL, _strict_shape(annotation, cache), optional
    if origin is list:
        (inner,) = get_args(annotation)
        if inner is str:
            return _STR_LIST, None, optional
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return _MODEL_LIST, _strict_shape(inner, cache), optional
    raise TypeError(f"unsupported field type {annotation!r}")


def _strict_shape(model: type[BaseModel], cache: dict[type, _Strict]) -> _Strict:
    if model in cache:
        return cache[model]
    shape = cache[model] = _Strict(model.__name__)
    for name, info in model.model_fields.items():
        kind, sub, optional = _kind_of(info.annotation, cache)
        spec = (name, kind, sub, optional)
        shape.fields[name] = spec
        shape.fields[info.alias or name] = spec
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                default = default.model_dump(mode="json", by_alias=False, exclude_none=True)
            if default is not None:
                shape.defaults[name] = default
    return shape


_Plan = tuple[tuple[_Spec, ...], tuple[tuple[str, Any], ...], dict[int, Callable[[Any], Any]]]


def _plan(shape: _Strict, keys: tuple[str, ...]) -> _Plan | None:
    """The spec of each key in this order, the defaults to add, and how to store the value of each
    key vmem's model does not declare (`adkjson.stored_field`); None when a field is given twice."""
    specs: list[_Spec] = []
    names: set[str] = set()
    stores: dict[int, Callable[[Any], Any]] = {}
    for i, key in enumerate(keys):
        spec = shape.fields.get(key)
        if spec is None:
            out, store = stored_field(shape.model, key)
            spec = (out, _EXTRA, None, True)
            if store is not None:
                stores[i] = store
        if spec[0] in names:
            return None  # the alias and the field name both given: leave it to the model
        names.add(spec[0])
        specs.append(spec)
    defaults = tuple((name, value) for name, value in shape.defaults.items() if name not in names)
    return tuple(specs), defaults, stores


_Walker = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def _compile(plan: _Plan | None) -> _Walker:
    """A function doing `_walk` for dicts with one key order, as straight-line code.

    The generic loop pays a branch per kind and a tuple unpack per value; a function per
    key order (a few per model in any real file) runs about twice as fast. Names from the
    data never enter the source: the function reads them from a tuple.
    """
    if plan is None:
        return lambda _data: None
    specs, defaults, stores = plan
    ns: dict[str, Any] = {"_walk": _walk, "M": _FLOAT_INT}
    names = tuple(spec[0] for spec in specs)
    ns["N"] = names
    values = ", ".join(f"v{i}" for i in range(len(specs)))
    lines = ["def walk(data):", "    out = {}"]
    if specs:
        lines.insert(1, f"    ({values},) = data.values()")
    for i, (_name, kind, sub, optional) in enumerate(specs):
        v, put = f"v{i}", f"out[N[{i}]]"
        if kind == _EXTRA:
            if i in stores:
                ns[f"C{i}"] = stores[i]
            lines += [
                f"    if {v} is not None:",
                f"        {put} = C{i}({v})" if i in stores else f"        {put} = {v}",
            ]
            continue
        lines += [f"    if {v} is None:", "        pass" if optional else "        return None", "    else:"]
        if kind in (_STR, _BOOL, _DICT):
            t = {_STR: "str", _BOOL: "bool", _DICT: "dict"}[kind]
            lines += [f"        if type({v}) is not {t}:", "            return None", f"        {put} = {v}"]
        elif kind == _FLOAT:
            lines += [
                f"        t = type({v})",
                "        if t is float:",
                f"            {put} = {v}",
                f"        elif t is int and -M <= {v} <= M:",
                f"            {put} = float({v})",
                "        else:",
                "            return None",
            ]
        elif kind == _STR_LIST:
            lines += [
                f"        if type({v}) is not list or any(type(x) is not str for x in {v}):",
                "            return None",
                f"        {put} = list({v})",
            ]
        elif kind == _MODEL:
            ns[f"S{i}"], ns[f"W{i}"] = sub, sub.walkers  # type: ignore[union-attr]
            lines += [
                f"        if type({v}) is not dict:",
                "            return None",
                f"        w = W{i}.get(tuple({v}))",  # the nested model's walker for this key order, inline
                f"        w = w({v}) if w is not None else _walk(S{i}, {v})",
                "        if w is None:",
                "            return None",
                f"        {put} = w",
            ]
        else:  # _MODEL_LIST
            ns[f"S{i}"], ns[f"W{i}"] = sub, sub.walkers  # type: ignore[union-attr]
            lines += [
                f"        if type({v}) is not list:",
                "            return None",
                "        items = []",
                f"        for x in {v}:",
                "            if type(x) is not dict:",
                "                return None",
                f"            w = W{i}.get(tuple(x))",
                f"            w = w(x) if w is not None else _walk(S{i}, x)",
                "            if w is None:",
                "                return None",
                "            items.append(w)",
                f"        {put} = items",
            ]
    for j, (_name, default) in enumerate(defaults):
        ns[f"DN{j}"] = _name
        lines.append(f"    out[DN{j}] = {fresh_source(default, ns, f'D{j}')}")
    lines.append("    return out")
    exec("\n".join(lines), ns)  # the source is built from the model's structure only
    walker: _Walker = ns["walk"]
    return walker


def _walk(shape: _Strict, data: dict[str, Any]) -> dict[str, Any] | None:
    """`data` as the model dumps it (snake_case, Nones dropped), or None if the model would change it."""
    keys = tuple(data)
    walker = shape.walkers.get(keys)
    if walker is None:
        if len(shape.walkers) >= 256:  # so many key orders: leave them to the models, keep memory bounded
            return None
        walker = shape.walkers[keys] = _compile(_plan(shape, keys))
    return walker(data)


_SHAPES: dict[type, _Strict] = {}


def _session_shape() -> _Strict:
    """The walk's shape of a session, built on first use in a cache of its own and published whole:
    `_strict_shape` registers a shape before filling it in (for recursive models), and a second
    thread (two imports in one process) took such a half-built one."""
    from veadk_mem import events as ev

    shape = _SHAPES.get(ev.Session)
    if shape is None:
        shape = _SHAPES.setdefault(ev.Session, _strict_shape(ev.Session, {}))
    return shape


def dump_event(event: ev.Event) -> dict[str, Any]:
    """The event data ADK stores for `event` (what `raw_session` gives for canonical input)."""
    return adk_ordered(stored_event(event.model_dump(mode="json", by_alias=False, exclude_none=True)))


@dataclass(slots=True)
class RawEvent:
    """One event of a RawSession: the fields the writer and the limits read, and the stored data."""

    id: str
    invocation_id: str
    author: str
    timestamp: float
    branch: str | None
    error_code: str | None
    data: dict[str, Any]


@dataclass(slots=True)
class RawSession:
    """A validated session of an import file, its events already in stored form."""

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    last_update_time: float
    events: list[RawEvent]
    create_time: float | None = None  # given by the export's session_times line; None: the import derives it
    size: int = field(default=0, compare=False)  # its JSONL line's bytes (an import batch's bound); 0: unknown


def raw_session(data: Any) -> RawSession | None:
    """`data` (a decoded session JSON object) as a RawSession, or None when the models must judge it.

    Events without an id get the stable one `checks` gives them; duplicate ids return None
    (the model path reports them).
    """
    if type(data) is not dict:
        return None
    shape = _session_shape()
    session = _walk(shape, data)
    if session is None or not session.get("id") or not session.get("app_name") or not session.get("user_id"):
        return None
    app, user, sid = session["app_name"], session["user_id"], session["id"]
    events: list[RawEvent] = []
    seen: set[str] = set()
    for index, event in enumerate(session["events"]):
        if not event["id"]:
            event["id"] = event_id(app, user, sid, index)
        if event["id"] in seen:
            return None
        seen.add(event["id"])
        events.append(
            RawEvent(
                event["id"],
                event["invocation_id"],
                event["author"],
                event["timestamp"],
                event.get("branch"),
                event.get("error_code"),
                event,
            )
        )
    return RawSession(sid, app, user, session["state"], session["last_update_time"], events)


def event_id(app: str, user: str, session_id: str, index: int) -> str:
    """The id an import gives an event that has none: stable, so a re-run finds the same event."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"vmem:{app}/{user}/{session_id}/{index}"))


def raw_event(e: ev.Event) -> RawEvent:
    """A model-validated event as the writer takes it."""
    return RawEvent(e.id, e.invocation_id, e.author, e.timestamp, e.branch, e.error_code, dump_event(e))


def from_model(session: ev.Session) -> RawSession:
    """A model-validated session as a RawSession (the path for input the fast walk left to the models)."""
    events = [raw_event(e) for e in session.events]
    return RawSession(session.id, session.app_name, session.user_id, session.state, session.last_update_time, events)
