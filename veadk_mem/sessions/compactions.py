"""The compaction count of a session listing: how many of each listed session's events are
ADK context compactions, read from the stored JSON (`session list --compactions`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.sessions.layout import Layout
from veadk_mem.sessions.records import BATCH, SessionSummary, cut_batches

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database

LIST_READ_EVENTS = 5_000  # events one read of the list's compaction count covers on sqlite (a short lock)


def is_compaction(db: Database) -> Any:
    """The condition on `events` of an ADK context compaction (actions.compaction set in the stored
    JSON); v1 and SqliteSessionService layouts only (v0 pickles `actions`)."""
    from sqlalchemy import LargeBinary, String, cast, func, literal

    data = db.tables.events.c.event_data
    if db.dialect == "postgresql":
        return func.jsonb_typeof(func.jsonb_extract_path(data, "actions", "compaction")) == "object"
    if db.dialect == "mysql":
        # the text test byte for byte, as sqlite's instr: LOCATE compared by the column's
        # collation (utf8mb4_general_ci) took 2.6 times as long over a 200,000-event session
        marker = cast(literal('%"compaction"%', String()), LargeBinary)
        return data.like(marker) & (func.json_type(func.json_extract(data, "$.actions.compaction")) == "OBJECT")
    return (func.instr(data, '"compaction"') > 0) & (func.json_type(data, "$.actions.compaction") == "object")


async def count_compactions(db: Database, conn: AsyncConnection, summaries: Sequence[SessionSummary]) -> None:
    """Set each summary's compaction_count: its events that are ADK context compactions.

    One grouped query over the events whose stored JSON names a compaction (actions.
    compaction set), separate from the list's own query so that it stays an index count.
    A v0 layout pickles `actions`, which SQL cannot look into: the count stays None there.
    """
    from sqlalchemy import func, select

    t = db.tables
    if t.layout not in (Layout.V1, Layout.SQLITE) or not summaries:
        return
    e = t.events.c
    found = is_compaction(db)
    # ADK's full key (app_name, user_id, session_id) for every listed session (`key_match`):
    # the events index serves it, whatever apps and users a page spans.
    counts: dict[tuple[str, str, str], int] = {}
    ordered = sorted(summaries, key=lambda x: (x.app_name, x.user_id, x.id))
    if db.dialect == "sqlite":
        ordered = [x for x in ordered if x.event_count <= LIST_READ_EVENTS]
        for summary in summaries:
            if summary.event_count > LIST_READ_EVENTS:
                counts[(summary.app_name, summary.user_id, summary.id)] = await _count_in_slices(
                    db, conn, summary, found
                )
    stmt = db.stmts.get("compactions")
    if stmt is None:
        stmt = db.stmts["compactions"] = (
            select(e.app_name, e.user_id, e.session_id, func.count())
            .where(db.key_match((e.app_name, e.user_id, e.session_id)), found)
            .group_by(e.app_name, e.user_id, e.session_id)
        )
    for group in cut_batches(ordered, BATCH, LIST_READ_EVENTS if db.dialect == "sqlite" else sys.maxsize):
        params = db.key_params([(x.app_name, x.user_id, x.id) for x in group])
        counts.update({(a, u, sid): int(n) for a, u, sid, n in await conn.execute(stmt, params)})
    for summary in summaries:
        summary.compaction_count = counts.get((summary.app_name, summary.user_id, summary.id), 0)


async def _count_in_slices(db: Database, conn: AsyncConnection, summary: SessionSummary, found: Any) -> int:
    """One session's compactions counted `LIST_READ_EVENTS` events a statement (sqlite).

    Each statement is a read transaction of its own, whose lock keeps an agent from committing
    (rollback journal), so no statement reads a long session whole. Two statements a slice, both
    on the events index: where the slice ends (an index-only read), then the count within it.
    """
    from sqlalchemy import Text, bindparam, func, literal_column, select, tuple_, type_coerce

    e = db.tables.events.c
    if db.tables.layout is Layout.SQLITE:  # its primary key (app, user, session, id) is its index
        order: list[Any] = [e.id]
    else:  # ADK's (app, user, session, timestamp, id), the time compared as the stored text
        order = [type_coerce(e.timestamp, Text), e.id]
    key = [e.app_name == summary.app_name, e.user_id == summary.user_id, e.session_id == summary.id]
    total, low = 0, None
    while True:
        after: list[Any] = [] if low is None else [tuple_(*order) > tuple_(*[bindparam(None, v) for v in low])]
        end = (
            await conn.execute(
                select(*order).where(*key, *after).order_by(*order).limit(1).offset(LIST_READ_EVENTS - 1)
            )
        ).first()
        upto: list[Any] = [] if end is None else [tuple_(*order) <= tuple_(*[bindparam(None, v) for v in end])]
        stmt = select(func.count(literal_column("1"))).select_from(db.tables.events)
        total += int((await conn.execute(stmt.where(*key, *after, *upto, found))).scalar_one())
        if end is None:
            return total
        low = tuple(end)
