"""What changed in a session database since a position: for `vmem ltm sync`.

Two keyset reads, each its own short statement (no transaction is held between them, so an
agent appending meanwhile waits for one read at most):

- `changed_sessions`: the sessions whose row moved past a position (update time, then app, user,
  id), a page at a time, from the sessions table alone (no event is read or counted);
- `events_after`: a session's events after an event bound (timestamp, tie), a page at a time, on
  ADK's events index, as `session get` pages them.

Bounds are stored by the caller between runs: `encode_bound` / `decode_bound` turn an event
bound (a datetime, text or number as the layout holds it) into JSON text and back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from veadk_mem.sessions.layout import stored_time, to_epoch
from veadk_mem.sessions.notes import Notes
from veadk_mem.sessions.pages import EventPages
from veadk_mem.sessions.read_queries import MEMORY_FACTOR
from veadk_mem.sessions.records import batch_bytes

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.sessions.engine import Database


@dataclass(frozen=True)
class Change:
    """A session whose row changed: its key and its update time (epoch seconds)."""

    app_name: str
    user_id: str
    id: str
    update_time: float

    @property
    def position(self) -> tuple[float, str, str, str]:
        """Where a listing continues after this session."""
        return (self.update_time, self.app_name, self.user_id, self.id)


@dataclass
class EventPage:
    """A page of a session's events and the bound after its last one (JSON text, `encode_bound`)."""

    events: list[ev.Event]
    bound: str


def encode_bound(bound: tuple[Any, Any]) -> str:
    """An event bound (timestamp as read, tie) as JSON text a cursor file can keep."""
    stamp, tie = bound
    if isinstance(stamp, datetime):
        return json.dumps({"dt": stamp.isoformat(), "tie": tie})
    return json.dumps({"ts": stamp, "tie": tie})


def decode_bound(text: str) -> tuple[Any, Any]:
    """The bound `encode_bound` wrote."""
    data = json.loads(text)
    if "dt" in data:
        return datetime.fromisoformat(data["dt"]), data["tie"]
    return data["ts"], data["tie"]


class Changes:
    """The keyset reads of `vmem ltm sync` over one open database (`pages.EventPages` gives the event pages)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.events = EventPages(db, Notes())
        self.sql = self.events.sql

    def _listing_stmt(self, app: bool, user: bool) -> Any:
        """Sessions after the bound (b_time, b_app, b_user, b_id), oldest update first, b_limit of them."""
        from sqlalchemy import Integer, and_, bindparam, or_, select

        name = ("sync_listing", app, user)
        stmt = self.db.stmts.get(name)
        if stmt is None:
            s = self.db.tables.sessions.c
            t = bindparam("b_time", type_=s.update_time.type)
            a: Any = bindparam("b_app")
            u: Any = bindparam("b_user")
            i: Any = bindparam("b_id")
            after = or_(
                s.update_time > t,
                and_(
                    s.update_time == t,
                    or_(
                        s.app_name > a,
                        and_(s.app_name == a, or_(s.user_id > u, and_(s.user_id == u, s.id > i))),
                    ),
                ),
            )
            where = [s.update_time >= t, after]  # the first term is the range an index on update_time serves
            if app:
                where.append(self.db.key_eq(s.app_name, bindparam("f_app")))
            if user:
                where.append(self.db.key_eq(s.user_id, bindparam("f_user")))
            stmt = (
                select(s.app_name, s.user_id, s.id, self.sql.session_time(s.update_time, "update_time"))
                .where(*where)
                .order_by(s.update_time, s.app_name, s.user_id, s.id)
                .limit(bindparam("b_limit", type_=Integer))
            )
            self.db.stmts[name] = stmt
        return stmt

    async def changed_sessions(
        self,
        after: tuple[float, str, str, str],
        *,
        app: str | None = None,
        user: str | None = None,
        limit: int = 200,
    ) -> list[Change]:
        """Up to `limit` sessions (of `app`, `user`) whose (update time, app, user, id) is after `after`."""
        params: dict[str, Any] = {
            "b_time": stored_time(self.db.tables, after[0]),
            "b_app": after[1],
            "b_user": after[2],
            "b_id": after[3],
            "b_limit": limit,
        }
        if app is not None:
            params["f_app"] = app
        if user is not None:
            params["f_user"] = user
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                rows = (await conn.execute(self._listing_stmt(app is not None, user is not None), params)).all()
        return [Change(r.app_name, r.user_id, r.id, to_epoch(r.update_time)) for r in rows]

    async def count_after(self, app: str, user: str, session_id: str, bound: str | None) -> int:
        """How many events the session holds after `bound` (all of them without one): an index range count."""
        from sqlalchemy import and_, bindparam, func, or_, select

        name = ("sync_count", bound is not None)
        stmt = self.db.stmts.get(name)
        if stmt is None:
            where = self.events.one_session_events()
            if bound is not None:
                ts, tie = self.events.keyset_terms()
                b_ts, b_tie = bindparam("k_ts", type_=ts.type), bindparam("k_tie", type_=tie.type)
                where += [ts >= b_ts, or_(ts > b_ts, and_(ts == b_ts, tie > b_tie))]
            stmt = self.db.stmts[name] = select(func.count()).select_from(self.db.tables.events).where(*where)
        params: dict[str, Any] = {"k_app": app, "k_user": user, "k_id": session_id}
        if bound is not None:
            stamp, tie = decode_bound(bound)
            params |= {"k_ts": self.sql.cursor_time(stamp), "k_tie": tie}
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                return int((await conn.execute(stmt, params)).scalar() or 0)

    async def events_after(
        self, app: str, user: str, session_id: str, bound: str | None, *, page: int = 500
    ) -> AsyncIterator[EventPage]:
        """The session's events after `bound` (JSON text of `encode_bound`; None: from the first), oldest
        first, `page` at most a page (fewer after heavy events: about `[tuning] batch_bytes` of memory)
        and each page its own short read. Events appended while the pages
        are read are read too: the pages end where the session ends when the last one is read."""
        from veadk_mem import events as ev

        budget = batch_bytes() // MEMORY_FACTOR
        base: dict[str, Any] = {"k_app": app, "k_user": user, "k_id": session_id}
        limit = page
        while True:
            with self.db.failures():
                async with self.db.reader.connect() as conn:
                    if bound is None:
                        stmt, params = self.events.page_stmt(False), base
                    else:
                        stamp, tie = decode_bound(bound)
                        index = await self.events.mysql_events_index(conn)
                        stmt = self.events.page_stmt(True, index)
                        params = {**base, "k_ts": self.sql.cursor_time(stamp), "k_tie": tie}
                    rows = await self.events.page_rows(conn, stmt, params, limit)
            items, weight, cursor = self.events.decoded_page(app, user, session_id, rows, ev.Event.model_validate)
            if cursor is None:
                return
            bound = encode_bound(cursor)
            yield EventPage(items, bound)
            if len(rows) < limit:
                return
            # pages after heavy events hold fewer: memory stays about `[tuning] batch_bytes` whatever their size
            limit = max(1, min(page, budget // max(weight // len(items), 1)))
