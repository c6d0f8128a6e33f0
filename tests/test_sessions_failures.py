"""One failure mapping for every part of the session store (`Database.failures`, issue 39 item 1).

A driver's own error met by a read (here sqlite's "no such table", the events table renamed away
under an open store) leaves as one secret-free line naming the database, exit 1, whether the read
is a coroutine, an async generator or a part's method; vmem's own errors (NotFound, exit 3) pass
through the same blocks as they are.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import APP, build, sqlite_url

from veadk_mem.errors import NotFound, StoreError
from veadk_mem.sessions.records import SessionKey
from veadk_mem.sessions.store import SessionStore


async def _joined(stream: Any) -> str:
    return "".join([piece async for piece in stream])


async def _listed(stream: Any) -> list[Any]:
    return [item async for item in stream]


READS: dict[str, Callable[[SessionStore], Awaitable[Any]]] = {
    "get_session": lambda s: s.get_session(APP, "u1", "s1"),
    "session_json": lambda s: _joined(s.session_json(APP, "u1", "s1")),
    "session_pages": lambda s: _listed(s.session_pages(APP, "u1", "s1")),
    "iter_events": lambda s: _listed(s.iter_events(APP, "u1", "s1")),
    "iter_sessions": lambda s: _listed(s.iter_sessions()),
    "find_sessions": lambda s: s.find_sessions([SessionKey(APP, "u1", "s1")]),
    "export_jsonl": lambda s: _joined(s.export_jsonl()),
    "changes": lambda s: _listed(s.changes().events_after(APP, "u1", "s1", None, page=8)),
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    build(sqlite_url(path), {("u1", "s1"): 3})
    return path


@pytest.mark.parametrize("name", sorted(READS))
def test_a_driver_error_in_any_read_is_one_line_naming_the_database(db: Path, name: str) -> None:
    async def go() -> tuple[BaseException, str]:
        async with SessionStore(sqlite_url(db)) as store:
            with sqlite3.connect(db) as conn:  # as a DBA's tool would, under the open store
                conn.execute("ALTER TABLE events RENAME TO events_gone")
            with pytest.raises(StoreError) as caught:
                await READS[name](store)
            return caught.value, store.db.display_url

    error, where = asyncio.run(go())
    assert type(error) is StoreError and error.exit_code == 1
    assert error.message == f"{where}: OperationalError: no such table: events" and where == f"sqlite:///{db}"
    assert error.__cause__ is None and error.__suppress_context__  # raised `from None`: no driver traceback


def test_vmem_errors_pass_through_the_mapping_as_they_are(db: Path) -> None:
    async def go() -> list[BaseException]:
        found: list[BaseException] = []
        async with SessionStore(sqlite_url(db)) as store:
            for read in (
                store.get_session(APP, "u1", "nope"),
                _joined(store.session_json(APP, "u1", "nope")),
                store.find_sessions([SessionKey(APP, "u1", "nope")]),
            ):
                with pytest.raises(NotFound) as caught:
                    await read
                found.append(caught.value)
        return found

    errors = asyncio.run(go())
    assert [type(e) for e in errors] == [NotFound] * 3 and {e.exit_code for e in errors} == {3}
    assert errors[0].message == f"session {APP}/u1/nope: not found in sqlite:///{db}"


def test_after_a_failed_read_the_pool_is_dropped_and_the_next_read_connects_anew(db: Path) -> None:
    """`ltm sync --follow` and the browser drop the pool after a failed read (`Database.drop_connections`)."""

    async def go() -> list[int]:
        async with SessionStore(sqlite_url(db)) as store:
            before = len(await store.list_sessions())
            pool = store.db.engine.pool
            await store.db.drop_connections()
            assert store.db.engine.pool is not pool  # a new pool: the old one's connections left unclosed
            return [before, len(await store.list_sessions())]

    assert asyncio.run(go()) == [1, 1]
