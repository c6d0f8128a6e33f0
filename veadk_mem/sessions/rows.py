"""An import's view of each session of a batch: a head (key, stored times, event count), which is
all the writer decides on (is it stored already, is the stored one newer), and its split state."""

from __future__ import annotations

from typing import Any, NamedTuple

from veadk_mem.sessions.rawsession import RawSession


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


def head_of(session: RawSession, now: float) -> Head:
    """What the writer decides on for `session`: its key, its stored times, its size."""
    stamps = [e.timestamp for e in session.events]
    updated = session.last_update_time or (max(stamps) if stamps else now)
    created = session.create_time if session.create_time is not None else min([*stamps, updated])
    return Head(session.app_name, session.user_id, session.id, updated, created, len(stamps))
