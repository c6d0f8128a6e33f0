"""How many older events `session prune` trimmed from a session, kept where every host sees it.

A small table of vmem's own in the session database, `vmem_pruned_events`, made by the first
trim (never before; ADK's tables are not touched): one row per trimmed session, with the
events trimmed so far, the session's create time and the id of its oldest kept event. ADK
never reads it, so what ADK loads is unchanged, and `session get --json` stays ADK's JSON.

`session get` shows the count only while the row still describes the session: the same
create time (ADK re-creating a deleted id makes a new one) and the same oldest event (an
import that restored the older events does not). vmem's deletes (`session delete`, `prune`,
`forget`) remove the rows of the sessions that are gone, ADK's own deletes included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import StoreError

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database

TABLE = "vmem_pruned_events"


def pruned_table(db: Database) -> Table:
    """The table, its key and create time typed as this layout's `sessions` columns."""
    from sqlalchemy import BigInteger, Column, Float, MetaData, Table

    s = db.tables.sessions.c
    return Table(
        TABLE,
        MetaData(),
        Column("app_name", s.app_name.type, primary_key=True),
        Column("user_id", s.user_id.type, primary_key=True),
        Column("session_id", s.id.type, primary_key=True),
        Column("session_create_time", s.create_time.type, nullable=False),
        Column("oldest_kept", db.tables.events.c.id.type, nullable=False),
        Column("events", BigInteger, nullable=False),
        Column("pruned_at", Float, nullable=False),  # epoch seconds of the last trim
    )


def has_table(db: Database) -> bool:
    """Whether a trim has made the table in this database (as of its opening, or this process's trim)."""
    return TABLE in db.table_names


async def ensure_table(db: Database) -> Table:
    """The table, made now if no trim made it before (its own statement: MySQL commits at DDL)."""
    from sqlalchemy import inspect

    table = pruned_table(db)
    if has_table(db):
        return table
    async with db.engine.connect() as conn:
        try:
            async with conn.begin():
                await conn.run_sync(lambda c: table.create(c, checkfirst=True))
        except Exception:
            pass  # another prune made it meanwhile: read the names again, and fail below if not
        db.table_names = frozenset(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    if not has_table(db):
        raise StoreError(f"{db.display_url}: could not create vmem's table {TABLE}")
    return table


@dataclass(frozen=True)
class TrimStep:
    """One committed step of a trim: the key, its events deleted, the oldest before and after."""

    key: tuple[str, str, str]
    created: Any  # the session's create time, as its column holds it
    oldest_before: str
    oldest_after: str
    events: int


async def record_step(conn: AsyncConnection, db: Database, table: Table, step: TrimStep) -> None:
    """Add a trim step's events to the session's row, in the step's own transaction.

    A row that no longer describes the session (another create time, another oldest event
    than the one this step began at) is replaced: its count was of events no longer missing.
    """
    from sqlalchemy import delete, insert, select, update

    p = table.c
    where = _key_where(db, table, step.key)
    row = (await conn.execute(select(p.events, p.oldest_kept, p.session_create_time).where(*where))).first()
    now = time.time()
    if row is not None and row.session_create_time == step.created and row.oldest_kept == step.oldest_before:
        await conn.execute(
            update(table)
            .where(*where)
            .values(events=p.events + step.events, oldest_kept=step.oldest_after, pruned_at=now)
        )
        return
    if row is not None:
        await conn.execute(delete(table).where(*where))
    app, user, sid = step.key
    await conn.execute(
        insert(table).values(
            app_name=app,
            user_id=user,
            session_id=sid,
            session_create_time=step.created,
            oldest_kept=step.oldest_after,
            events=step.events,
            pruned_at=now,
        )
    )


def _key_where(db: Database, table: Table, key: tuple[str, str, str]) -> tuple[Any, Any, Any]:
    p = table.c
    return db.key_eq(p.app_name, key[0]), db.key_eq(p.user_id, key[1]), db.key_eq(p.session_id, key[2])


async def pruned_events(db: Database, app: str, user: str, session_id: str) -> int:
    """The older events prune trimmed from this session that are still missing; 0 when none."""
    from sqlalchemy import select

    if not has_table(db):
        return 0
    table = pruned_table(db)
    s, e = db.tables.sessions.c, db.tables.events.c
    p = table.c
    mine = select(p.events, p.oldest_kept, p.session_create_time).where(*_key_where(db, table, (app, user, session_id)))
    created = select(s.create_time).where(
        db.key_eq(s.app_name, app), db.key_eq(s.user_id, user), db.key_eq(s.id, session_id)
    )
    oldest = (
        select(e.id)
        .where(db.key_eq(e.app_name, app), db.key_eq(e.user_id, user), db.key_eq(e.session_id, session_id))
        .order_by(e.timestamp, e.id)
        .limit(1)
    )
    async with db.reader.connect() as conn:
        row = (await conn.execute(mine)).first()
        if row is None or (await conn.execute(created)).scalar() != row.session_create_time:
            return 0
        if ((await conn.execute(oldest)).scalar() or "") != row.oldest_kept:  # "": every event was trimmed
            return 0
    return int(row.events)


async def forget_gone(db: Database) -> int:
    """Delete the rows of sessions that no longer exist (or were made anew); how many went."""
    from sqlalchemy import delete, exists, select

    if not has_table(db):
        return 0
    table = pruned_table(db)
    p, s = table.c, db.tables.sessions.c
    alive = exists(
        select(s.id).where(
            s.app_name == p.app_name,
            s.user_id == p.user_id,
            s.id == p.session_id,
            s.create_time == p.session_create_time,
        )
    )
    async with db.engine.connect() as conn:
        conn = await conn.execution_options(vmem_write=True)
        async with conn.begin():
            res = await conn.execute(delete(table).where(~alive))
    return max(res.rowcount or 0, 0)
