"""`vmem ltm sync`'s durable cursor: a sqlite file in vmem's data directory (`[tuning] sync_cursor`).

Per session database (its masked URL) and scope (the --app and --user a sync runs with, '' for
any), the position a listing continues from: the last (update time, app, user, session id)
synced, with running counts. Per session, what has been saved of it: the bound after the last
event saved (`changes.encode_bound`), how many events and memories, when it was last saved
(VeADK's `last_save_time`), and since when a change is held back by VeADK's thresholds.

Every write is its own short transaction, committed after the store acknowledged what it
records: a kill -9 at any point leaves a cursor behind what the store holds, never ahead, so a
restart reads again at most one page of one session, whose memories the content hashes (or the
replay ledger) skip.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from veadk_mem.errors import VmemError
from veadk_mem.files import open_private_sqlite

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS position (
        db TEXT NOT NULL, app TEXT NOT NULL, user_id TEXT NOT NULL,
        update_time REAL NOT NULL, s_app TEXT NOT NULL, s_user TEXT NOT NULL, s_id TEXT NOT NULL,
        synced_at REAL NOT NULL,
        sessions INTEGER NOT NULL DEFAULT 0, events INTEGER NOT NULL DEFAULT 0,
        memories INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (db, app, user_id))""",
    """CREATE TABLE IF NOT EXISTS session (
        db TEXT NOT NULL, app TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        seen_update REAL NOT NULL, bound TEXT, events_saved INTEGER NOT NULL DEFAULT 0,
        memories INTEGER NOT NULL DEFAULT 0, last_save REAL, held_since REAL, error TEXT,
        PRIMARY KEY (db, app, user_id, session_id))""",
    "CREATE INDEX IF NOT EXISTS session_held ON session (db, held_since) WHERE held_since IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS session_user ON session (db, app, user_id, seen_update)",
)
BUSY_TIMEOUT = 30.0  # seconds a write waits for another sync's on the same file


class CursorError(VmemError):
    """The cursor file cannot be used (damaged, not vmem's, locked): exit 1, naming the file."""


@dataclass(frozen=True)
class Position:
    """Where a scope's listing continues, and what the syncs of that scope did so far."""

    update_time: float
    app_name: str
    user_id: str
    session_id: str
    synced_at: float
    sessions: int = 0
    events: int = 0
    memories: int = 0
    failed: int = 0

    @property
    def key(self) -> tuple[float, str, str, str]:
        return (self.update_time, self.app_name, self.user_id, self.session_id)


START = (0.0, "", "", "")  # before every session


@dataclass(frozen=True)
class SessionMark:
    """What sync saved of one session so far."""

    app_name: str
    user_id: str
    session_id: str
    seen_update: float
    bound: str | None
    events_saved: int
    memories: int
    last_save: float | None
    held_since: float | None
    error: str | None


P = ParamSpec("P")
R = TypeVar("R")


def _guarded(method: Callable[Concatenate[SyncCursor, P], R]) -> Callable[Concatenate[SyncCursor, P], R]:
    """sqlite's and the file system's errors on the cursor file as one CursorError naming the file."""

    @functools.wraps(method)
    def run(self: SyncCursor, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise CursorError(
                f"{self.path}: cannot use the sync cursor: {exc}",
                hint="move the file aside to start over (memories already saved are skipped by content hash)",
            ) from None
        except OSError as exc:  # its directory cannot be made, a full disk, no permission
            self.close()
            raise CursorError(f"{self.path}: cannot use the sync cursor: {exc.strerror or exc}") from None

    return run


MARK_COLUMNS = "app, user_id, session_id, seen_update, bound, events_saved, memories, last_save, held_since, error"


class SyncCursor:
    """The cursor file of one session database (`db`: its masked URL), opened on first use."""

    def __init__(self, path: Path, db: str) -> None:
        self.path = path
        self.db = db
        self._conn: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            # it names users and sessions: 0600, and its -wal too. WAL + NORMAL: a commit survives a
            # killed process; an OS crash may lose the last few, which leaves the cursor behind the
            # store (read again, skipped by hash), never ahead
            self._conn = open_private_sqlite(self.path, BUSY_TIMEOUT, _schema, pragmas=("synchronous=NORMAL",))
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @_guarded
    def check(self) -> None:
        """Open the file and read it once: a damaged or foreign file fails before anything is saved."""
        self._open().execute("SELECT count(*) FROM position").fetchone()

    @_guarded
    def adopt(self, older: str) -> None:
        """Take over the rows kept under an older key of the same database (the displayed URL
        earlier versions used), unless this key has rows of its own: one transaction."""
        conn = self._open()
        conn.execute("BEGIN IMMEDIATE")
        try:
            mine = conn.execute("SELECT 1 FROM position WHERE db=? LIMIT 1", (self.db,)).fetchone()
            if mine is None:
                for table in ("position", "session"):
                    conn.execute(f"UPDATE OR IGNORE {table} SET db=? WHERE db=?", (self.db, older))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # --- positions ---------------------------------------------------------------------

    @_guarded
    def position(self, app: str, user: str) -> Position | None:
        """The scope's position (None: never synced)."""
        row = (
            self._open()
            .execute(
                "SELECT update_time, s_app, s_user, s_id, synced_at, sessions, events, memories, failed"
                " FROM position WHERE db=? AND app=? AND user_id=?",
                (self.db, app, user),
            )
            .fetchone()
        )
        return Position(*row) if row else None

    @_guarded
    def positions(self) -> list[tuple[str, str, Position]]:
        """Every scope of this database: (app, user, position)."""
        rows = self._open().execute(
            "SELECT app, user_id, update_time, s_app, s_user, s_id, synced_at, sessions, events, memories, failed"
            " FROM position WHERE db=? ORDER BY app, user_id",
            (self.db,),
        )
        return [(r[0], r[1], Position(*r[2:])) for r in rows]

    @_guarded
    def advance(
        self,
        app: str,
        user: str,
        key: tuple[float, str, str, str],
        *,
        sessions: int,
        events: int,
        memories: int,
        failed: int,
    ) -> None:
        """Move the scope's position to `key` (never back) and add the counts."""
        conn = self._open()
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            old = conn.execute(
                "SELECT update_time, s_app, s_user, s_id FROM position WHERE db=? AND app=? AND user_id=?",
                (self.db, app, user),
            ).fetchone()
            new = max(tuple(old), key) if old else key
            conn.execute(
                "INSERT INTO position (db, app, user_id, update_time, s_app, s_user, s_id, synced_at,"
                " sessions, events, memories, failed) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT (db, app, user_id) DO UPDATE SET update_time=excluded.update_time,"
                " s_app=excluded.s_app, s_user=excluded.s_user, s_id=excluded.s_id, synced_at=excluded.synced_at,"
                " sessions=sessions+excluded.sessions, events=events+excluded.events,"
                " memories=memories+excluded.memories, failed=failed+excluded.failed",
                (self.db, app, user, *new, now, sessions, events, memories, failed),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # --- sessions ----------------------------------------------------------------------

    @_guarded
    def mark(self, app: str, user: str, session_id: str) -> SessionMark | None:
        """What sync saved of the session (None: nothing yet)."""
        row = (
            self._open()
            .execute(
                f"SELECT {MARK_COLUMNS} FROM session WHERE db=? AND app=? AND user_id=? AND session_id=?",
                (self.db, app, user, session_id),
            )
            .fetchone()
        )
        return SessionMark(*row) if row else None

    def _upsert(self, app: str, user: str, session_id: str, values: dict[str, Any]) -> None:
        conn = self._open()
        names = ", ".join(values)
        marks = ", ".join("?" * len(values))
        updates = ", ".join(f"{k}=excluded.{k}" for k in values)
        conn.execute(
            f"INSERT INTO session (db, app, user_id, session_id, {names}) VALUES (?,?,?,?,{marks})"
            f" ON CONFLICT (db, app, user_id, session_id) DO UPDATE SET {updates}",
            (self.db, app, user, session_id, *values.values()),
        )

    @_guarded
    def saved_page(
        self, app: str, user: str, session_id: str, *, seen: float, bound: str, events: int, memories: int
    ) -> None:
        """A page of the session's events is in the store: the bound moves after it (one commit)."""
        old = self.mark(app, user, session_id)
        self._upsert(
            app,
            user,
            session_id,
            {
                "seen_update": old.seen_update if old else seen,
                "bound": bound,
                "events_saved": (old.events_saved if old else 0) + events,
                "memories": (old.memories if old else 0) + memories,
            },
        )

    @_guarded
    def saved(self, app: str, user: str, session_id: str, *, seen: float, at: float) -> None:
        """Everything up to the session's update time `seen` is saved: nothing is held any more."""
        self._upsert(app, user, session_id, {"seen_update": seen, "last_save": at, "held_since": None, "error": None})

    @_guarded
    def hold(self, app: str, user: str, session_id: str, *, seen: float, since: float) -> None:
        """The session changed (up to `seen`) but VeADK's thresholds say not yet: held since `since`."""
        old = self.mark(app, user, session_id)
        held = since if old is None or old.held_since is None else min(old.held_since, since)
        self._upsert(app, user, session_id, {"seen_update": seen, "held_since": held})

    @_guarded
    def failed(self, app: str, user: str, session_id: str, *, seen: float, error: str) -> None:
        """The session could not be saved (`error`): not tried again until it changes."""
        self._upsert(app, user, session_id, {"seen_update": seen, "held_since": None, "error": error})

    @_guarded
    def held(
        self, *, due_before: float, app: str | None = None, user: str | None = None, limit: int = 200
    ) -> list[SessionMark]:
        """Held sessions to save now: last saved before `due_before` (VeADK's time threshold passed),
        or whose user has a newer session (VeADK saves the previous session when the user moves on)."""
        where, params = ["h.db=?", "h.held_since IS NOT NULL"], [self.db]
        if app is not None:
            where.append("h.app=?")
            params.append(app)
        if user is not None:
            where.append("h.user_id=?")
            params.append(user)
        rows = self._open().execute(
            f"SELECT {', '.join('h.' + c.strip() for c in MARK_COLUMNS.split(','))} FROM session h"
            f" WHERE {' AND '.join(where)} AND (coalesce(h.last_save, 0) <= ? OR EXISTS ("
            "SELECT 1 FROM session n WHERE n.db=h.db AND n.app=h.app AND n.user_id=h.user_id"
            " AND n.session_id<>h.session_id AND n.seen_update>h.seen_update))"
            " ORDER BY h.held_since LIMIT ?",
            (*params, due_before, limit),
        )
        return [SessionMark(*r) for r in rows]

    @_guarded
    def newer_session(self, app: str, user: str, session_id: str, than: float) -> bool:
        """Whether the user has another session seen with a later update time (the user moved on)."""
        row = (
            self._open()
            .execute(
                "SELECT 1 FROM session WHERE db=? AND app=? AND user_id=? AND session_id<>? AND seen_update>? LIMIT 1",
                (self.db, app, user, session_id, than),
            )
            .fetchone()
        )
        return row is not None

    @_guarded
    def summary(self, app: str | None = None, user: str | None = None) -> dict[str, Any]:
        """Counts over the sessions of this database (of `app`, `user`): tracked, held, failed, the
        oldest held change, events and memories saved."""
        where, params = ["db=?"], [self.db]
        if app is not None:
            where.append("app=?")
            params.append(app)
        if user is not None:
            where.append("user_id=?")
            params.append(user)
        row = (
            self._open()
            .execute(
                "SELECT count(*), count(held_since), count(error), min(held_since),"
                f" coalesce(sum(events_saved), 0), coalesce(sum(memories), 0) FROM session WHERE {' AND '.join(where)}",
                params,
            )
            .fetchone()
        )
        keys = ("sessions", "held", "failed", "oldest_held", "events_saved", "memories_saved")
        return dict(zip(keys, row, strict=True))


def _schema(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA:
        conn.execute(statement)
