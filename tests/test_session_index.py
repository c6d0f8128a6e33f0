"""The index ADK's queries need (#43 item 5): `vmem doctor` reads ADK's get_session and
list_sessions plans on the database and says when a table lacks the index they need at its
size; `vmem session index --create [--dry-run]` adds it (ADK's own, CONCURRENTLY on PostgreSQL)
and the real google-adk (2.13, and 1.22.1, which made such databases) keeps working on it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import sqlite_url
from test_sessions_old_adk import run_old
from typer.testing import CliRunner

from veadk_mem.cli.app import app

ADK_INDEX = "idx_events_app_user_session_ts_id"
DEFINITION = ["app_name", "user_id", "session_id", "timestamp", "id"]


def vmem(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), env=env)


async def _adk_writes(url: str, sessions: int, events: int, prefix: str = "s") -> None:
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    service = DatabaseSessionService(url)
    try:
        for k in range(sessions):
            session = await service.create_session(app_name="idx_app", user_id=f"u{k % 3}", session_id=f"{prefix}{k}")
            for i in range(events):
                text = types.Content(role="user", parts=[types.Part(text=f"turn {i}")])
                await service.append_event(session, Event(author="user", content=text, timestamp=time.time()))
    finally:
        await service.close()


def _sync_url(url: str) -> str:
    return url.replace("+aiosqlite", "").replace("+aiomysql", "+pymysql")


def _indexes(url: str) -> dict[str, list[str]]:
    """The events table's indexes (name -> columns), read with plain SQL."""
    if url.startswith("postgresql"):
        import asyncpg

        async def read() -> dict[str, list[str]]:
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
            try:
                rows = await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'events'")
                return {r["indexname"]: [r["indexdef"]] for r in rows}
            finally:
                await conn.close()

        return asyncio.run(read())
    from sqlalchemy import create_engine, inspect

    engine = create_engine(_sync_url(url))
    try:
        with engine.connect() as conn:
            return {str(ix["name"]): list(ix["column_names"]) for ix in inspect(conn).get_indexes("events")}
    finally:
        engine.dispose()


def _drop_adk_index(url: str) -> None:
    """Make the database as ADK 1.x left it: no index on events but its primary key."""
    from sqlalchemy import create_engine, inspect, text

    if url.startswith("postgresql"):
        import asyncpg

        async def drop() -> None:
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
            try:
                await conn.execute(f"DROP INDEX {ADK_INDEX}")
            finally:
                await conn.close()

        asyncio.run(drop())
        return
    engine = create_engine(_sync_url(url))
    try:
        with engine.begin() as conn:
            if url.startswith("mysql"):  # InnoDB keeps an index for the foreign key: drop both
                for fk in inspect(conn).get_foreign_keys("events"):
                    conn.execute(text(f"ALTER TABLE events DROP FOREIGN KEY {fk['name']}"))
                conn.execute(text(f"DROP INDEX {ADK_INDEX} ON events"))
            else:
                conn.execute(text(f"DROP INDEX {ADK_INDEX}"))
    finally:
        engine.dispose()


def _doctor_row(runner: CliRunner, url: str, rows: int) -> dict[str, Any]:
    result = vmem(runner, "doctor", "--db-url", url, "--json", env={"VMEM_INDEX_ROWS": str(rows)})
    assert result.exit_code == 0, result.output
    [row] = [c for c in json.loads(result.stdout) if c["name"].startswith("session indexes")]
    return dict(row)


@pytest.mark.parametrize("server", ["sqlite", "pg_url", "mysql_url"])
def test_doctor_names_the_missing_index_at_the_databases_size_and_create_adds_adks_own(
    request: pytest.FixtureRequest, runner: CliRunner, tmp_path: Path, server: str
) -> None:
    url = sqlite_url(tmp_path / "idx.db") if server == "sqlite" else request.getfixturevalue(server)
    asyncio.run(_adk_writes(url, 6, 5))
    healthy = _doctor_row(runner, url, 1)
    assert healthy["status"] == "ok", healthy
    assert "each have their index" in healthy["detail"] and "ADK's list_sessions query:" in healthy["detail"]
    assert healthy["indexes"]["list_sessions"]["app_name"] == "idx_app"
    assert healthy["indexes"]["list_sessions"]["sessions"] == 6
    _drop_adk_index(url)
    assert ADK_INDEX not in _indexes(url)
    small = _doctor_row(runner, url, 1000)  # 30 events: a scan costs nothing, no index asked for
    assert small["status"] == "ok" and "not needed at 30 rows" in small["detail"], small
    big = _doctor_row(runner, url, 30)
    assert big["status"] == "warn", big
    assert "events: no index for ADK's get_session (30 rows" in big["detail"]
    assert f"`vmem session index --create` adds {ADK_INDEX}" in big["detail"]
    [events] = [f for f in big["indexes"]["findings"] if f["table"] == "events"]
    assert events["served_by"] is None and events["needed"] is True and events["plan"]
    dry = vmem(runner, "session", "index", "--create", "--dry-run", "--db-url", url, "--json")
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.stdout)["statements"]
    assert len(planned) == 1 and ADK_INDEX in planned[0]
    if server == "pg_url":
        assert planned[0].startswith(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {ADK_INDEX} ON events")
    if server == "mysql_url":
        assert planned[0].endswith("ALGORITHM=INPLACE LOCK=NONE")
    assert ADK_INDEX not in _indexes(url)  # a dry run changes nothing
    made = vmem(runner, "session", "index", "--create", "--db-url", url)
    assert made.exit_code == 0, made.output
    assert f"created {ADK_INDEX}" in made.stderr
    found = _indexes(url)[ADK_INDEX]
    if server == "pg_url":
        assert '(app_name, user_id, session_id, "timestamp" DESC, id DESC)' in found[0]
    else:
        assert found == DEFINITION
    after = _doctor_row(runner, url, 30)
    assert after["status"] == "ok" and "each have their index" in after["detail"], after
    again = vmem(runner, "session", "index", "--create", "--db-url", url)
    assert again.exit_code == 0 and "nothing to create" in again.stderr
    before = set(_indexes(url))
    asyncio.run(_adk_writes(url, 1, 2, "late"))  # google-adk 2.13 opens it: its own index check finds the index
    assert set(_indexes(url)) == before

    async def adk_reads() -> tuple[int, int]:
        from google.adk.sessions import DatabaseSessionService

        service = DatabaseSessionService(url)
        try:
            session = await service.get_session(app_name="idx_app", user_id="u0", session_id="s0")
            listed = await service.list_sessions(app_name="idx_app")
            assert session is not None
            return len(session.events), len(listed.sessions)
        finally:
            await service.close()

    assert asyncio.run(adk_reads()) == (5, 7)


def test_a_database_adk_1_22_made_has_no_events_index_and_keeps_working_after_create(
    runner: CliRunner, tmp_path: Path
) -> None:
    """ADK 1.x declared no index on events: its databases (VeADK's) read every event per get_session."""
    db = tmp_path / "adk-1.22.1.db"
    run_old("1.22.1", "write", f"sqlite:///{db}", str(tmp_path / "adk.json"))
    url = sqlite_url(db)
    assert ADK_INDEX not in _indexes(url)
    row = _doctor_row(runner, str(db), 1)
    assert row["status"] == "warn" and "events: no index for ADK's get_session" in row["detail"]
    made = vmem(runner, "session", "index", "--create", "--db-url", str(db), "--json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["created"] == [ADK_INDEX]
    assert _indexes(url)[ADK_INDEX] == DEFINITION
    run_old("1.22.1", "append", f"sqlite:///{db}", "old_app", "bob", "bob-s1")  # the old release still writes
    run_old("1.22.1", "read", f"sqlite:///{db}", str(tmp_path / "again.json"))
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["bob-s1"]["events"][-1]["content"]["parts"][0]["text"] == "one more thing"


def test_the_index_serving_a_query_is_one_led_by_the_columns_it_matches() -> None:
    """A plan's index name alone does not tell: PostgreSQL walks a whole primary key led by the event id."""
    from veadk_mem.sessions.indexes import _serving

    pk = ("events_pkey", ["id", "app_name", "user_id", "session_id"])
    assert _serving([pk], "events") is None
    assert _serving([pk, ("fk", ["app_name", "user_id", "session_id"])], "events") == "fk"
    assert _serving([pk, (ADK_INDEX, DEFINITION)], "events") == ADK_INDEX
    assert _serving([pk, ("x", ["session_id", "user_id", "app_name", "timestamp"])], "events") == "x"
    assert _serving([("app", ["app_name", "id"])], "events") is None
    assert _serving([("sessions_pkey", ["app_name", "user_id", "id"])], "sessions") == "sessions_pkey"
    assert _serving([("by_user", ["user_id", "app_name"])], "sessions") is None


def test_timing_adks_list_reads_the_state_tables_a_page_at_a_time(tmp_path: Path) -> None:
    """`doctor` / `session index` time ADK's list_sessions reads, the app's user_state rows among
    them: read through a cursor, not loaded whole (40 MB of user state took 87 MB at peak)."""
    import sqlite3
    import tracemalloc

    from sessions_helpers import APP, build

    from veadk_mem.sessions.indexes import inspect_indexes
    from veadk_mem.sessions.store import SessionStore

    path = tmp_path / "s.db"
    build(sqlite_url(path), {("u1", "s1"): 2})
    state = json.dumps({"note": "x" * 2000})
    rows = [(APP, f"bulk{i}", state, "2026-01-01 00:00:00.000000") for i in range(20_000)]
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO user_states (app_name, user_id, state, update_time) VALUES (?, ?, ?, ?)", rows)

    async def peak() -> tuple[float, int]:
        async with SessionStore(sqlite_url(path)) as store:
            tracemalloc.start()
            try:
                report = await inspect_indexes(store.db)
                return report.list_ms or 0.0, tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()

    took, most = asyncio.run(peak())
    assert took > 0
    assert most < 20_000_000, f"{most:,} bytes at peak for 40 MB of user_state rows"


def test_session_index_table_and_its_invalid_postgresql_index_is_made_anew(runner: CliRunner, pg_url: str) -> None:
    """A CREATE INDEX CONCURRENTLY that failed leaves an INVALID index of that name: doctor says so
    and --create drops it and builds it again (IF NOT EXISTS alone would keep the broken one)."""
    import asyncpg

    asyncio.run(_adk_writes(pg_url, 2, 2))

    async def invalidate() -> None:
        conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await conn.execute(f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{ADK_INDEX}'::regclass")
        finally:
            await conn.close()

    asyncio.run(invalidate())
    row = _doctor_row(runner, pg_url, 1_000_000)
    assert row["status"] == "warn" and f"{ADK_INDEX} is INVALID" in row["detail"], row
    table = vmem(runner, "session", "index", "--db-url", pg_url)
    assert table.exit_code == 0, table.output
    assert "invalid" in table.stdout and "get_session" in table.stdout
    made = vmem(runner, "session", "index", "--create", "--db-url", pg_url, "--json")
    assert made.exit_code == 0, made.output
    report = json.loads(made.stdout)
    assert report["statements"][0] == f"DROP INDEX CONCURRENTLY IF EXISTS {ADK_INDEX}"
    assert not any(f["invalid"] for f in report["findings"])
    assert _doctor_row(runner, pg_url, 1)["status"] == "ok"
