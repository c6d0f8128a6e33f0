"""Event rows in a mixed shape, found and rewritten in the one ADK stores (`session upgrade`).

vmem before 0.2 restored an import's event data with the keys it came with: `usageMetadata` and
`nodeInfo` beside `invocation_id`, nested keys in either case. ADK reads such a row, but every
query over the column (`session stats`, an operator's SQL) sees another shape. A row is mixed
when it holds a field of an ADK model under its camelCase alias (`adkjson.mixed_keys`); the
rewrite stores `adkjson.stored_event` of it, the data ADK's own `DatabaseSessionService` would
have written. Pages are keyset pages in short transactions, each committed: rewriting is
idempotent, so an interrupted run is finished by the next, and an agent writing meanwhile waits
for one page at most (ADK never changes an event once appended).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.adkjson import mixed_keys, stored_event
from veadk_mem.jsonio import stored_json
from veadk_mem.sessions.layout import Layout
from veadk_mem.sessions.records import Progress, batch_bytes, noop

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database

PAGE = 1000  # event rows read, and at most rewritten, per transaction


def _decoded(value: Any) -> dict[str, Any] | None:
    """A row's event_data as a dict (JSONB arrives decoded, text does not); None when it is not one."""
    if isinstance(value, (str, bytes)):
        try:
            value = stored_json(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


async def _pages(conn: AsyncConnection, events: Table, last: tuple[Any, ...] | None, limit: int) -> Sequence[Any]:
    from sqlalchemy import select, tuple_

    pk = list(events.primary_key.columns)
    stmt = select(*pk, events.c.event_data).order_by(*pk).limit(limit)
    if last is not None:
        stmt = stmt.where(pk[0] >= last[0], tuple_(*pk) > tuple_(*last))
    return (await conn.execute(stmt)).all()


async def _mixed_pages(store: Database) -> AsyncIterator[tuple[int, list[tuple[dict[str, Any], dict[str, Any]]]]]:
    """(rows read, [(primary key, data in ADK's stored shape)] of the mixed ones) a page at a time:
    at most PAGE rows and about `batch_bytes()` of them (pages after heavy ones hold fewer rows)."""
    events = store.tables.events
    pk = [c.name for c in events.primary_key.columns]
    last: tuple[Any, ...] | None = None
    limit = next_limit = PAGE
    while True:
        limit = next_limit
        async with store.reader.connect() as conn:
            rows = await _pages(conn, events, last, limit)
        if not rows:
            return
        found = []
        for row in rows:
            data = _decoded(row.event_data)
            if data is not None and mixed_keys(data):
                found.append(({name: getattr(row, name) for name in pk}, stored_event(data)))
        weight = sum(len(r.event_data) if isinstance(r.event_data, (str, bytes)) else 1024 for r in rows)
        yield len(rows), found
        if len(rows) < limit:
            return
        last = tuple(getattr(rows[-1], name) for name in pk)
        next_limit = max(1, min(PAGE, limit * 2, batch_bytes() // max(weight // len(rows), 1)))


def applies(store: Database) -> bool:
    """Whether the database's events hold event_data JSON (ADK 2.x's tables, SqliteSessionService's)."""
    return store.layout in (Layout.V1, Layout.SQLITE)


async def count_mixed(store: Database) -> int:
    """How many event rows are stored in a mixed shape."""
    total = 0
    async for _read, found in _mixed_pages(store):
        total += len(found)
    return total


async def rewrite_mixed(store: Database, progress: Progress = noop) -> int:
    """Rewrite every mixed event row in ADK's stored shape, a committed page at a time; the count."""
    from sqlalchemy import and_, update

    from veadk_mem.jsonio import compact_json

    events = store.tables.events
    as_text = store.layout is Layout.SQLITE  # SqliteSessionService's TEXT column: its model_dump_json text
    done = 0
    async for read, found in _mixed_pages(store):
        if found:
            with store.failures():
                async with store.engine.begin() as conn:
                    for key, data in found:
                        where = and_(*(events.c[name] == value for name, value in key.items()))
                        value = compact_json(data) if as_text else data
                        await conn.execute(update(events).where(where).values(event_data=value))
            done += len(found)
        progress(read)
    return done
