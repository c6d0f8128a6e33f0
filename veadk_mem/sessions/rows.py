"""An import's rows a batch at a time: the writer's view of each session, and the columns.

Each session of a batch is reduced to a head (key, stored times, event count), which is
all the writer decides on (is it stored already, is the stored one newer), and its rows
are built column by column: each event's stored JSON text, each session's own state as
text, times as epoch seconds (`driver.InsertPlan.rows` converts them for its columns).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, NamedTuple

from veadk_mem.jsonio import adk_text, compact_json
from veadk_mem.sessions.rawsession import RawSession
from veadk_mem.sessions.state_scopes import split_state


class Head(NamedTuple):
    """What the writer decides a session on: its key, its stored times, its event count."""

    app_name: str
    user_id: str
    id: str
    update_time: float
    create_time: float
    events: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.app_name, self.user_id, self.id)


class Split(NamedTuple):
    """A session's state as `split_state` divides it: the app's, the user's and its own part."""

    app: dict[str, Any]
    user: dict[str, Any]
    own: dict[str, Any]


# The JSON text of (events, states) as each ADK service writes it: DatabaseSessionService's DynamicJSON
# `json.dumps` on sqlite and MySQL ("v1"), SqliteSessionService's `model_dump_json` for events
# ("service"); PostgreSQL parses it into JSONB, so there the fast encoder's text is the same row.
TEXTS: dict[str, tuple[Callable[[Any], str], Callable[[Any], str]]] = {
    "v1": (adk_text, adk_text),
    "service": (compact_json, adk_text),
    "jsonb": (compact_json, compact_json),
}


def text_style(dialect: str, sqlite_service: bool) -> str:
    """The TEXTS key for a database: its dialect, and whether it holds SqliteSessionService's tables."""
    if sqlite_service:
        return "service"
    return "jsonb" if dialect == "postgresql" else "v1"


def head_of(session: RawSession, now: float) -> Head:
    """What the writer decides on for `session`: its key, its stored times, its size."""
    stamps = [e.timestamp for e in session.events]
    updated = session.last_update_time or (max(stamps) if stamps else now)
    created = session.create_time if session.create_time is not None else min([*stamps, updated])
    return Head(session.app_name, session.user_id, session.id, updated, created, len(stamps))


@dataclass(slots=True)
class Columns:
    """One batch: heads and state records in file order, and the rows' columns (JSON as text)."""

    records: list[Head | dict[str, Any]] = field(default_factory=list)
    splits: list[Split] = field(default_factory=list)
    sessions: dict[str, list[Any]] = field(default_factory=dict)
    events: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def heads(self) -> list[Head]:
        return [r for r in self.records if not isinstance(r, dict)]

    def to_frame(self) -> tuple[Any, ...]:
        """The batch as plain containers, for the import's reader process to send (`import_child`)."""
        records = [r if isinstance(r, dict) else tuple(r) for r in self.records]
        return records, [tuple(s) for s in self.splits], self.sessions, self.events

    @classmethod
    def from_frame(cls, frame: tuple[Any, ...]) -> Columns:
        """A batch from `to_frame`'s containers."""
        records, splits, sessions, events = frame
        heads = [r if isinstance(r, dict) else Head(*r) for r in records]
        return cls(heads, [Split(*s) for s in splits], sessions, events)


def heads_of(records: list[RawSession | dict[str, Any]]) -> tuple[list[Head | dict[str, Any]], list[Split]]:
    """`records` with each session replaced by its head (state records as they are), and each session's split state."""
    now = time.time()
    sessions = [r for r in records if not isinstance(r, dict)]
    heads = iter([head_of(s, now) for s in sessions])
    return [r if isinstance(r, dict) else next(heads) for r in records], [
        Split(*split_state(s.state)) for s in sessions
    ]


def build_columns(records: list[RawSession | dict[str, Any]], style: str) -> Columns:
    """The columns of `records` (checked sessions and state records), in ADK's v1 / sqlite layout,
    JSON as text in `style` (TEXTS)."""
    event_text, state_text = TEXTS[style]
    out = Columns()
    sessions = [r for r in records if not isinstance(r, dict)]
    out.records, out.splits = heads_of(records)
    session_heads = out.heads
    out.sessions = {
        "app_name": [s.app_name for s in sessions],
        "user_id": [s.user_id for s in sessions],
        "id": [s.id for s in sessions],
        "state": [state_text(split.own) for split in out.splits],
        "create_time": [h.create_time for h in session_heads],
        "update_time": [h.update_time for h in session_heads],
    }
    events = [e for s in sessions for e in s.events]
    counts = [len(s.events) for s in sessions]

    def each(values: list[str]) -> list[str]:  # one value per event, from one per session
        return list(chain.from_iterable(map(repeat, values, counts)))

    out.events = {
        "id": [e.id for e in events],
        "app_name": each(out.sessions["app_name"]),
        "user_id": each(out.sessions["user_id"]),
        "session_id": each(out.sessions["id"]),
        "invocation_id": [e.invocation_id for e in events],
        "timestamp": [e.timestamp for e in events],
        "event_data": [event_text(e.data) for e in events],
    }
    return out
