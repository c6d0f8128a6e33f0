"""Sessions deleted in batches of short transactions, each re-checked on locked rows (an agent that
resumed a session keeps it); the state rows left orphaned go last (`state_purge.py`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.config import tuning
from veadk_mem.errors import Interrupted, VmemError
from veadk_mem.sessions.engine import sqlite_gap
from veadk_mem.sessions.layout import to_epoch
from veadk_mem.sessions.long_delete import delete_long_sqlite, whole
from veadk_mem.sessions.notes import Notes
from veadk_mem.sessions.pruned import forget_gone
from veadk_mem.sessions.read_queries import Listings
from veadk_mem.sessions.records import (
    BATCH,
    DeleteReport,
    SessionFilter,
    SessionKey,
    SessionSummary,
    cut_batches,
)
from veadk_mem.sessions.state_purge import StatePurge
from veadk_mem.sessions.stored_rows import by_pair

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.stored_rows import StoredRows


DELETE_BATCH_EVENTS = 20_000  # events a delete transaction holds about (its sessions: [tuning] delete_batch)


def _batch_size() -> int:
    """Sessions per delete transaction (each well under a second): [tuning] delete_batch ($VMEM_DELETE_BATCH), 200."""
    return tuning().delete_batch


def _committed(report: DeleteReport) -> dict[str, Any]:
    """What a delete stopped part-way had committed, as the history records it."""
    return {
        "sessions": len(report.sessions),
        "events": report.events,
        "ids": [f"{s.app_name}/{s.user_id}/{s.id}" for s in report.sessions],
    }


def _unresumed(
    summaries: list[SessionSummary], current: dict[tuple[str, str, str], float], report: DeleteReport
) -> list[SessionSummary]:
    """The summaries whose session's `current` update time is the one it was listed with; the
    others (resumed, or deleted meanwhile) go to report.skipped."""
    kept: list[SessionSummary] = []
    for summary in summaries:
        now = current.get((summary.app_name, summary.user_id, summary.id))
        if now is not None and abs(now - summary.update_time) <= 1e-6:
            kept.append(summary)
        else:
            report.skipped.append(summary.key)
    return kept


class Deletes:
    """`delete_sessions`: the sessions a filter or keys name, deleted in batches."""

    def __init__(self, db: Database, rows: StoredRows) -> None:
        self.db = db
        self.rows = rows  # the store's rows part, which counts the transactions committed here
        self.listings = Listings(db, Notes())
        self.states = StatePurge(db)

    def _committed(self) -> None:
        self.rows.delete_transactions += 1

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
        those are deleted). Each batch (`batch` sessions, default [tuning] delete_batch
        ($VMEM_DELETE_BATCH, 200), and about `DELETE_BATCH_EVENTS` events; a larger session is a
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
            summaries = await self.listings.list_sessions(target, oldest_first=True)
        elif target and isinstance(target[0], SessionSummary):
            summaries = list(target)  # type: ignore[arg-type]
        else:
            summaries = await self.listings.find_sessions(list(target))  # type: ignore[arg-type]
        report = DeleteReport(sessions=summaries, events=sum(s.event_count for s in summaries), dry_run=dry_run)
        if not summaries:
            return report
        if dry_run:
            with self.db.failures():
                async with self.db.reader.connect() as conn:
                    if purge_state:
                        report.app_states, report.user_states = await self.states.orphaned_states(
                            conn, by_pair(summaries)
                        )
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
                    await delete_long_sqlite(self.db, chunk[0], report, bool(recheck), self._committed)
                else:
                    await whole(self._delete_batch(chunk, report, bool(recheck)))
                    self._committed()
                held = time.monotonic() - started
            if purge_state:
                await self.states.purge_orphaned(summaries, report)
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

    async def _delete_each(
        self, conn: AsyncConnection, chunk: list[SessionSummary], report: DeleteReport, recheck: bool
    ) -> tuple[list[SessionSummary], int]:
        """`_delete_batch`'s work on a server: statements per (app, user), their rows locked meanwhile."""
        from sqlalchemy import delete

        t = self.db.tables
        kept = await self._unchanged(conn, chunk, report) if recheck else chunk
        events = 0
        for (app, user), ids in by_pair(kept).items():
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
            kept = _unresumed(chunk, current, report)
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

    async def _unchanged(
        self, conn: AsyncConnection, summaries: list[SessionSummary], report: DeleteReport
    ) -> list[SessionSummary]:
        """The summaries whose session still has the update time it was listed with (rows locked).

        The others (resumed, or deleted meanwhile) go to report.skipped.
        """
        from sqlalchemy import select

        s = self.db.tables.sessions.c
        current: dict[tuple[str, str, str], float] = {}
        for (app, user), ids in by_pair(summaries).items():
            for i in range(0, len(ids), BATCH):
                stmt = select(s.app_name, s.user_id, s.id, s.update_time).where(
                    s.app_name == app, s.user_id == user, s.id.in_(ids[i : i + BATCH])
                )
                for a, u, sid, stamp in await conn.execute(self.db.for_update(stmt, self.db.tables.sessions)):
                    current[(a, u, sid)] = to_epoch(stamp)
        return _unresumed(summaries, current, report)
