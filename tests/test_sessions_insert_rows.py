"""An import's INSERTs (`upsert.InsertShape`): each session's event rows are built as it is read
(`Upsert.prepared`), in the driver's form, and they are exactly the statement and the values that
SQLAlchemy's own `conn.execute(insert(events), rows)` sends for the same rows: on every database and
layout, JSON (text or JSONB), times and v0's pickles included. The stored rows themselves are compared
with google-adk's in test_sessions_adk_exact.py and the import tests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import build, build_v0, sqlite_url
from sqlalchemy import bindparam, event, func, insert

from veadk_mem.sessions.codec import event_row
from veadk_mem.sessions.layout import Layout
from veadk_mem.sessions.store import SessionStore
from veadk_mem.sessions.upsert import Upsert
from veadk_mem.sessions.validate import iter_checked

SESSIONS = {("alice", "s1"): 9, ("bob", "s2"): 4}


def _url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return sqlite_url(tmp_path / "s.db")
    return str(request.getfixturevalue("pg_url" if kind == "postgres" else "mysql_url"))


async def _export(url: str, path: Path) -> None:
    async with SessionStore(url) as store:
        path.write_text("".join([line async for line in store.export_jsonl()]), encoding="utf-8")


async def _compare(url: str, source: Path) -> tuple[int, str]:
    """Each exported session's `prepared` rows beside what SQLAlchemy sends for its `event_row` dicts
    (captured at the cursor, then rolled back); (events compared, the layout)."""
    sessions = [record for _, record in iter_checked(source, big="skip") if not isinstance(record, dict)]
    async with SessionStore(url) as store:
        db = store.db
        t = db.tables
        upsert = Upsert(db)
        stmt = insert(t.events)
        if t.layout is Layout.V0 and db.dialect == "mysql":
            stmt = stmt.values(actions=func.unhex(bindparam("actions_hex")))
        sent: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
            sent.append((statement, parameters))

        compared = 0
        for session in sessions:
            prepared = upsert.prepared(session, time.time())
            rows = [event_row(t, session.app_name, session.user_id, session.id, e) for e in session.events]
            if t.layout is Layout.V0 and db.dialect == "mysql":
                for row in rows:
                    row["actions_hex"] = row.pop("actions").hex()
            async with db.engine.connect() as conn:
                transaction = await conn.begin()
                await conn.execute(t.events.delete())  # the rows this session's INSERT writes again
                event.listen(conn.sync_connection, "before_cursor_execute", capture)
                try:
                    await conn.execute(stmt, rows)
                finally:
                    event.remove(conn.sync_connection, "before_cursor_execute", capture)
                    await transaction.rollback()
            statement, parameters = sent.pop()
            many = parameters if len(rows) > 1 else [parameters]
            assert statement == upsert._insert("events").sql
            assert prepared.events == [tuple(p) for p in many]
            # the driver's values: no decoded event data held for the write (JSON as text or JSONB's text)
            assert all(not isinstance(v, (dict, list)) for row in prepared.events for v in row)
            compared += len(rows)
        return compared, t.layout.value


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "mysql"])
@pytest.mark.parametrize("layout", ["v1", "v0"])
def test_prepared_rows_are_what_sqlalchemy_sends(
    layout: str, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _url(kind, tmp_path, request)
    (build if layout == "v1" else build_v0)(url, SESSIONS)
    source = tmp_path / "dump.jsonl"
    asyncio.run(_export(url, source))
    assert asyncio.run(_compare(url, source)) == (sum(SESSIONS.values()), layout)
