"""ADK's two shapes of event data: as it prints it (camelCase) and as it stores it (snake_case).

google-adk prints an event as `model_dump(mode="json", by_alias=True, exclude_none=True)` and
stores it in `events.event_data` as the same dump without `by_alias`: every field of every
nested model (usage metadata, grounding, actions, node info ...) under its alias or its name,
free dictionaries (state deltas, tool arguments, custom metadata) with their keys untouched.
`printed_event` and `stored_event` give those two shapes
for event data in either shape or a mix of both, from the table of ADK's models in
`adk_schema` (so vmem needs no google-adk at run time). Keys ADK does not know are kept (camelCase
when printed, snake_case when stored), so nothing is lost on a round trip.

Export and `get --json` convert tens of thousands of events a second, so each model compiles a
straight-line function per key order it meets (a few per model in real data).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic.alias_generators import to_camel, to_snake

from veadk_mem.adk_schema import ADK_SCHEMA

_Spec = tuple[str, "_Node | None", str, bool]  # output key, nested model, container, key is the alias


@dataclass(eq=False)
class _Node:
    """One ADK model in one output shape: accepted key -> spec; defaults by output key."""

    name: str
    fields: dict[str, _Spec] = field(default_factory=dict)
    defaults: list[tuple[str, Any]] | None = None  # output form, made on first use
    plans: dict[tuple[str, ...], Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)


@functools.lru_cache(maxsize=4096)
def _unknown_camel(key: str) -> str:
    return to_camel(key) if "_" in key else key


@functools.lru_cache(maxsize=4096)
def _unknown_snake(key: str) -> str:
    return to_snake(key) if key != key.lower() else key


def _tree(printed: bool) -> dict[str, _Node]:
    """Every model of the table in one shape, linked, by name."""
    nodes = {name: _Node(name) for name in ADK_SCHEMA}
    for name, entry in ADK_SCHEMA.items():
        node = nodes[name]
        for fname, alias, container, nested in entry:
            out = alias if printed else fname
            sub = nodes[nested] if nested else None
            node.fields[fname] = (out, sub, container, False)
            if alias != fname:
                node.fields[alias] = (out, sub, container, True)
    return nodes


_TREES: dict[bool, _Node] = {}
_NODES: dict[bool, dict[str, _Node]] = {}


def _nodes(printed: bool) -> dict[str, _Node]:
    nodes = _NODES.get(printed)
    if nodes is None:
        nodes = _NODES[printed] = _tree(printed)
    return nodes


def _event_node(printed: bool) -> _Node:
    node = _TREES.get(printed)
    if node is None:
        node = _TREES[printed] = _nodes(printed)["Event"]
    return node


# ADK stamps an event left without a time with the clock; vmem reads it as 0.0, as its model does
# The defaults a printed event gets for a field its data leaves out: those of the fields every ADK
# release has (the `events.Event` model's). Fields a newer ADK added (`node_info`, more `actions`
# maps) are not filled in: a release without them refuses an event that has them (ADK 1.x models
# forbid extra keys), and a row an ADK wrote holds every default of its own release already.
# Stored data gets none: it is kept as given, defaults and all.
_PRINTED_DEFAULTS: dict[str, dict[str, Any]] = {
    "Event": {
        "id": "",
        "invocation_id": "",
        "author": "",
        "timestamp": 0.0,
        "actions": {"state_delta": {}, "artifact_delta": {}},
    },
    "EventActions": {"state_delta": {}, "artifact_delta": {}},
}


def _defaults(node: _Node, printed: bool) -> list[tuple[str, Any]]:
    """The node's defaults in its output shape (given in the stored, snake_case one)."""
    if node.defaults is None:
        out: list[tuple[str, Any]] = []
        table = _PRINTED_DEFAULTS.get(node.name, {}) if printed else {}
        for fname, value in table.items():
            key, sub, container, _alias = node.fields[fname]
            if sub is not None and container == "" and isinstance(value, dict):
                value = convert(sub, value, printed)
            out.append((key, value))
        node.defaults = out
    return node.defaults


def fresh_source(value: Any, ns: dict[str, Any], name: str) -> str:
    """A Python expression that builds a fresh copy of `value` (a default's JSON dicts and lists),
    so that no two outputs share (and mutate) one, for a compiled function: a dict display runs
    several times faster than a recursive copy, and an event without `actions` gets one per
    event. Keys and leaves are read from `ns` under names starting `name`; no value enters the source."""
    if isinstance(value, dict):
        items = []
        for j, (key, item) in enumerate(value.items()):
            ns[f"{name}k{j}"] = key
            items.append(f"{name}k{j}: {fresh_source(item, ns, f'{name}_{j}')}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(fresh_source(item, ns, f"{name}_{j}") for j, item in enumerate(value)) + "]"
    ns[name] = value
    return name


def _sorted_set(value: Any) -> Any:
    """A set field as ADK dumps it: sorted, each id once (a list of anything else is left alone)."""
    if isinstance(value, list) and all(type(x) is str for x in value):
        return sorted(set(value))
    return value


def _each(node: _Node, value: Any, printed: bool) -> Any:
    """A list of one model's dicts in the node's shape (anything else left alone)."""
    if type(value) is not list:
        return value
    return [convert(node, x, printed) if type(x) is dict else x for x in value]


def _values(node: _Node, value: Any, printed: bool) -> Any:
    """A dict whose values are one model's dicts, its keys untouched."""
    if type(value) is not dict:
        return value
    return {k: convert(node, x, printed) if type(x) is dict else x for k, x in value.items()}


def _compile(node: _Node, keys: tuple[str, ...], printed: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`convert` for dicts with exactly these keys, as straight-line code (names from the data
    never enter the source: it reads them from a tuple)."""
    ns: dict[str, Any] = {
        "_convert": convert,
        "_each": _each,
        "_values": _values,
        "_set": _sorted_set,
        "P": printed,
    }
    # a key ADK does not know: renamed at the event's top level (as vmem's models write extras),
    # kept as it came inside a nested model (its value, like a free dict, is the data's own)
    unknown = (_unknown_camel if printed else _unknown_snake) if node.name == "Event" else str
    specs = [node.fields.get(key) for key in keys]
    # a field given under both its name and its alias: the alias wins, as pydantic reads it
    by_alias = {spec[0]: i for i, spec in enumerate(specs) if spec is not None and spec[3]}
    names: list[str] = [""] * len(keys)
    body: list[str] = []
    given: set[str] = set()
    for i, spec in enumerate(specs):
        v, put = f"v{i}", f"out[A[{i}]]"
        if spec is None:
            names[i] = unknown(keys[i])
            body += [f"    if {v} is not None:", f"        {put} = {v}"]
            continue
        out, sub, container, _alias = spec
        names[i] = out
        given.add(out)
        twin = by_alias.get(out)
        shadowed = "" if spec[3] or twin is None else f" and v{twin} is None"
        body.append(f"    if {v} is not None{shadowed}:")
        if container == "set":
            body.append(f"        {v} = _set({v})")
        elif sub is not None:
            ns[f"S{i}"] = sub
            if container == "list":
                body.append(f"        {v} = _each(S{i}, {v}, P)")
            elif container == "dict":
                body.append(f"        {v} = _values(S{i}, {v}, P)")
            else:
                body.append(f"        {v} = _convert(S{i}, {v}, P) if type({v}) is dict else {v}")
        body.append(f"        {put} = {v}")
    ns["A"] = tuple(names)
    lines = ["def convert(data):", "    out = {}"]
    if keys:
        lines.append(f"    ({', '.join(f'v{i}' for i in range(len(keys)))},) = data.values()")
    lines += body
    for j, (key, value) in enumerate(_defaults(node, printed)):
        if key not in given:
            ns[f"DN{j}"] = key
            lines.append(f"    if DN{j} not in out:")
            lines.append(f"        out[DN{j}] = {fresh_source(value, ns, f'D{j}')}")
    lines.append("    return out")
    exec("\n".join(lines), ns)  # the source is built from the table's structure only
    compiled: Callable[[dict[str, Any]], dict[str, Any]] = ns["convert"]
    if len(node.plans) < 256:  # so many key orders: compile each again rather than keep them all
        node.plans[keys] = compiled
    return compiled


def convert(node: _Node, data: dict[str, Any], printed: bool) -> dict[str, Any]:
    """`data` (one model's dict) in the node's shape."""
    keys = tuple(data)
    plan = node.plans.get(keys) or _compile(node, keys, printed)
    return plan(data)


def printed_event(data: dict[str, Any]) -> dict[str, Any]:
    """Event data in any shape as ADK prints it: `Event.model_dump(mode="json", by_alias=True, exclude_none=True)`."""
    return convert(_TREES.get(True) or _event_node(True), data, True)


def stored_event(data: dict[str, Any]) -> dict[str, Any]:
    """Event data in any shape as ADK stores it in `event_data`: `Event.model_dump(mode="json", exclude_none=True)`."""
    return convert(_TREES.get(False) or _event_node(False), data, False)


def _ordered(node: _Node, data: dict[str, Any]) -> dict[str, Any]:
    """`data` (one stored model's dict) with its keys in the ADK model's field order, at every depth."""
    out: dict[str, Any] = {}
    for key, sub, container, alias in node.fields.values():
        if alias or key not in data:
            continue
        value = data[key]
        if sub is not None:
            if container == "list" and type(value) is list:
                value = [_ordered(sub, v) if type(v) is dict else v for v in value]
            elif container == "dict" and type(value) is dict:
                value = {k: _ordered(sub, v) if type(v) is dict else v for k, v in value.items()}
            elif container == "" and type(value) is dict:
                value = _ordered(sub, value)
        out[key] = value
    for key, value in data.items():  # keys ADK does not declare keep their place after
        if key not in out:
            out[key] = value
    return out


def adk_ordered(data: dict[str, Any]) -> dict[str, Any]:
    """Stored event data with its keys in the order ADK's `model_dump` gives them (vmem's own
    models declare fewer fields, in another order), so the plain import path writes the same text."""
    return _ordered(_event_node(False), data)


def stored_field(model: str, key: str) -> tuple[str, Callable[[Any], Any] | None]:
    """For a key of an ADK model's dict (by model name) that vmem's own models do not declare: its
    name as ADK stores it, and how to store its value (None: as it is), so that the import's walk
    (`sessions.rawsession`) stores such fields as `stored_event` would, at no cost for the rest."""
    node = _nodes(False).get(model)
    spec = node.fields.get(key) if node is not None else None
    if spec is None:
        return (_unknown_snake(key) if model == "Event" else key), None
    out, sub, container, _alias = spec
    if container == "set":
        return out, _sorted_set
    if sub is None:
        return out, None
    if container == "list":
        return out, lambda value: _each(sub, value, False)
    if container == "dict":
        return out, lambda value: _values(sub, value, False)
    return out, lambda value: convert(sub, value, False) if type(value) is dict else value


def mixed_keys(data: dict[str, Any]) -> bool:
    """Whether stored event data holds a field of an ADK model under its camelCase alias, at any
    depth (as vmem before 0.2 restored an import: `usageMetadata` beside `invocation_id`)."""
    return _aliased(_event_node(False), data)


def _aliased(node: _Node, data: dict[str, Any]) -> bool:
    for key, value in data.items():
        spec = node.fields.get(key)
        if spec is None:
            continue
        _out, sub, container, alias = spec
        if alias:
            return True
        if sub is None or value is None:
            continue
        if container == "list" and type(value) is list:
            items: Any = value
        elif container == "dict" and type(value) is dict:
            items = value.values()
        else:
            items = [value]
        if any(type(x) is dict and _aliased(sub, x) for x in items):
            return True
    return False
