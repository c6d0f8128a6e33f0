"""`[tuning] fast_paths`: off, an import takes the plain paths, and writes the same rows.

With the switch off the import's reader child process is never started and rows are inserted
through SQLAlchemy instead of the raw driver plans (`upsert.insert_plans`); the database that
results is compared row by row with the one the fast paths write, so the two cannot drift.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import build, sqlite_url

from veadk_mem.sessions import import_child
from veadk_mem.sessions.importer import import_file
from veadk_mem.sessions.store import SessionStore
from veadk_mem.sessions.upsert import Upsert

SESSIONS = {("alice", "s1"): 40, ("alice", "s2"): 3, ("bob", "s3"): 17, ("bob", "empty"): 0}


def _rows(path: Path) -> dict[str, list[Any]]:
    with sqlite3.connect(path) as conn:
        return {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
            for table in ("sessions", "events", "app_states", "user_states")
        }


def test_off_no_reader_child_however_large_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jsonl = tmp_path / "a.jsonl"
    record = json.dumps({"id": "s", "appName": "a", "userId": "u"})
    jsonl.write_text(f"{record}\n{record}\n", encoding="utf-8")
    monkeypatch.setattr(import_child, "PROCESS_FROM", 10)
    monkeypatch.setattr(import_child.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.delenv("VMEM_FAST_PATHS", raising=False)
    assert import_child.worthwhile(jsonl)
    monkeypatch.setenv("VMEM_FAST_PATHS", "false")
    assert not import_child.worthwhile(jsonl)


def test_an_import_writes_the_same_rows_with_the_fast_paths_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = sqlite_url(tmp_path / "source.db")
    build(source, SESSIONS)

    async def export() -> str:
        async with SessionStore(source) as store:
            return "".join([p async for p in store.export_jsonl()])

    dump = tmp_path / "dump.jsonl"
    dump.write_text(asyncio.run(export()), encoding="utf-8")
    monkeypatch.setattr(import_child, "worthwhile", lambda source: True)  # the child, when allowed
    plans: dict[str, Any] = {}

    for name, flag in (("fast", "true"), ("plain", "false")):
        monkeypatch.setenv("VMEM_FAST_PATHS", flag)

        async def go(target: Path = tmp_path / f"{name}.db", key: str = name) -> None:
            async with SessionStore(sqlite_url(target), create=True) as store:
                report = await import_file(store, dump)
                assert report.sessions == len(SESSIONS)
                plans[key] = Upsert(store.db).insert_plans()

        asyncio.run(go())
    assert plans["fast"] is not None and plans["plain"] is None
    fast, plain = _rows(tmp_path / "fast.db"), _rows(tmp_path / "plain.db")
    assert len(fast["events"]) == sum(SESSIONS.values())
    # sessions and events: equal column by column, events' JSON text and times included
    assert fast["sessions"] == plain["sessions"] and fast["events"] == plain["events"]
    # state rows: their update time is the import's own clock; the rest is equal
    for table in ("app_states", "user_states"):
        assert [r[:-1] for r in fast[table]] == [r[:-1] for r in plain[table]] != []
