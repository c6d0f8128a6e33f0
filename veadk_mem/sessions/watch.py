"""Follow a live session: the events an agent appends, as it appends them.

A poll reads the events after the last one seen, by `(timestamp, id)`, in one short
autocommit read that uses ADK's own index (app, user, session, timestamp, id): nothing is
held between polls, so the agent's writes never wait on a watcher. Idle polls back off up
to a ceiling; an event brings the interval back down. Without a session id the user's
newest session (by creation) is followed, switching when a newer one starts.

A lost connection (database restart) is reported once and retried with the same backoff;
a deleted session ends the watch with NotFound (exit 3).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import NotFound, StoreError, VmemError
from veadk_mem.sessions.codec import event_from_row
from veadk_mem.sessions.layout import Layout, stored_time
from veadk_mem.sessions.read_queries import elsewhere_hint, keys_by_id
from veadk_mem.sessions.statements import Statements

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database

_PAGE = 500  # events a poll reads at most; a burst is drained without waiting between pages


@dataclass
class Notice:
    """Something the watcher tells the person (stderr), not an event."""

    kind: str  # "session" (now following), "waiting", "lost", "back"
    text: str
    session_id: str | None = None


@dataclass
class WatchEvent:
    """One appended event as ADK stored it (snake_case data), with the session it belongs to."""

    session_id: str
    data: dict[str, Any]
    position: int = 0  # the event's place in its session (1: the first), as `session get` numbers it


class Watcher:
    """Polls one session (or a user's newest) for new events."""

    def __init__(
        self,
        db: Database,
        app: str,
        user: str,
        session_id: str | None = None,
        *,
        since: float | None = None,
        last: int | None = None,
        interval: float = 0.5,
        max_interval: float = 5.0,
    ) -> None:
        self.db = db
        self.sql = Statements(db)
        self._warnings: list[str] = []  # met since `take_warnings` last gave them
        self.app = app
        self.user = user
        self.fixed = session_id
        self.session_id = session_id
        self.since = since
        self.last = last  # events already there to show first (None: all, or those since `since`)
        self._shown_last = last or 0
        self.interval = interval
        self.max_interval = max(max_interval, interval)
        self._cursor: tuple[Any, str] | None = None
        self._position: int | None = None  # the place in the session of the last event read; None: not counted yet
        self._started = False
        self.stopping = asyncio.Event()  # set by stop(): follow() ends after the poll in flight
        self._stmts: dict[str, Any] = {}

    # --- statements --------------------------------------------------------------------------

    def _keys(self, columns: Any) -> list[Any]:
        from sqlalchemy import bindparam

        key_eq = self.db.key_eq
        return [key_eq(columns.app_name, bindparam("k_app")), key_eq(columns.user_id, bindparam("k_user"))]

    def _stmt(self, name: str) -> Any:
        """The cached statements: events after a cursor, the last N, the session row, the newest session."""
        from sqlalchemy import Integer, and_, bindparam, func, literal_column, or_, select

        stmt = self._stmts.get(name)
        if stmt is not None:
            return stmt
        t = self.db.tables
        e, s = t.events.c, t.sessions.c
        # event_data as text, decoded per row in _events: a corrupt one is then skipped, not a failed poll
        raw = t.layout is Layout.V1
        cols = [self.sql.raw_json(c, c.name) if raw and c.name == "event_data" else c for c in t.events.c]
        cols.append(e.timestamp.label("_cursor_ts"))
        mine = [*self._keys(e), e.session_id == bindparam("k_id")]
        if name == "after":
            after = or_(
                e.timestamp > bindparam("c_ts", type_=e.timestamp.type),
                and_(e.timestamp == bindparam("c_ts", type_=e.timestamp.type), e.id > bindparam("c_id")),
            )
            stmt = select(*cols).where(*mine, after).order_by(e.timestamp, e.id).limit(_PAGE)
        elif name == "since":
            since = e.timestamp >= bindparam("c_ts", type_=e.timestamp.type)
            stmt = select(*cols).where(*mine, since).order_by(e.timestamp, e.id).limit(_PAGE)
        elif name == "first":
            stmt = select(*cols).where(*mine).order_by(e.timestamp, e.id).limit(_PAGE)
        elif name == "last":
            inner = (
                select(*cols)
                .where(*mine)
                .order_by(e.timestamp.desc(), e.id.desc())
                .limit(bindparam("k_last", type_=Integer))
                .subquery()
            )
            stmt = select(inner).order_by(inner.c.timestamp, inner.c.id)
        elif name == "before":  # how many events come before one: its place in the session, minus one
            before = or_(
                e.timestamp < bindparam("c_ts", type_=e.timestamp.type),
                and_(e.timestamp == bindparam("c_ts", type_=e.timestamp.type), e.id < bindparam("c_id")),
            )
            stmt = select(func.count()).select_from(t.events).where(*mine, before)
        elif name == "exists":
            stmt = select(literal_column("1")).where(*self._keys(s), s.id == bindparam("k_id"))
        else:  # newest
            stmt = select(s.id).where(*self._keys(s)).order_by(s.create_time.desc(), s.id.desc()).limit(1)
        self._stmts[name] = stmt
        return stmt

    # --- one poll ------------------------------------------------------------------------------

    async def _newest(self, conn: Any) -> str | None:
        row = (await conn.execute(self._stmt("newest"), {"k_app": self.app, "k_user": self.user})).first()
        return None if row is None else str(row[0])

    async def _exists(self, conn: Any, session_id: str) -> bool:
        params = {"k_app": self.app, "k_user": self.user, "k_id": session_id}
        return (await conn.execute(self._stmt("exists"), params)).first() is not None

    async def _read(self, conn: Any) -> list[Any]:
        """The next page of events of the followed session after the cursor."""
        params: dict[str, Any] = {"k_app": self.app, "k_user": self.user, "k_id": self.session_id}
        if self._cursor is not None:
            params["c_ts"], params["c_id"] = self._cursor
            return list(await conn.execute(self._stmt("after"), params))
        if self.since is not None:
            params["c_ts"] = stored_time(self.db.tables, self.since)
            return list(await conn.execute(self._stmt("since"), params))
        if self.last is not None:
            # one more than shown: the cursor starts at the session's tail even for --events 0
            params["k_last"] = self.last + 1
            rows = list(await conn.execute(self._stmt("last"), params))
            self.last = None
            if rows:
                skipped = rows[: len(rows) - min(len(rows), self._shown_last)]
                if skipped:
                    self._cursor = (skipped[-1]._cursor_ts, skipped[-1].id)
                return rows[len(skipped) :]
            return rows
        return list(await conn.execute(self._stmt("first"), params))

    async def _count_before(self, conn: Any, rows: list[Any]) -> None:
        """Learn the place of the first event read in its session (once per session followed):
        the events before it, counted by the same (timestamp, id) order the reads use."""
        if self._position is not None or not (rows or self._cursor):
            return
        ts, event_id = (rows[0]._cursor_ts, rows[0].id) if rows else self._cursor  # type: ignore[misc]
        params = {"k_app": self.app, "k_user": self.user, "k_id": self.session_id, "c_ts": ts, "c_id": event_id}
        before = int((await conn.execute(self._stmt("before"), params)).scalar_one())
        self._position = before if rows else before + 1  # no rows: the cursor's own event was counted out

    async def poll(self) -> list[WatchEvent | Notice]:
        """One short read: the session to follow (newest, when none was named) and its new events."""
        out: list[WatchEvent | Notice] = []
        async with self.db.reader.connect() as conn:
            if self.fixed is not None and not self._started:
                if not await self._exists(conn, self.fixed):
                    where = self.db.display_url
                    elsewhere = await keys_by_id(self.db, conn, self.fixed, exact=True)
                    raise NotFound(
                        f"session {self.app}/{self.user}/{self.fixed}: not found in {where}",
                        hint=elsewhere_hint(self.fixed, elsewhere),
                    )
                self._started = True
                out.append(Notice("session", f"following session {self.fixed}", self.fixed))
            if self.fixed is None:
                newest = await self._newest(conn)
                if newest is not None and newest != self.session_id:
                    if self.session_id is not None:
                        # the old session's tail first: appended between the last poll and the switch
                        tail = await self._read(conn)
                        await self._count_before(conn, tail)
                        out += self._events(tail)
                        self._cursor, self.last, self.since = None, None, None  # a new session: all of it
                        self._position = None
                    self.session_id = newest
                    out.append(Notice("session", f"following session {newest}", newest))
                if self.session_id is None:
                    return out
            rows = await self._read(conn)
            if not rows and not await self._exists(conn, self.session_id or ""):
                raise NotFound(f"session {self.app}/{self.user}/{self.session_id}: not found (deleted?)")
            await self._count_before(conn, rows)
        out += self._events(rows)
        return out

    def _events(self, rows: list[Any]) -> list[WatchEvent | Notice]:
        tables, warnings = self.db.tables, self._warnings
        out: list[WatchEvent | Notice] = []
        for row in rows:
            self._cursor = (row._cursor_ts, row.id)
            self._position = (self._position or 0) + 1
            try:
                data = event_from_row(tables, row, warnings)
            except (ValueError, TypeError, AttributeError) as exc:  # said, skipped: the watch goes on
                warnings.append(
                    f"session {self.app}/{self.user}/{self.session_id}: event {row.id} is not readable "
                    f"({type(exc).__name__}); skipped"
                )
                continue
            out.append(WatchEvent(self.session_id or "", data, self._position))
        return out

    # --- the loop --------------------------------------------------------------------------------

    def take_warnings(self) -> list[str]:
        """The warnings met since the last call (an unreadable event skipped), each once."""
        taken, self._warnings = list(dict.fromkeys(self._warnings)), []
        return taken

    def stop(self) -> None:
        """End follow() cleanly after the poll in flight (a signal handler calls this on Ctrl-C)."""
        self.stopping.set()

    async def _pause(self, seconds: float) -> None:
        """Sleep between polls, cut short by stop()."""
        import contextlib

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def follow(self) -> AsyncIterator[list[WatchEvent | Notice]]:
        """What each poll found (events and notices, in order) until stop(); NotFound when
        the followed session is deleted. Idle polls yield nothing."""
        import contextlib

        delay = self.interval
        lost = False
        waiting_said = False
        while not self.stopping.is_set():
            try:
                items = await self.poll()
            except NotFound:
                raise
            except Exception as exc:  # a dropped connection: the driver's own error, or described
                if isinstance(exc, VmemError) and not isinstance(exc, StoreError):
                    raise
                problem = exc if isinstance(exc, VmemError) else self.db.fail(exc)
                with contextlib.suppress(Exception):
                    # a new pool; the old one's connections are dead, and closing them politely
                    # could wait on a server that is gone
                    await self.db.engine.dispose(close=False)
                if not lost:
                    lost = True
                    yield [Notice("lost", f"{problem}; retrying until it is back")]
                await self._pause(delay)
                delay = min(self.max_interval, delay * 1.5)
                continue
            if lost:
                lost = False
                yield [Notice("back", "database reachable again: following on")]
            if self.session_id is None and not waiting_said:
                waiting_said = True
                yield [Notice("waiting", f"{self.app}/{self.user}: no session yet; waiting for one")]
            if items:
                yield items
            found = sum(isinstance(i, WatchEvent) for i in items)
            if found >= _PAGE:
                continue  # a burst: read the rest now
            delay = self.interval if found else min(self.max_interval, delay * 1.5)
            await self._pause(delay)
