"""One import record checked: a session (ADK's shape, event ids filled) or an app/user state record.

The record-level check of `session import`, below everything that reads a file: `validate.py`
runs it on each record of a file, `bigline.py` on each chunk of a long line's events.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.rawsession import RawSession


def _check_state_record(data: dict[str, Any], where: str) -> dict[str, Any]:
    kind = data["kind"]
    fields = ("appName", "state") if kind == "app_state" else ("appName", "userId", "state")
    record: dict[str, Any] = {"kind": kind}
    for name in fields:
        snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)
        value = data.get(name, data.get(snake))
        expected: type = dict if name == "state" else str
        if not isinstance(value, expected):
            raise BadInput(f"{where}: $.{name}: expected {'an object' if expected is dict else 'a string'}")
        record[name] = value
    return record


def check_times_record(data: dict[str, Any], where: str) -> tuple[tuple[str, str, str], float]:
    """A session_times line: (app, user, id) and its create time; BadInput naming a bad field."""
    key = []
    for name in ("appName", "userId", "sessionId"):
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise BadInput(f"{where}: $.{name}: expected a non-empty string")
        key.append(value)
    created = data.get("createTime")
    if not isinstance(created, (int, float)) or isinstance(created, bool) or not 0 <= created < 253402300800:
        raise BadInput(f"{where}: $.createTime: expected a time in epoch seconds")  # before year 10000, as ADK's
    return (key[0], key[1], key[2]), float(created)


def _fill_event_ids(session: ev.Session, where: str) -> None:
    from veadk_mem.sessions.rawsession import event_id

    seen: set[str] = set()
    for index, event in enumerate(session.events):
        if not event.id:
            event.id = event_id(session.app_name, session.user_id, session.id, index)
        if event.id in seen:
            raise BadInput(f"{where}: $.events[{index}].id: duplicate event id {event.id!r}")
        seen.add(event.id)


def fast_paths() -> bool:
    """`[tuning] fast_paths`: whether a record is read by `raw_session`'s walk before the models."""
    from veadk_mem.config import tuning  # see tests/test_import_graph.DEFERRED

    return tuning().fast_paths


def check_record(
    where: str, data: Any, limits: Limits | None, fast: bool | None = None
) -> tuple[str, RawSession | dict[str, Any]]:
    """(where, record) for one decoded record, validated: a RawSession or a state record dict.

    With `limits`, also every value the target database would refuse at write time. `fast`:
    `[tuning] fast_paths`, read here when None (a file's reader reads it once: looked up per
    record, the settings' freshness check cost a twentieth of an import).
    """
    from veadk_mem.events import STATE_RECORD_KINDS, parse_session
    from veadk_mem.sessions.rawsession import from_model, raw_session

    if isinstance(data, dict) and data.get("kind") in STATE_RECORD_KINDS:
        record = _check_state_record(data, where)
        if limits is not None:
            limits.check(where, data, None)
        return where, record
    if fast is None:
        fast = fast_paths()
    session = raw_session(data) if fast else None  # the common case, without pydantic objects
    if session is None:  # the models coerce it, or name what is wrong
        model = parse_session(data, where)
        for field_name, value in (("appName", model.app_name), ("userId", model.user_id), ("id", model.id)):
            if not value:
                raise BadInput(f"{where}: $.{field_name}: must not be empty")
        _fill_event_ids(model, where)
        session = from_model(model)
    if limits is not None:
        limits.check(where, data, session)
    return where, session
