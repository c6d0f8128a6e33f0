"""Delete planning and execution: batches of short transactions, re-checked on locked rows."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from veadk_mem.config import tuning
from veadk_mem.errors import Interrupted, VmemError
from veadk_mem.sessions.big_writes import replaced_id, staged_of, staging_id
from veadk_mem.sessions.engine import sqlite_gap
from veadk_mem.sessions.layout import (
    to_epoch,
)
from veadk_mem.sessions.pruned import forget_gone
from veadk_mem.sessions.records import (
    BATCH,
    DeleteReport,
    SessionFilter,
    SessionKey,
    SessionSummary,
    cut_batches,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.read_queries import Reads


T = TypeVar("T")

DELETE_BATCH = 200  # sessions per delete transaction (each well under a second)
DELETE_BATCH_EVENTS = 20_000  # ... and about this many events
PURGE_LOCK_TIMEOUT = 10  # seconds --purge-state waits for the state tables' lock (PostgreSQL, MySQL)
# Seconds after the purge at which vmem looks for a session a create made meanwhile (sqlite): a
# create that waited on the purge's write lock is usually done by the first; a busy machine's, by the last.
SQLITE_CREATE_WAITS = (0.3, 1.0)
SQLITE_LONG_STEP = 5_000  # events in the first transaction of a longer session's delete on sqlite
SQLITE_LONG_HOLD = 0.1  # seconds each of the others should hold the write lock: the step follows the machine


def _batch_size() -> int:
    """Sessions per delete transaction: [tuning] delete_batch ($VMEM_DELETE_BATCH), default DELETE_BATCH."""
    return tuning().delete_batch


def _by_pair(summaries: Sequence[SessionSummary]) -> dict[tuple[str, str], list[str]]:
    by_pair: dict[tuple[str, str], list[str]] = defaultdict(list)
    for summary in summaries:
        by_pair[(summary.app_name, summary.user_id)].append(summary.id)
    return by_pair


def _committed(report: DeleteReport) -> dict[str, Any]:
    """What a delete stopped part-way had committed, as the history records it."""
    return {
        "sessions": len(report.sessions),
        "events": report.events,
        "ids": [f"{s.app_name}/{s.user_id}/{s.id}" for s in report.sessions],
    }


async def _whole(work: Coroutine[Any, Any, T]) -> T:
    """`work` (one short transaction) run to its end even on Ctrl-C, which is raised after it: the
    count a message gives is then exactly what is gone, never off by a commit."""
    running = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await running
        raise


class Deletes:
    """`delete_sessions` and the state rows a delete leaves orphaned."""

    def __init__(self, db: Database, reads: Reads) -> None:
        self.db = db
        self.reads = reads
        self.delete_transactions = 0  # batches committed by this store's deletes (tests count them)

    async def delete_sessions(
        self,
        target: SessionFilter | Sequence[SessionKey] | Sequence[SessionSummary],
        *,
        purge_state: bool = False,
        dry_run: bool = False,
        recheck: bool | None = None,
        batch: int | None = None,
    ) -> DeleteReport:
        """Delete sessions and their events in batches of short transactions, never relying on
        ON DELETE CASCADE.

        `target` is a filter, session keys, or summaries already shown to the user (only
        those are deleted). Each batch (`batch` sessions, default `DELETE_BATCH` or
        $VMEM_DELETE_BATCH, and about `DELETE_BATCH_EVENTS` events; a larger session is a
        batch of its own) is one transaction: an agent resuming one of the sessions waits
        for that batch at most, never for the whole run. With `recheck` (the default for a
        filter with a time bound), a session whose update time changed since it was listed
        (an agent resumed it) is kept: the check runs inside its batch's transaction, on
        locked rows, and the kept ones are in `report.skipped`. With purge_state, a user's
        user_state goes when that user has no session left in the app, and an app's
        app_state when the app has none left (a last short transaction).

        `report.sessions` and `report.events` count what was deleted. A failure or Ctrl-C
        part-way raises an error saying how many sessions were deleted (committed) before
        it; the others are untouched, and running the same delete again finishes it.
        """
        if isinstance(target, SessionFilter):
            if recheck is None:
                recheck = any(v is not None for v in (target.since, target.until, target.older_than))
            summaries = await self.reads.list_sessions(target, oldest_first=True)
        elif target and isinstance(target[0], SessionSummary):
            summaries = list(target)  # type: ignore[arg-type]
        else:
            summaries = await self.reads.find_sessions(list(target))  # type: ignore[arg-type]
        report = DeleteReport(sessions=summaries, events=sum(s.event_count for s in summaries), dry_run=dry_run)
        if not summaries:
            return report
        if dry_run:
            try:
                async with self.db.reader.connect() as conn:
                    if purge_state:
                        report.app_states, report.user_states = await self._orphaned_states(conn, _by_pair(summaries))
            except Exception as exc:
                raise self.db.fail(exc) from None
            return report
        report.sessions, report.events = [], 0
        size = batch or _batch_size()
        held = 0.0
        try:
            for n, chunk in enumerate(cut_batches(summaries, size, DELETE_BATCH_EVENTS)):
                if n:  # on sqlite, let a waiting agent write between two batches
                    await sqlite_gap(self.db.dialect, held)
                started = time.monotonic()
                if self.db.dialect == "sqlite" and len(chunk) == 1 and chunk[0].event_count > DELETE_BATCH_EVENTS:
                    await self._delete_long_sqlite(chunk[0], report, bool(recheck))
                else:
                    await _whole(self._delete_batch(chunk, report, bool(recheck)))
                    self.delete_transactions += 1
                held = time.monotonic() - started
            if purge_state:
                await self._purge_orphaned(summaries, report)
            if report.sessions:  # and the trimmed-events counts of sessions gone (`pruned.py`)
                await forget_gone(self.db)
        except BaseException as exc:
            raise self._partial(exc, report, len(summaries)) from None
        return report

    def _partial(self, exc: BaseException, report: DeleteReport, planned: int) -> BaseException:
        """The error to raise for `exc` once part of a delete may be committed: it says how far it got."""
        done = (
            f"{len(report.sessions):,} of {planned:,} session(s) ({report.events:,} event(s)) were deleted "
            "and committed before it; run the same command again to finish"
        )
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
            if not report.sessions:
                return exc
            stopped = Interrupted(f"interrupted: {done}")
            stopped.committed = _committed(report)
            return stopped
        if not isinstance(exc, Exception):
            return exc
        error = exc if isinstance(exc, VmemError) else self.db.fail(exc)
        if report.sessions:
            error.message = f"{error.message} -- {done}"
            error.args = (error.message,)
            error.committed = _committed(report)
        return error

    async def _delete_batch(self, chunk: list[SessionSummary], report: DeleteReport, recheck: bool) -> None:
        """Delete one batch of sessions in ONE short transaction; add what it deleted to `report`."""
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                if self.db.dialect == "sqlite":  # one writer for the whole file: as few statements as can be
                    kept, events = await self._delete_sqlite(conn, chunk, report, recheck)
                else:
                    kept, events = await self._delete_each(conn, chunk, report, recheck)
        report.sessions += kept  # committed
        report.events += events

    async def _delete_long_sqlite(self, summary: SessionSummary, report: DeleteReport, recheck: bool) -> None:
        """sqlite: one long session's events in short transactions, newest first, its row with the last ones.

        sqlite has one writer for the whole file, and one transaction deleting 2,000,000 events
        held it 5-6 s: an agent's append failed with "database is locked". Here each
        transaction deletes `SQLITE_LONG_STEP` events, the next ones as many as take about
        `SQLITE_LONG_HOLD` s (halved or doubled after each, 500 to 20,000), with `sqlite_gap`'s pause
        after it. The session row stays until the transaction that deletes its last events,
        so meanwhile ADK (and vmem) read the session as it was at an earlier time: its oldest
        events, in ADK's order, never a session without its row nor events without a
        session another writer could join (ADK reads events by key: a session re-created under
        the same id would pick up those left). An event an agent appends meanwhile goes with
        the session. The re-check (`recheck`) is made in the first transaction only: once its
        delete has begun, a session is deleted whole. A session whose row disappears or is
        made anew under the same key meanwhile (another writer) is left to that writer, in
        `report.skipped`. A failure or Ctrl-C part-way leaves the session with its oldest
        events; `report.events` counts those deleted, and the same delete run again finishes.
        """
        from sqlalchemy import bindparam, delete, literal_column, select

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        key = (summary.app_name, summary.user_id, summary.id)
        session_is = (s.app_name == key[0], s.user_id == key[1], s.id == key[2])
        events_of = (e.app_name == key[0], e.user_id == key[1], e.session_id == key[2])
        newest = (
            select(literal_column("rowid"))
            .where(*events_of)
            .order_by(e.timestamp.desc(), e.id.desc())
            .limit(bindparam("step"))
            .scalar_subquery()
        )
        created: Any = None
        step = SQLITE_LONG_STEP

        async def one() -> bool:
            """One short transaction; True once the session is gone (or left to another writer)."""
            nonlocal created
            async with self.db.engine.connect() as conn:
                conn = await conn.execution_options(vmem_write=True)
                async with conn.begin():
                    row = (await conn.execute(select(s.update_time, s.create_time).where(*session_is))).first()
                    if row is None or (created is not None and row.create_time != created):
                        report.skipped.append(summary.key)  # deleted, or made anew, by another writer
                        return True
                    if created is None:
                        if recheck and abs(to_epoch(row.update_time) - summary.update_time) > 1e-6:
                            report.skipped.append(summary.key)  # resumed since it was listed: kept
                            return True
                        created = row.create_time
                    gone = max(
                        (
                            await conn.execute(
                                delete(t.events).where(literal_column("rowid").in_(newest)), {"step": step}
                            )
                        ).rowcount
                        or 0,
                        0,
                    )
                    left: Any = await conn.execute(select(literal_column("1")).where(*events_of).limit(1))
                    last = left.first() is None  # its last events: the row goes with them, never a session without
                    if last:
                        await conn.execute(delete(t.sessions).where(*session_is))
            self.delete_transactions += 1
            report.events += gone  # committed
            if last:
                report.sessions.append(summary)
            return last

        held = 0.0
        while True:
            if held:
                await sqlite_gap(self.db.dialect, held)
            started = time.monotonic()
            if await _whole(one()):
                return
            held = time.monotonic() - started
            # as many events as take about LONG_HOLD s on this machine now: a loaded host deleted 5,000 in 2 s
            if held > 2 * SQLITE_LONG_HOLD:
                step = max(SQLITE_LONG_STEP // 10, step // 2)
            elif held < SQLITE_LONG_HOLD / 2:
                step = min(SQLITE_LONG_STEP * 4, step * 2)

    async def _delete_each(
        self, conn: AsyncConnection, chunk: list[SessionSummary], report: DeleteReport, recheck: bool
    ) -> tuple[list[SessionSummary], int]:
        """`_delete_batch`'s work on a server: statements per (app, user), their rows locked meanwhile."""
        from sqlalchemy import delete

        t = self.db.tables
        kept = await self._unchanged(conn, chunk, report) if recheck else chunk
        events = 0
        for (app, user), ids in _by_pair(kept).items():
            for i in range(0, len(ids), BATCH):
                part = ids[i : i + BATCH]
                res = await conn.execute(
                    delete(t.events).where(
                        self.db.key_eq(t.events.c.app_name, app),
                        self.db.key_eq(t.events.c.user_id, user),
                        t.events.c.session_id.in_(part),
                    )
                )
                events += max(res.rowcount or 0, 0)
                await conn.execute(
                    delete(t.sessions).where(
                        self.db.key_eq(t.sessions.c.app_name, app),
                        self.db.key_eq(t.sessions.c.user_id, user),
                        t.sessions.c.id.in_(part),
                    )
                )
        return kept, events

    async def _delete_sqlite(
        self, conn: AsyncConnection, chunk: list[SessionSummary], report: DeleteReport, recheck: bool
    ) -> tuple[list[SessionSummary], int]:
        """`_delete_batch`'s work on sqlite in three statements, whatever the number of (app, user) pairs.

        sqlite has one writer for the whole file: while this transaction holds the write lock
        (BEGIN IMMEDIATE), an agent's append waits. A statement per pair (about one per
        session in a batch spread over many users) made that wait a few hundred statements
        long; the keys go as one JSON list instead (`json_each`, as the import's stored-times read).
        """
        import json

        stmts = self.db.stmts.get("sqlite_delete")
        if stmts is None:
            stmts = self.db.stmts["sqlite_delete"] = self._sqlite_delete_stmts()
        select_stmt, delete_events, delete_sessions = stmts
        keys = json.dumps([[s.app_name, s.user_id, s.id] for s in chunk])
        kept = chunk
        if recheck:
            current = {
                (a, u, sid): to_epoch(stamp) for a, u, sid, stamp in await conn.execute(select_stmt, {"k_json": keys})
            }
            kept = []
            for summary in chunk:
                now = current.get((summary.app_name, summary.user_id, summary.id))
                if now is not None and abs(now - summary.update_time) <= 1e-6:
                    kept.append(summary)
                else:
                    report.skipped.append(summary.key)
            keys = json.dumps([[s.app_name, s.user_id, s.id] for s in kept])
        if not kept:
            return kept, 0
        res = await conn.execute(delete_events, {"k_json": keys})
        await conn.execute(delete_sessions, {"k_json": keys})
        return kept, max(res.rowcount or 0, 0)

    def _sqlite_delete_stmts(self) -> tuple[Any, Any, Any]:
        """(select update times, delete events, delete sessions) of the keys in the JSON list k_json."""
        from sqlalchemy import bindparam, delete, func, literal_column, select, tuple_

        t = self.db.tables
        s, e = t.sessions.c, t.events.c

        def keys() -> Any:  # the (app, user, id) triples of the JSON list, as rows
            j = func.json_each(bindparam("k_json")).table_valued("value")
            return select(*(func.json_extract(j.c.value, literal_column(f"'$[{i}]'")) for i in range(3)))

        select_stmt = select(s.app_name, s.user_id, s.id, s.update_time).where(
            tuple_(s.app_name, s.user_id, s.id).in_(keys())
        )
        delete_events = delete(t.events).where(tuple_(e.app_name, e.user_id, e.session_id).in_(keys()))
        delete_sessions = delete(t.sessions).where(tuple_(s.app_name, s.user_id, s.id).in_(keys()))
        return select_stmt, delete_events, delete_sessions

    async def _purge_orphaned(self, summaries: list[SessionSummary], report: DeleteReport) -> None:
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
        touched: dict[tuple[str, str], list[str]] = {pair: [] for pair in _by_pair(report.sessions)}
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
                    apps, users = await self._orphaned_states(conn, touched)
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
                    apps, users = await self._orphaned_states(conn, touched)
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
        try:
            async with self.db.reader.connect() as conn:
                rows = (await conn.execute(stmt)).all()
        except Exception as exc:
            raise self.db.fail(exc) from None
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
            pairs = _by_pair([SessionSummary(k.app_name, k.user_id, k.id, {}, 0, 0.0, 0.0) for k in keys])
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
        try:
            async with self.db.reader.connect() as conn:
                found: dict[SessionKey, int] = {}
                for a, u, sid, n in await conn.execute(stmt):
                    key = SessionKey(a, u, staged_of(sid) or sid)  # staged rows are their session's
                    found[key] = found.get(key, 0) + int(n)
                return found
        except Exception as exc:
            raise self.db.fail(exc) from None

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
        try:
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
        except Exception as exc:
            raise self.db.fail(exc) from None

    async def _unchanged(
        self, conn: AsyncConnection, summaries: list[SessionSummary], report: DeleteReport
    ) -> list[SessionSummary]:
        """The summaries whose session still has the update time it was listed with (rows locked).

        The others (resumed, or deleted meanwhile) go to report.skipped.
        """
        from sqlalchemy import select

        s = self.db.tables.sessions.c
        current: dict[tuple[str, str, str], float] = {}
        for (app, user), ids in _by_pair(summaries).items():
            for i in range(0, len(ids), BATCH):
                stmt = select(s.app_name, s.user_id, s.id, s.update_time).where(
                    s.app_name == app, s.user_id == user, s.id.in_(ids[i : i + BATCH])
                )
                for a, u, sid, stamp in await conn.execute(self.db.for_update(stmt, self.db.tables.sessions)):
                    current[(a, u, sid)] = to_epoch(stamp)
        kept: list[SessionSummary] = []
        for summary in summaries:
            now = current.get((summary.app_name, summary.user_id, summary.id))
            if now is not None and abs(now - summary.update_time) <= 1e-6:
                kept.append(summary)
            else:
                report.skipped.append(summary.key)
        return kept

    async def _orphaned_states(
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
