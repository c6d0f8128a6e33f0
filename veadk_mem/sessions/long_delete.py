"""sqlite: one long session deleted in short transactions, newest events first, so an agent is never
locked out past its busy timeout; and `whole`, which runs one transaction to its end on Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from veadk_mem.sessions.engine import sqlite_gap
from veadk_mem.sessions.layout import to_epoch

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.records import DeleteReport, SessionSummary

T = TypeVar("T")

SQLITE_LONG_STEP = 5_000  # events in the first transaction of a longer session's delete on sqlite
SQLITE_LONG_HOLD = 0.1  # seconds each of the others should hold the write lock: the step follows the machine


async def whole(work: Coroutine[Any, Any, T]) -> T:
    """`work` (one short transaction) run to its end even on Ctrl-C, which is raised after it: the
    count a message gives is then exactly what is gone, never off by a commit."""
    running = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await running
        raise


async def delete_long_sqlite(
    db: Database, summary: SessionSummary, report: DeleteReport, recheck: bool, on_commit: Callable[[], None]
) -> None:
    """sqlite: one long session's events in short transactions, newest first, its row with the last ones.

    sqlite has one writer for the whole file, and one transaction deleting a long session
    held it past an agent's busy timeout ("database is locked"). Here each
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

    t = db.tables
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
        async with db.engine.connect() as conn:
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
                        await conn.execute(delete(t.events).where(literal_column("rowid").in_(newest)), {"step": step})
                    ).rowcount
                    or 0,
                    0,
                )
                left: Any = await conn.execute(select(literal_column("1")).where(*events_of).limit(1))
                last = left.first() is None  # its last events: the row goes with them, never a session without
                if last:
                    await conn.execute(delete(t.sessions).where(*session_is))
        on_commit()
        report.events += gone  # committed
        if last:
            report.sessions.append(summary)
        return last

    held = 0.0
    while True:
        if held:
            await sqlite_gap(db.dialect, held)
        started = time.monotonic()
        if await whole(one()):
            return
        held = time.monotonic() - started
        # as many events as take about LONG_HOLD s on this machine now: a loaded host deleted 5,000 in 2 s
        if held > 2 * SQLITE_LONG_HOLD:
            step = max(SQLITE_LONG_STEP // 10, step // 2)
        elif held < SQLITE_LONG_HOLD / 2:
            step = min(SQLITE_LONG_STEP * 4, step * 2)
