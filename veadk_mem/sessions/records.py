"""What the session store hands out: keys, filters, summaries, delete and import reports."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.sessions.rawsession import RawSession


Progress = Callable[[int], None]
BATCH = 500  # rows per IN list, statement batch and partition
# An export reads a session of more events than this a page at a time: read whole, its rows, events
# and line would all be in memory at once; below it, a whole read in one short transaction, with
# the next batch read ahead meanwhile, costs fewer statements.
PAGED_EVENTS = 20_000
BATCH_BYTES = 64 << 20  # see batch_bytes()


def batch_bytes() -> int:
    """About how much memory a read's batch of events may take (their rows, decoded data and JSON
    text; batches read ahead included): an export's batches, a paged session read's pages and
    upgrade's pages close at it as well as at their row counts, so a run of 1 MB events is read a
    few at a time, not thousands. `[tuning] batch_bytes` (`VMEM_BATCH_BYTES`)."""
    from veadk_mem.config import tuning  # the settings models (pydantic): loaded once a command runs

    return tuning().batch_bytes


def noop(n: int = 1) -> None:
    """A progress callback that does nothing."""


@dataclass(frozen=True)
class SessionKey:
    """What identifies a session in ADK: app, user and session id."""

    app_name: str
    user_id: str
    id: str

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}/{self.id}"


@dataclass
class SessionFilter:
    """Which sessions: by app, user, and update time.

    since / until are epoch seconds (since inclusive, until exclusive); older_than is a
    number of seconds, meaning "not updated since that long ago", resolved when used.
    """

    app: str | None = None
    user: str | None = None
    since: float | None = None
    until: float | None = None
    older_than: float | None = None

    def resolved(self) -> SessionFilter:
        """The same filter with older_than folded into until, against the clock now."""
        if self.older_than is None:
            return self
        cutoff = time.time() - self.older_than
        until = cutoff if self.until is None else min(self.until, cutoff)
        return SessionFilter(app=self.app, user=self.user, since=self.since, until=until)


@dataclass
class SessionSummary:
    """One session without its events: merged state, event count and times (epoch seconds)."""

    app_name: str
    user_id: str
    id: str
    state: dict[str, Any]
    event_count: int
    create_time: float
    update_time: float
    session_state_keys: int = 0
    compaction_count: int | None = None  # ADK context compactions among the events; None: unknown (v0)

    @property
    def key(self) -> SessionKey:
        return SessionKey(self.app_name, self.user_id, self.id)

    def to_json(self, *, compactions: bool = False) -> dict[str, Any]:
        """ADK's list_sessions item (no events) plus eventCount and createTime; with `compactions`
        (the count was asked for) compactionCount too, null where it is unknown (v0)."""
        out = {
            "id": self.id,
            "appName": self.app_name,
            "userId": self.user_id,
            "state": self.state,
            "lastUpdateTime": self.update_time,
            "eventCount": self.event_count,
        }
        if compactions:
            out["compactionCount"] = self.compaction_count
        out["createTime"] = self.create_time
        return out


@dataclass
class DeleteReport:
    """What a delete removed (or, with dry_run, would remove)."""

    sessions: list[SessionSummary]
    events: int
    app_states: list[str] = field(default_factory=list)
    user_states: list[tuple[str, str]] = field(default_factory=list)
    dry_run: bool = False
    skipped: list[SessionKey] = field(default_factory=list)  # changed since listed: kept
    orphan_events: int = 0  # event rows without a session row (a killed import's staging), of the same keys

    def to_json(self) -> dict[str, Any]:
        """`session delete --json`: vmem's own report, in snake_case like every vmem report."""
        return {
            "dry_run": self.dry_run,
            "sessions": [{"app_name": s.app_name, "user_id": s.user_id, "id": s.id} for s in self.sessions],
            "session_count": len(self.sessions),
            "event_count": self.events,
            "app_states": self.app_states,
            "user_states": [{"app_name": a, "user_id": u} for a, u in self.user_states],
            "skipped": [{"app_name": k.app_name, "user_id": k.user_id, "id": k.id} for k in self.skipped],
            "orphan_events": self.orphan_events,
        }


@dataclass
class ImportReport:
    """What an import wrote (sessions counts only committed ones)."""

    sessions: int = 0
    events: int = 0
    app_states: int = 0
    user_states: int = 0
    layout: str = ""
    created_tables: bool = False
    replaced: int = 0  # sessions that were already there and were written over, not duplicated
    skipped: list[str] = field(default_factory=list)  # sessions newer in the database (see --force)
    dry_run: bool = False  # checked and counted; nothing written
    warnings: list[str] = field(default_factory=list)  # fields an old layout could not hold, ...

    def to_json(self) -> dict[str, Any]:
        """`session import --json`: vmem's own report, in snake_case like every vmem report."""
        return {
            "dry_run": self.dry_run,
            "sessions": self.sessions,
            "replaced": self.replaced,
            "events": self.events,
            "app_states": self.app_states,
            "user_states": self.user_states,
            "layout": self.layout,
            "created_tables": self.created_tables,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class FileKey:
    """One session of an import file: its key, its lastUpdateTime, and where it is."""

    app_name: str
    user_id: str
    id: str
    update_time: float
    where: str

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}/{self.id}"


def file_update_time(session: ev.Session | RawSession) -> float:
    """The update time an import stores for `session`: lastUpdateTime, else its newest event."""
    stamps = [e.timestamp for e in session.events]
    return session.last_update_time or (max(stamps) if stamps else 0.0)


def cut_batches(summaries: list[SessionSummary], sessions: int, events: int) -> list[list[SessionSummary]]:
    """`summaries` cut into batches of at most `sessions` sessions and about `events` events."""
    out: list[list[SessionSummary]] = []
    current: list[SessionSummary] = []
    size = 0
    for summary in summaries:
        if current and (len(current) >= sessions or size + summary.event_count > events):
            out.append(current)
            current, size = [], 0
        current.append(summary)
        size += summary.event_count
    if current:
        out.append(current)
    return out
