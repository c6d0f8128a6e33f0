"""Session rows as stored (state not decoded) and event rows without a session (a killed import's
staging): what a delete finds beside what the reads give, and deletes whatever their content."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.sessions.big_writes import replaced_id, staged_of, staging_id
from veadk_mem.sessions.engine import sqlite_gap
from veadk_mem.sessions.layout import to_epoch
from veadk_mem.sessions.long_delete import SQLITE_LONG_STEP
from veadk_mem.sessions.records import SessionKey, SessionSummary

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database


def by_pair(summaries: Sequence[SessionSummary]) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for summary in summaries:
        found[(summary.app_name, summary.user_id)].append(summary.id)
    return found


class StoredRows:
    """Rows by key as stored: sessions whatever their state holds, ids by prefix, and events without
    a session row (`SessionStore.rows`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.delete_transactions = 0  # transactions committed by this store's session deletes (tests count them)

    async def sessions_by_id(self, prefix: str) -> list[SessionKey]:
        """The sessions, in any app and for any user, whose id is `prefix` or starts with it
        (git's short ids), read on the key columns alone: the exact id's sessions alone when it
        names one, else at most ID_CANDIDATES of those it begins, ordered by id."""
        from veadk_mem.sessions.read_queries import sessions_by_id

        return await sessions_by_id(self.db, prefix)

    async def stored_sessions(
        self, *, app: str | None = None, user: str | None = None, keys: Sequence[SessionKey] | None = None
    ) -> list[SessionSummary]:
        """Sessions by key as stored, their state not decoded (empty in the summaries), oldest update
        first: what a delete needs. A row whose state the reads cannot decode (corrupt JSON) is
        skipped by them, and was left by delete and forget, which then said nothing was there."""
        from sqlalchemy import and_, func, select

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        where: list[Any] = []
        if keys is not None and not keys:
            return []
        where.extend(self._exact(s.app_name, s.user_id, s.id, app, user, keys))
        counts = (
            select(e.app_name, e.user_id, e.session_id, func.count().label("n"))
            .group_by(e.app_name, e.user_id, e.session_id)
            .subquery()
        )
        joined = t.sessions.outerjoin(
            counts, and_(counts.c.app_name == s.app_name, counts.c.user_id == s.user_id, counts.c.session_id == s.id)
        )
        stmt = (
            select(s.app_name, s.user_id, s.id, s.create_time, s.update_time, counts.c.n)
            .select_from(joined)
            .where(*where)
            .order_by(s.update_time)
        )
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                rows = (await conn.execute(stmt)).all()
        return [SessionSummary(a, u, i, {}, int(n or 0), to_epoch(c), to_epoch(up)) for a, u, i, c, up, n in rows]

    # --- event rows without a session (a killed import's staging) ---------------------------

    def _orphan_rows(self, app: str | None, user: str | None, keys: Sequence[SessionKey] | None) -> Any:
        """The condition on `events` of the rows without a session row, among those of app / user / keys."""
        from sqlalchemy import and_, exists, select

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        where = [~exists(select(s.id).where(s.app_name == e.app_name, s.user_id == e.user_id, s.id == e.session_id))]
        if keys is not None:  # and the rows a long session's import staged for each key (`big_writes.staging_id`)
            keys = [
                *keys,
                *(SessionKey(k.app_name, k.user_id, name(k.id)) for k in keys for name in (staging_id, replaced_id)),
            ]
        where.extend(self._exact(e.app_name, e.user_id, e.session_id, app, user, keys))
        return and_(*where)

    def _exact(
        self, app_col: Any, user_col: Any, id_col: Any, app: str | None, user: str | None, keys: Any
    ) -> list[Any]:
        """Conditions for app / user / keys compared exactly (`Database.key_eq`: on MySQL/MariaDB byte
        for byte, never by a case-insensitive collation that takes "order-1" for "Order-1")."""
        from sqlalchemy import and_, or_

        eq = self.db.key_eq
        where: list[Any] = []
        if app is not None:
            where.append(eq(app_col, app))
        if user is not None:
            where.append(eq(user_col, user))
        if keys is not None:
            pairs = by_pair([SessionSummary(k.app_name, k.user_id, k.id, {}, 0, 0.0, 0.0) for k in keys])
            where.append(
                or_(
                    *(
                        and_(eq(app_col, a), eq(user_col, u), id_col.in_(ids), or_(*(eq(id_col, i) for i in ids)))
                        for (a, u), ids in pairs.items()
                    )
                )
            )
        return where

    async def orphan_events(
        self, *, app: str | None = None, user: str | None = None, keys: Sequence[SessionKey] | None = None
    ) -> dict[SessionKey, int]:
        """Event rows whose session row does not exist, counted by the key of their session: what a
        killed import leaves (sqlite: a long session's events staged under `big_writes.staging_id`,
        counted under the session's own key; by an older vmem, under the key itself, which ADK's
        get_session hands to a session later created under it)."""
        from sqlalchemy import func, select

        if keys is not None and not keys:
            return {}
        e = self.db.tables.events.c
        stmt = (
            select(e.app_name, e.user_id, e.session_id, func.count())
            .where(self._orphan_rows(app, user, keys))
            .group_by(e.app_name, e.user_id, e.session_id)
        )
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                found: dict[SessionKey, int] = {}
                for a, u, sid, n in await conn.execute(stmt):
                    key = SessionKey(a, u, staged_of(sid) or sid)  # staged rows are their session's
                    found[key] = found.get(key, 0) + int(n)
                return found

    async def delete_orphans(
        self, *, app: str | None = None, user: str | None = None, keys: Sequence[SessionKey] | None = None
    ) -> int:
        """Delete the event rows `orphan_events` finds, whatever their content; how many went.

        On sqlite in short transactions of `SQLITE_LONG_STEP` rows (with `sqlite_gap`'s pause),
        elsewhere in one statement. An import still writing such rows (staging) then finds its
        events gone and stops, its session row unwritten; run it again.
        """
        from sqlalchemy import delete, literal_column, select

        if keys is not None and not keys:
            return 0
        t = self.db.tables
        where = self._orphan_rows(app, user, keys)
        total = 0
        held = 0.0
        with self.db.failures():
            while True:
                if held:
                    await sqlite_gap(self.db.dialect, held)
                started = time.monotonic()
                async with self.db.engine.connect() as conn:
                    conn = await conn.execution_options(vmem_write=True)
                    async with conn.begin():
                        if self.db.dialect == "sqlite":
                            some: Any = select(literal_column("rowid")).where(where).limit(SQLITE_LONG_STEP)
                            stmt = delete(t.events).where(literal_column("rowid").in_(some.scalar_subquery()))
                        else:
                            stmt = delete(t.events).where(where)
                        gone = max((await conn.execute(stmt)).rowcount or 0, 0)
                total += gone
                held = time.monotonic() - started
                if self.db.dialect != "sqlite" or gone < SQLITE_LONG_STEP:
                    return total
