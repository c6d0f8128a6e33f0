"""The app and user state rows a delete leaves without any session (`--purge-state`), deleted without
racing an agent's create_session."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from veadk_mem.sessions.records import BATCH, DeleteReport, SessionSummary
from veadk_mem.sessions.stored_rows import by_pair

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database

PURGE_LOCK_TIMEOUT = 10  # seconds --purge-state waits for the state tables' lock (PostgreSQL, MySQL)
# Seconds after the purge at which vmem looks for a session a create made meanwhile (sqlite): a
# create that waited on the purge's write lock is usually done by the first; a busy machine's, by the last.
SQLITE_CREATE_WAITS = (0.3, 1.0)


class StatePurge:
    """The state rows left orphaned by deleted sessions: found (a dry run's plan) and deleted."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def purge_orphaned(self, summaries: list[SessionSummary], report: DeleteReport) -> None:
        """Delete the app/user state rows the deleted sessions left without any session.

        ADK's create_session reads the state rows, then inserts the session: a purge between the
        two left the new session without them, and every later append_event raised "App state
        missing". So the check and the delete are one statement (`_delete_states`: only where no
        session exists), and no create may be between its read and its insert meanwhile: on
        PostgreSQL the state tables are locked (ACCESS EXCLUSIVE: the lock waits for a create that
        has read them to commit, and a create that comes later reads after the purge and makes
        the rows anew, as for a new app); on MySQL/MariaDB `LOCK TABLES ... WRITE` waits and
        blocks the same way (`_purge_mysql`). sqlite's readers take no lock that lasts (ADK
        reads the state rows outside any transaction): after the purge vmem lets a create that
        waited for its write lock finish, then gives a session made meanwhile the empty state
        rows ADK's create_session makes for a new app or user (`_restore_states`).
        """
        touched: dict[tuple[str, str], list[str]] = {pair: [] for pair in by_pair(report.sessions)}
        if not touched:
            return
        if self.db.dialect == "mysql":
            apps, users = await self._purge_mysql(touched)
        else:
            async with self.db.engine.connect() as conn:
                conn = await conn.execution_options(vmem_write=True)
                async with conn.begin():
                    if self.db.dialect == "postgresql":
                        await conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{PURGE_LOCK_TIMEOUT}s'")
                        await conn.exec_driver_sql(f"LOCK TABLE {self._state_tables()} IN ACCESS EXCLUSIVE MODE")
                    apps, users = await self.orphaned_states(conn, touched)
                    await self._delete_states(conn, apps, users)
            if self.db.dialect == "sqlite" and (apps or users):
                waited = 0.0
                for at in SQLITE_CREATE_WAITS:
                    await asyncio.sleep(at - waited)
                    waited = at
                    await self._restore_states(apps, users)
        report.app_states, report.user_states = apps, users

    def _state_tables(self) -> str:
        quote = self.db.engine.dialect.identifier_preparer.format_table
        return ", ".join(quote(t) for t in (self.db.tables.app_states, self.db.tables.user_states))

    async def _delete_states(self, conn: AsyncConnection, apps: list[str], users: list[tuple[str, str]]) -> None:
        """Delete these app/user state rows, each only while no session of its app (user) exists."""
        from sqlalchemy import delete, exists, select

        t = self.db.tables
        s, a, u = t.sessions.c, t.app_states.c, t.user_states.c
        for i in range(0, len(apps), BATCH):
            none_left = ~exists(select(s.app_name).where(s.app_name == a.app_name))
            await conn.execute(delete(t.app_states).where(a.app_name.in_(apps[i : i + BATCH]), none_left))
        for app, user in users:
            none_left = ~exists(select(s.app_name).where(s.app_name == u.app_name, s.user_id == u.user_id))
            await conn.execute(delete(t.user_states).where(u.app_name == app, u.user_id == user, none_left))

    async def _purge_mysql(self, touched: dict[tuple[str, str], list[str]]) -> tuple[list[str], list[tuple[str, str]]]:
        """`_purge_orphaned` on MySQL/MariaDB: the state tables locked (LOCK TABLES, which waits for every
        transaction that read them to end) while another connection counts the sessions left."""
        async with self.db.engine.connect() as locked:
            await locked.exec_driver_sql(f"SET SESSION lock_wait_timeout = {PURGE_LOCK_TIMEOUT}")
            try:
                await locked.exec_driver_sql(f"LOCK TABLES {self._state_tables().replace(',', ' WRITE,')} WRITE")
                async with self.db.engine.connect() as conn:
                    apps, users = await self.orphaned_states(conn, touched)
                    await conn.rollback()
                await self._delete_states_locked(locked, apps, users)
                await locked.commit()
            finally:
                with contextlib.suppress(Exception):
                    await locked.exec_driver_sql("UNLOCK TABLES")
                    await locked.commit()
                await locked.invalidate()  # its session settings go with it, not back to the pool
        return apps, users

    async def _delete_states_locked(self, conn: AsyncConnection, apps: list[str], users: list[tuple[str, str]]) -> None:
        """`_delete_states` under LOCK TABLES (which names no sessions table): the check was made meanwhile."""
        from sqlalchemy import delete

        t = self.db.tables
        a, u = t.app_states.c, t.user_states.c
        for i in range(0, len(apps), BATCH):
            await conn.execute(delete(t.app_states).where(a.app_name.in_(apps[i : i + BATCH])))
        for app, user in users:
            await conn.execute(delete(t.user_states).where(u.app_name == app, u.user_id == user))

    async def _restore_states(self, apps: list[str], users: list[tuple[str, str]]) -> None:
        """sqlite: empty state rows (as ADK's create_session makes them) for a purged app or user that has
        a session again: one created while the purge ran."""
        from sqlalchemy import insert, select

        from veadk_mem.sessions.layout import stored_time

        t = self.db.tables
        s, a, u = t.sessions.c, t.app_states.c, t.user_states.c
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                stamp = stored_time(t, time.time())
                for i in range(0, len(apps), BATCH):
                    part = apps[i : i + BATCH]
                    live = {r[0] for r in await conn.execute(select(s.app_name).where(s.app_name.in_(part)).distinct())}
                    have = {r[0] for r in await conn.execute(select(a.app_name).where(a.app_name.in_(part)))}
                    for app in sorted(live - have):
                        await conn.execute(insert(t.app_states).values(app_name=app, state={}, update_time=stamp))
                for app, user in users:
                    live_user = (
                        await conn.execute(select(s.id).where(s.app_name == app, s.user_id == user).limit(1))
                    ).first()
                    has = (await conn.execute(select(u.user_id).where(u.app_name == app, u.user_id == user))).first()
                    if live_user is not None and has is None:
                        await conn.execute(
                            insert(t.user_states).values(app_name=app, user_id=user, state={}, update_time=stamp)
                        )

    async def orphaned_states(
        self, conn: AsyncConnection, by_pair: dict[tuple[str, str], list[str]]
    ) -> tuple[list[str], list[tuple[str, str]]]:
        """The app/user state rows left without any session once these sessions go."""
        from sqlalchemy import func, select

        s = self.db.tables.sessions.c
        apps = sorted({a for a, _ in by_pair})
        totals: dict[tuple[str, str], int] = {}
        for i in range(0, len(apps), BATCH):
            rows = await conn.execute(
                select(s.app_name, s.user_id, func.count())
                .where(s.app_name.in_(apps[i : i + BATCH]))
                .group_by(s.app_name, s.user_id)
            )
            for a, u, n in rows:
                totals[(a, u)] = int(n)
        remaining = {pair: n - len(by_pair.get(pair, [])) for pair, n in totals.items()}
        users = sorted(pair for pair in by_pair if remaining.get(pair, 0) <= 0)
        app_left: dict[str, int] = defaultdict(int)
        for (a, _u), n in remaining.items():
            app_left[a] += max(n, 0)
        app_list = [a for a in apps if app_left.get(a, 0) == 0]
        return app_list, users
