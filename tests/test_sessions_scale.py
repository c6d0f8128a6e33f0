"""Session commands at scale (issue #22): plan- and count-based checks, never timed.

Keyset paging of a session's events, the compaction count on ADK's full key, batched
deletes that never hold an agent's session for the whole run, and bounded import memory.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from google.adk.events import Event
from google.genai import types
from sessions_helpers import APP, adk_service, interrupt_when, sqlite_url
from sqlalchemy import event as sa_event

from veadk_mem.sessions.statements import Statements
from veadk_mem.sessions.store import SessionStore


def _url(request: pytest.FixtureRequest, tmp_path: Path, db: str) -> str:
    if db == "sqlite":
        return sqlite_url(tmp_path / "s.db")
    return str(request.getfixturevalue("pg_url" if db == "postgres" else "mysql_url"))


def _capture(store: SessionStore) -> list[tuple[str, Any]]:
    """Every SQL statement the store's engine runs, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        seen.append((statement, parameters))

    sa_event.listen(store.db.engine.sync_engine, "before_cursor_execute", record)
    return seen


async def _tied_session(url: str, n: int, *, user: str = "u", sid: str = "tied") -> list[tuple[float, str]]:
    """A session written by google-adk whose events share timestamps three by three; its (ts, id)s."""
    service = adk_service(url)
    try:
        session = await service.create_session(app_name=APP, user_id=user, session_id=sid, state={"k": 1})
        for i in range(n):
            text = types.Content(role="user", parts=[types.Part(text=f"message {i}")])
            await service.append_event(
                session, Event(author="user", invocation_id=f"i{i}", content=text, timestamp=1_790_000_000.0 + i // 3)
            )
        return [(e.timestamp, e.id) for e in session.events]
    finally:
        await service.close()


def _plan_rows(node: dict[str, Any], table: str = "events") -> int:
    """Rows the scans of `table` in a PostgreSQL JSON plan actually read."""
    rows = int(node.get("Actual Rows", 0)) if node.get("Relation Name") == table else 0
    return rows + sum(_plan_rows(child, table) for child in node.get("Plans", []))


# --- 1. keyset paging ---------------------------------------------------------------------


@pytest.mark.parametrize("db", ["sqlite", "postgres", "mysql"])
def test_get_json_pages_by_keyset_not_offset(request: pytest.FixtureRequest, tmp_path: Path, db: str) -> None:
    """Each page of `get --json` continues after the last (timestamp, id): no OFFSET, ties broken
    by id across page boundaries, and (PostgreSQL, MariaDB) a late page reads only its own rows."""
    url = _url(request, tmp_path, db)
    n, page = 40, 4
    written = asyncio.run(_tied_session(url, n))
    expected = [i for _, i in sorted(written)]

    async def go() -> tuple[list[str], list[tuple[str, Any]]]:
        async with SessionStore(url) as store:
            seen = _capture(store)
            text = "".join([p async for p in store.session_json(APP, "u", "tied", page=page)])
            tail = "".join([p async for p in store.session_json(APP, "u", "tied", last=10, page=page)])
            assert [e["id"] for e in json.loads(tail)["events"]] == expected[-10:]
            return [e["id"] for e in json.loads(text)["events"]], seen

    ids, seen = asyncio.run(go())
    assert ids == expected  # every event once, in (timestamp, id) order, ties split across pages
    pages = [(s, p) for s, p in seen if "event_data" in s and "FROM events" in s]
    assert len(pages) >= n // page
    # (SQLAlchemy writes `LIMIT ? OFFSET 0` for every sqlite LIMIT: only a non-zero offset skips rows)
    offsets = [p[-1] if db == "sqlite" else p for s, p in pages if "OFFSET" in s.upper()]
    assert all(o == 0 for o in offsets), f"a page of events was read with OFFSET: {offsets}"
    last_sql, last_params = pages[-1 - 3]  # the last page of the full read (the --events 10 read follows)
    if db == "postgres":
        assert _pg_rows_read(url, last_sql, last_params) <= page + 2  # + the rows tied on the cursor's time
    elif db == "mysql":
        assert _mysql_rows_read(url, last_sql, last_params) <= page + 2
    else:
        plan = _sqlite_plan(tmp_path / "s.db", last_sql, last_params)
        assert "idx_events_app_user_session_ts_id" in plan and "timestamp>" in plan.replace(" ", ""), plan


def _pg_rows_read(url: str, sql: str, params: Any) -> int:
    import asyncpg

    async def go() -> int:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            # a tiny table would be read whole whatever the query: ask for the index path the
            # statement allows, and count what it reads
            await conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_sort = off")
            plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *params)
            return _plan_rows(json.loads(plan)[0]["Plan"])
        finally:
            await conn.close()

    return asyncio.run(go())


def _mysql_rows_read(url: str, sql: str, params: Any) -> int:
    import pymysql

    name = url.rsplit("/", 1)[1].split("?")[0]
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", database=name)
    try:
        with conn.cursor() as cur:
            # a tiny table may be read whole whatever the query (InnoDB's statistics decide, and
            # they lag the inserts): ask for ADK's index, as the PostgreSQL check does, and
            # count what the statement then reads
            forced = sql.replace("FROM events ", "FROM events FORCE INDEX (idx_events_app_user_session_ts_id) ", 1)
            assert forced != sql, sql
            cur.execute("ANALYZE FORMAT=JSON " + forced, params)
            plan = json.loads(cur.fetchone()[0])
    finally:
        conn.close()

    def rows(node: Any) -> float:
        if isinstance(node, dict):
            own = float(node.get("r_rows", 0)) if node.get("table_name") == "events" else 0.0
            return own + sum(rows(v) for v in node.values())
        if isinstance(node, list):
            return sum(rows(v) for v in node)
        return 0.0

    return int(rows(plan))


def _sqlite_plan(path: Path, sql: str, params: Any) -> str:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return " | ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


# --- 2. the compaction count on ADK's key ---------------------------------------------------


async def _spread_sessions(url: str) -> None:
    """Sessions over two apps and two users (written by google-adk), one with a compaction event."""
    from google.adk.events import EventActions
    from google.adk.events.event_actions import EventCompaction

    service = adk_service(url)
    try:
        for app in ("app_a", "app_b"):
            for user in ("u1", "u2"):
                for k in range(3):
                    s = await service.create_session(app_name=app, user_id=user, session_id=f"{app}-{user}-s{k}")
                    say = types.Content(role="user", parts=[types.Part(text="hi")])
                    await service.append_event(s, Event(author="user", content=say, timestamp=100.0 + k))
                    if (app, user, k) == ("app_b", "u2", 1):
                        summary = types.Content(role="model", parts=[types.Part(text="greetings")])
                        done = EventCompaction(start_timestamp=100.0, end_timestamp=101.0, compacted_content=summary)
                        await service.append_event(
                            s, Event(author="user", timestamp=102.0, actions=EventActions(compaction=done))
                        )
    finally:
        await service.close()


@pytest.mark.parametrize("db", ["sqlite", "postgres", "mysql"])
def test_list_compaction_count_uses_adks_key(request: pytest.FixtureRequest, tmp_path: Path, db: str) -> None:
    """A page spanning apps and users counts compactions through the events index on
    (app_name, user_id, session_id): the plan's index condition names all three columns."""
    url = _url(request, tmp_path, db)
    asyncio.run(_spread_sessions(url))

    async def go() -> tuple[dict[tuple[str, str, str], int | None], list[tuple[str, Any]]]:
        async with SessionStore(url) as store:
            seen = _capture(store)
            found = await store.list_sessions(None, limit=100, compactions=True)
            return {(s.app_name, s.user_id, s.id): s.compaction_count for s in found}, seen

    counts, seen = asyncio.run(go())
    assert len(counts) == 12 and counts.pop(("app_b", "u2", "app_b-u2-s1")) == 1 and set(counts.values()) == {0}
    (sql, params), *_ = [(s, p) for s, p in seen if "FROM events" in s and "GROUP BY events.app_name" in s]
    if db == "postgres":
        plan = _pg_plan(url, sql, params)
        scans = [n for n in _nodes(plan) if n.get("Relation Name") == "events"]
        assert scans and not [n for n in scans if n["Node Type"] == "Seq Scan"], scans
        index_reads = [n for n in _nodes(plan) if "events" in n.get("Index Name", "")]
        assert index_reads, plan
        for n in index_reads:  # Index Scan, or the Bitmap Index Scans under a BitmapOr
            cond = n.get("Index Cond", "")
            assert all(c in cond for c in ("app_name", "user_id", "session_id")), json.dumps(plan, indent=1)
    elif db == "mysql":
        rows, key_bytes = _mysql_explain(url, sql, params)
        events = [r for r in rows if r["table"] == "events"]
        assert events, rows
        for r in events:  # a range over the index's first three columns: app_name, user_id, session_id
            assert r["type"] in ("range", "ref") and r["key"] == "idx_events_app_user_session_ts_id", r
            assert int(r["key_len"]) >= key_bytes, (r, key_bytes)
    else:
        plan = _sqlite_plan(tmp_path / "s.db", sql, params)
        assert "app_name=? AND user_id=? AND session_id=?" in plan, plan


@pytest.mark.parametrize("db", ["sqlite", "postgres", "mysql"])
def test_a_list_reads_no_event_unless_compactions_are_asked_for(
    request: pytest.FixtureRequest, tmp_path: Path, db: str
) -> None:
    """`session list` is index counts only: no statement reads an event's JSON, whatever the
    sessions hold (a page with a 200,000-event session read it all on MariaDB: 1.5-2.4 s);
    --compactions is the one listing that reads the events, and counts what ADK wrote."""
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    url = _url(request, tmp_path, db)
    asyncio.run(_spread_sessions(url))
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        seen.append(statement)

    from sqlalchemy.engine import Engine

    sa_event.listen(Engine, "before_cursor_execute", record)
    try:
        plain = CliRunner().invoke(app, ["session", "list", "--db-url", url, "--json"])
        plain_sql, seen[:] = list(seen), []
        counted = CliRunner().invoke(app, ["session", "list", "--db-url", url, "--json", "--compactions"])
    finally:
        sa_event.remove(Engine, "before_cursor_execute", record)
    assert plain.exit_code == 0 and counted.exit_code == 0, plain.output + counted.output
    assert plain_sql and not [s for s in plain_sql if "event_data" in s], plain_sql
    assert [s for s in seen if "event_data" in s], seen
    rows = json.loads(plain.stdout)
    assert len(rows) == 12 and all("compactionCount" not in r and r["eventCount"] > 0 for r in rows)
    by_key = {(r["appName"], r["userId"], r["id"]): r["compactionCount"] for r in json.loads(counted.stdout)}
    assert by_key.pop(("app_b", "u2", "app_b-u2-s1")) == 1 and set(by_key.values()) == {0}


def _pg_plan(url: str, sql: str, params: Any) -> dict[str, Any]:
    import asyncpg

    async def go() -> dict[str, Any]:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            # a tiny table is cheapest to read whole: ask for the best index path the statement allows
            await conn.execute("SET enable_seqscan = off")
            plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *params)
            return dict(json.loads(plan)[0]["Plan"])
        finally:
            await conn.close()

    return asyncio.run(go())


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


def _mysql_explain(url: str, sql: str, params: Any) -> tuple[list[dict[str, Any]], int]:
    """MariaDB's EXPLAIN rows of `sql`, and the index key length of (app_name, user_id, session_id)."""
    import pymysql
    import pymysql.cursors

    name = url.rsplit("/", 1)[1].split("?")[0]
    conn = pymysql.connect(
        host="127.0.0.1", port=3306, user="root", password="", database=name, cursorclass=pymysql.cursors.DictCursor
    )
    try:
        with conn.cursor() as cur:
            # with a dozen rows InnoDB's lagging statistics may pick a full scan whatever the
            # query: ask for ADK's index and check how much of its key the statement can use
            forced = sql.replace("FROM events ", "FROM events FORCE INDEX (idx_events_app_user_session_ts_id) ", 1)
            assert forced != sql, sql
            cur.execute("EXPLAIN " + forced, params)
            rows = list(cur.fetchall())
            cur.execute(
                "SELECT SUM(CHARACTER_OCTET_LENGTH + 2 + (IS_NULLABLE = 'YES')) AS n FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'events' "
                "AND COLUMN_NAME IN ('app_name', 'user_id', 'session_id')",
                (name,),
            )
            key_bytes = int(cur.fetchone()["n"])
    finally:
        conn.close()
    return rows, key_bytes


# --- 4. delete in batches of short transactions ----------------------------------------------


def test_delete_runs_in_short_batches_while_an_agent_appends(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent (google-adk's DatabaseSessionService) resumes one of the sessions being deleted
    while `delete --older-than` runs: its append succeeds at once, the session is kept and named,
    and the delete ran as many transactions, each holding only its own batch's rows."""
    import time

    from veadk_mem.sessions.store import SessionFilter

    monkeypatch.setenv("VMEM_DELETE_BATCH", "2")
    n = 240
    service = adk_service(pg_url)

    async def go() -> None:
        try:
            for k in range(n):
                await service.create_session(app_name=APP, user_id=f"u{k % 7}", session_id=f"old{k:04d}")
            async with SessionStore(pg_url) as store:
                listed = await store.list_sessions(SessionFilter(until=time.time() + 60), oldest_first=True)
                last = listed[-1]  # the last to be deleted
                session = await service.get_session(app_name=APP, user_id=last.user_id, session_id=last.id)
                assert session is not None

                async def agent() -> float:
                    import asyncpg

                    watch = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
                    try:  # wait until the delete has committed some of its work
                        while await watch.fetchval("SELECT count(*) FROM sessions") == n:
                            await asyncio.sleep(0.001)
                    finally:
                        await watch.close()
                    started = time.monotonic()
                    say = types.Content(role="user", parts=[types.Part(text="I am back")])
                    await asyncio.wait_for(
                        service.append_event(session, Event(author="user", content=say, timestamp=time.time())),
                        timeout=30,
                    )
                    return time.monotonic() - started

                watcher = asyncio.ensure_future(agent())
                report = await store.delete_sessions(SessionFilter(until=time.time() + 60))
                await watcher
                assert store.rows.delete_transactions > 1
            assert [str(k) for k in report.skipped] == [f"{APP}/{last.user_id}/{last.id}"]
            assert len(report.sessions) == n - 1
            kept = await service.get_session(app_name=APP, user_id=last.user_id, session_id=last.id)
            assert kept is not None and kept.events[-1].content.parts[0].text == "I am back"
            left = await service.list_sessions(app_name=APP)
            assert [s.id for s in left.sessions] == [last.id]
        finally:
            await service.close()

    asyncio.run(go())


def test_a_sqlite_delete_batch_is_a_few_statements_whatever_the_users(tmp_path: Path) -> None:
    """sqlite has one writer: a batch's transaction (BEGIN IMMEDIATE, the agent waits meanwhile)
    runs three statements (the update-time check, events, sessions), not one per (app, user) pair,
    each on ADK's key index; it deletes exactly the batch and keeps a session resumed meanwhile."""
    import time

    from veadk_mem.sessions.store import SessionFilter

    url = sqlite_url(tmp_path / "s.db")
    service = adk_service(url)
    n = 60

    async def go() -> None:
        try:
            for k in range(n):  # one session per user: a pair per session
                session = await service.create_session(app_name=APP, user_id=f"u{k:03d}", session_id=f"old{k}")
                say = types.Content(role="user", parts=[types.Part(text="hi")])
                for i in range(3):
                    stamp = 1_700_000_000.0 + i
                    await service.append_event(session, Event(author="user", content=say, timestamp=stamp))
            async with SessionStore(url) as store:
                listed = await store.list_sessions(SessionFilter(until=time.time() + 60), oldest_first=True)
                resumed = listed[-1]
                session = await service.get_session(app_name=APP, user_id=resumed.user_id, session_id=resumed.id)
                assert session is not None
                say = types.Content(role="user", parts=[types.Part(text="back")])
                await service.append_event(session, Event(author="user", content=say, timestamp=time.time()))
                seen = _capture(store)
                report = await store.delete_sessions(listed, recheck=True, batch=n)
                writes = [sql for sql, _ in seen if not sql.lstrip().upper().startswith("BEGIN")]
                assert len(writes) == 3, writes
                async with store.db.engine.connect() as conn:
                    for sql, params in seen[-2:]:  # the two deletes
                        plan = [r[-1] for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
                        assert any(p.startswith("SEARCH") and "USING INDEX" in p for p in plan), plan
                        assert not any(p.startswith("SCAN sessions") or p.startswith("SCAN events") for p in plan)
            assert [str(k) for k in report.skipped] == [str(resumed.key)]
            assert (len(report.sessions), report.events) == (n - 1, 3 * (n - 1))
            left = await service.list_sessions(app_name=APP)
            assert [s.id for s in left.sessions] == [resumed.id]
        finally:
            await service.close()

    asyncio.run(go())


def test_a_delete_stopped_part_way_says_how_far_it_got_and_a_rerun_finishes(
    pg_url: str, runner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure in a later batch: the batches before it stay deleted, the error says how many,
    and the same command run again deletes the rest."""
    import asyncpg

    from veadk_mem.cli.app import app

    monkeypatch.setenv("VMEM_DELETE_BATCH", "3")
    service = adk_service(pg_url)

    async def setup() -> None:
        try:
            for k in range(10):
                await service.create_session(app_name=APP, user_id="u", session_id=f"old{k:02d}")
        finally:
            await service.close()
        conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
        try:  # the database refuses to delete one session of the third batch, for now
            await conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused by a test'; END $$; "
                "CREATE TRIGGER refuse BEFORE DELETE ON sessions FOR EACH ROW "
                "WHEN (OLD.id = 'old07') EXECUTE FUNCTION refuse()"
            )
        finally:
            await conn.close()

    async def drop_trigger() -> None:
        conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await conn.execute("DROP TRIGGER refuse ON sessions")
        finally:
            await conn.close()

    asyncio.run(setup())
    args = ["session", "delete", "--db-url", pg_url, "--app", APP, "--until", "2100-01-01", "--yes"]
    failed = runner.invoke(app, args)
    assert failed.exit_code == 1, failed.output
    assert "6 of 10 session(s) (0 event(s)) were deleted and committed before it" in failed.stderr
    assert "run the same command again to finish" in failed.stderr
    left = runner.invoke(app, ["session", "list", "--db-url", pg_url, "--json"])
    assert sorted(s["id"] for s in json.loads(left.stdout)) == [f"old{k:02d}" for k in range(6, 10)]
    asyncio.run(drop_trigger())
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "deleted 4 sessions" in again.stderr
    from veadk_mem.ops.history import HistoryLog, default_path

    # the history holds what each run committed: the failed one's six, with its exit code
    done, stopped = HistoryLog(default_path()).entries(command="session delete")
    assert (stopped["outcome"], stopped["exit_code"], stopped["counts"]) == ("failed", 1, {"sessions": 6})
    assert sorted(stopped["ids"]) == [f"{APP}/u/old{k:02d}" for k in range(6)]
    assert (done["outcome"], done["counts"], done["ids_total"]) == ("ok", {"sessions": 4}, 4)


def test_ctrl_c_during_a_delete_says_how_far_it_got(pg_url: str, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the process group) part-way through a batched delete: exit 130, and the
    message counts the sessions deleted and committed, which are exactly the ones gone."""
    import os
    import subprocess
    import sys

    import asyncpg

    plain = pg_url.replace("postgresql+asyncpg", "postgresql")
    n = 3000

    async def setup() -> None:
        service = adk_service(pg_url)  # ADK's tables, then many sessions at once
        try:
            await service.create_session(app_name=APP, user_id="u", session_id="first")
        finally:
            await service.close()
        conn = await asyncpg.connect(plain)
        try:
            await conn.execute(
                "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) "
                "SELECT $1, 'u', 'old' || lpad(g::text, 5, '0'), '{}', now() - interval '400 days', "
                "now() - interval '400 days' + g * interval '1 second' FROM generate_series(1, $2) g",
                APP,
                n,
            )
        finally:
            await conn.close()

    async def count() -> int:
        conn = await asyncpg.connect(plain)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM sessions WHERE id LIKE 'old%'"))
        finally:
            await conn.close()

    asyncio.run(setup())
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1", "VMEM_DELETE_BATCH": "1"}
    cmd = [sys.executable, "-m", "veadk_mem", "session", "delete", "--older-than", "30d", "--yes", "--db-url", pg_url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    text = interrupt_when(proc, lambda: asyncio.run(count()) != n)
    left = asyncio.run(count())
    assert proc.returncode == 130, text
    assert 0 < left < n, left
    assert f"interrupted: {n - left:,} of {n:,} session(s) (0 event(s)) were deleted and committed" in text, text
    assert "run the same command again to finish" in text


def test_a_set_of_session_keys_is_bound_so_one_statement_serves_every_batch() -> None:
    """Building and compiling a condition of literal keys for each export batch was a quarter
    of an export's CPU. The key set is bound at execution: the SQL is the same for any keys
    (PostgreSQL: three arrays through unnest; sqlite: a JSON list through json_each;
    MySQL/MariaDB: one row-value IN list, never an OR of (app, user) groups, which made MariaDB
    scan and sort the whole events table for each batch)."""
    from sqlalchemy import column, select
    from sqlalchemy.dialects import mysql, postgresql, sqlite

    dialects = {"sqlite": sqlite.dialect(), "postgresql": postgresql.dialect(), "mysql": mysql.dialect()}
    cols = (column("app_name"), column("user_id"), column("session_id"))
    few = [("a", "u1", "s1"), ("a", "u1", "s2"), ("b", "u2", "s3")]
    many = [(f"app{i % 3}", f"user{i % 7}", f"s{i}") for i in range(40)]
    for url in ("sqlite+aiosqlite:///x.db", "postgresql://u@127.0.0.1/x", "mysql://root@127.0.0.1:3306/x"):
        store = SessionStore(url)
        sql = str(select(cols[2]).where(store.db.key_match(cols)).compile(dialect=dialects[store.db.dialect]))
        assert " OR " not in sql and "s1" not in sql, sql
        few_params, many_params = store.db.key_params(few), store.db.key_params(many)
        assert set(few_params) == set(many_params) and few_params != many_params
        if store.db.dialect == "mysql":
            assert "(app_name, user_id, session_id) IN (__[POSTCOMPILE_k_keys])" in sql, sql
            assert few_params == {"k_keys": few}
        elif store.db.dialect == "postgresql":
            assert "unnest(CAST(" in sql, sql
            assert few_params == {"k_apps": ["a", "a", "b"], "k_users": ["u1", "u1", "u2"], "k_ids": ["s1", "s2", "s3"]}
        else:
            assert "json_each(" in sql, sql
            assert json.loads(few_params["k_json"]) == [list(k) for k in few]


@pytest.mark.parametrize("db", ["sqlite", "postgres", "mysql"])
def test_export_batches_read_every_event_through_adks_key(
    request: pytest.FixtureRequest, tmp_path: Path, db: str
) -> None:
    """An export batch's events come through the events index on (app_name, user_id,
    session_id), whatever apps and users the batch spans, and the export is complete."""
    url = _url(request, tmp_path, db)
    asyncio.run(_spread_sessions(url))

    async def go() -> tuple[list[dict[str, Any]], str, dict[str, Any], Any]:
        async with SessionStore(url) as store:
            lines = [json.loads(x) for x in "".join([p async for p in store.export_jsonl(batch_events=3)]).splitlines()]
            found = await store.list_sessions(None)
            params = store.db.key_params([(s.app_name, s.user_id, s.id) for s in found])
            compiled = Statements(store.db).batch_events_stmt().compile(dialect=store.db.engine.dialect)
            return lines, str(compiled), params, compiled

    lines, sql, params, compiled = asyncio.run(go())
    sessions = {(x["appName"], x["userId"], x["id"]): len(x["events"]) for x in lines if "kind" not in x}
    assert len(sessions) == 12 and sessions.pop(("app_b", "u2", "app_b-u2-s1")) == 2 and set(sessions.values()) == {1}
    if db == "postgres":
        args = [params[name] for name in compiled.positiontup]
        plan = _pg_plan(url, sql, args)
        scans = [n for n in _nodes(plan) if n.get("Relation Name") == "events"]
        assert scans and not [n for n in scans if n["Node Type"] == "Seq Scan"], scans
        for n in scans:
            cond = n.get("Index Cond", "")
            assert all(c in cond for c in ("app_name", "user_id", "session_id")), json.dumps(plan, indent=1)
    elif db == "mysql":
        import pymysql.converters

        keys = ", ".join(
            "(" + ", ".join(pymysql.converters.escape_string(v).join("''") for v in key) + ")"
            for key in params["k_keys"]
        )
        flat = sql.replace("%s", "%%s").replace("(__[POSTCOMPILE_k_keys])", f"({keys})")
        rows, key_bytes = _mysql_explain(url, flat.replace("%%s", "%s"), ())
        events = [r for r in rows if r["table"] == "events"]
        assert events, rows
        for r in events:
            assert r["type"] in ("range", "ref") and r["key"] == "idx_events_app_user_session_ts_id", r
            assert int(r["key_len"]) >= key_bytes, (r, key_bytes)
    else:
        plan = _sqlite_plan(tmp_path / "s.db", sql, [params["k_json"]])
        assert "app_name=? AND user_id=? AND session_id=?" in plan, plan


def test_an_export_batch_reads_its_rows_and_events_in_one_snapshot(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's session rows and events come from one REPEATABLE READ snapshot, also when the
    statements go straight to asyncpg: an event an agent appends between the two reads is in
    neither, so the exported session matches its row. (SQLAlchemy's adapter sends BEGIN with
    its own first statement; a first statement sent to the driver ran outside the transaction.)"""
    import asyncpg

    asyncio.run(_spread_sessions(pg_url))
    plain = pg_url.replace("postgresql+asyncpg", "postgresql")

    async def go() -> list[dict[str, Any]]:
        async with SessionStore(pg_url) as store:
            summaries = Statements.summaries
            appended: list[int] = []

            async def then_append(self: Statements, *args: Any, **kwargs: Any) -> Any:
                found = await summaries(self, *args, **kwargs)
                if len(args) > 2 and args[2] is not None and not appended:  # between a batch's two reads
                    conn = await asyncpg.connect(plain)
                    try:
                        for s in found:
                            await conn.execute(
                                "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, "
                                "event_data) SELECT 'late-' || $3, app_name, user_id, session_id, 'late', "
                                "timestamp + interval '1 minute', event_data FROM events "
                                "WHERE app_name = $1 AND user_id = $2 AND session_id = $3 LIMIT 1",
                                s.app_name,
                                s.user_id,
                                s.id,
                            )
                    finally:
                        await conn.close()
                    appended.append(len(found))
                return found

            monkeypatch.setattr(Statements, "summaries", then_append)
            text = "".join([p async for p in store.export_jsonl()])
            assert appended and appended[0] == 12
            return [json.loads(x) for x in text.splitlines() if '"events"' in x]

    lines = asyncio.run(go())
    assert len(lines) == 12
    assert not [e["id"] for x in lines for e in x["events"] if e["id"].startswith("late-")]


@pytest.mark.mysql
def test_a_keyset_page_on_mariadb_is_a_range_on_the_timestamp_not_a_read_from_the_first_event(
    mysql_url: str, tmp_path: Path
) -> None:
    """MariaDB served `get --json`'s later pages by the index's first three columns (`ref`),
    reading the session from its first event for every page (quadratic: a 200,000-event session
    at 14,000 events/s). The page statement vmem runs must be a range that uses the timestamp."""
    import pymysql
    import pymysql.cursors

    base = 1_790_000_000.0
    events = [
        {"id": f"e{i:05d}", "invocationId": f"i{i}", "author": "user", "timestamp": base + i,
         "content": {"role": "user", "parts": [{"text": f"turn {i}"}]}}
        for i in range(2_500)
    ]  # fmt: skip
    line = {"id": "long", "appName": APP, "userId": "u", "state": {}, "lastUpdateTime": base + 3_000, "events": events}
    source = tmp_path / "long.jsonl"
    source.write_text(json.dumps(line) + "\n", encoding="utf-8")

    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    result = CliRunner().invoke(app, ["session", "import", str(source), "--db-url", mysql_url, "-q"])
    assert result.exit_code == 0, result.output

    async def go() -> tuple[int, list[tuple[str, Any]]]:
        async with SessionStore(mysql_url) as store:
            seen = _capture(store)
            text = "".join([piece async for piece in store.session_json(APP, "u", "long", page=1000)])
            return len(json.loads(text)["events"]), seen

    count, seen = asyncio.run(go())
    assert count == 2_500
    later = [(s, p) for s, p in seen if "FROM events" in s and "LIMIT" in s and "events.timestamp >=" in s]
    assert later, [s for s, _ in seen]
    name = mysql_url.rsplit("/", 1)[1].split("?")[0]
    conn = pymysql.connect(
        host="127.0.0.1", port=3306, user="root", password="", database=name, cursorclass=pymysql.cursors.DictCursor
    )
    try:
        with conn.cursor() as cur:
            cur.execute("ANALYZE TABLE events")
            for sql, params in later:
                cur.execute("EXPLAIN " + sql, params)
                [row] = cur.fetchall()
                assert row["type"] == "range" and row["key"] == "idx_events_app_user_session_ts_id", row
    finally:
        conn.close()


@pytest.mark.mysql
def test_a_mariadb_import_batch_locks_only_the_rows_it_writes(
    mysql_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import batch's locking reads (the stored update times, the app and user state rows)
    lock the rows they match, not every row a scan passes: under REPEATABLE READ, MariaDB took
    a whole small table's rows for an `IN` list it chose to scan, the agent's own session and
    state rows among them, and an agent appending there waited for the batch's commit (1.9 s
    on one machine); a list of more than 1,000 values, which MariaDB turns into a semi-join,
    kept them under READ COMMITTED too, and so did a scan that had waited for a row the agent
    held as it passed. Probed from another connection inside the batch's transaction, while
    the table holds little more than the agent's session."""
    import pymysql
    from sqlalchemy.engine import make_url

    from veadk_mem.sessions import upsert

    async def agent() -> None:
        service = adk_service(mysql_url)
        try:
            await service.create_session(
                app_name="agent_app", user_id="agent_user", session_id="live", state={"app:a": 1, "user:u": 1}
            )
        finally:
            await service.close()

    asyncio.run(agent())
    with (tmp_path / "s.jsonl").open("w", encoding="utf-8") as out:
        for s in range(600):  # over 1,000 values in one IN list: MariaDB makes it a semi-join
            line = {"id": f"s{s}", "appName": f"app{s % 5}", "userId": f"u{s % 7}", "state": {"app:n": s, "user:m": s}}
            line["events"] = [{"id": f"e{s}", "author": "user", "timestamp": 1.79e9 + s}]
            out.write(json.dumps(line) + "\n")
    url = make_url(mysql_url)
    probes: list[list[str]] = []
    real = upsert.Upsert._write_records

    async def then_probe(self: Any, conn: Any, *args: Any, **kwargs: Any) -> None:
        await real(self, conn, *args, **kwargs)
        other = pymysql.connect(host=url.host, port=url.port, user="root", password="", database=url.database)
        blocked = []
        try:
            with other.cursor() as cur:
                for table, where in (
                    ("sessions", "app_name = 'agent_app' AND user_id = 'agent_user' AND id = 'live'"),
                    ("app_states", "app_name = 'agent_app'"),
                    ("user_states", "app_name = 'agent_app' AND user_id = 'agent_user'"),
                ):
                    try:
                        cur.execute(f"SELECT 1 FROM {table} WHERE {where} FOR UPDATE NOWAIT")
                    except pymysql.err.OperationalError as exc:
                        blocked.append(f"{table}: {exc.args[0]}")
            other.rollback()
        finally:
            other.close()
        probes.append(blocked)

    monkeypatch.setattr(upsert.Upsert, "_write_records", then_probe)
    stored_times = upsert.Upsert.stored_times

    async def while_the_agent_holds_its_row(self: Any, conn: Any, keys: Any) -> Any:
        """The agent's own transaction holds its session row as the batch's locking read runs."""
        import threading

        held, done = threading.Event(), threading.Event()

        def agent_turn() -> None:
            own = pymysql.connect(host=url.host, port=url.port, user="root", password="", database=url.database)
            try:
                with own.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute(
                        "SELECT 1 FROM sessions WHERE app_name = 'agent_app' AND user_id = 'agent_user' "
                        "AND id = 'live' FOR UPDATE"
                    )
                    held.set()
                    done.wait(0.3)
                own.commit()
            finally:
                own.close()

        turn = threading.Thread(target=agent_turn)
        turn.start()
        held.wait(10)
        try:
            return await stored_times(self, conn, keys)
        finally:
            done.set()
            turn.join()

    monkeypatch.setattr(upsert.Upsert, "stored_times", while_the_agent_holds_its_row)

    async def go() -> None:
        async with SessionStore(mysql_url) as store:
            from veadk_mem.sessions.validate import iter_import_records

            records = list(iter_import_records(tmp_path / "s.jsonl"))
            await store.import_records(records)

    asyncio.run(go())
    assert probes and probes == [[]] * len(probes), probes


@pytest.mark.mysql
def test_a_session_an_agent_creates_while_a_mariadb_batch_writes_it_stops_the_import(
    mysql_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At READ COMMITTED no gap lock keeps an agent from creating, between the batch's read
    of the stored sessions and its insert, a session the batch is about to write: the batch's
    insert is then a duplicate key, the batch rolls back whole, the import stops naming the
    session (exit 1), and the agent's session stays as the agent wrote it."""
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app
    from veadk_mem.sessions import upsert

    with (tmp_path / "s.jsonl").open("w", encoding="utf-8") as out:
        for s in range(3):
            line = {"id": f"s{s}", "appName": APP, "userId": "u", "state": {"from": "file"}}
            line["events"] = [{"id": f"e{s}", "author": "user", "timestamp": 1.79e9 + s}]
            out.write(json.dumps(line) + "\n")
    stored_times = upsert.Upsert.stored_times

    async def then_the_agent_creates_one(self: Any, conn: Any, keys: Any) -> Any:
        found = await stored_times(self, conn, keys)
        service = adk_service(mysql_url)
        try:
            await service.create_session(app_name=APP, user_id="u", session_id="s1", state={"from": "agent"})
        finally:
            await service.close()
        return found

    monkeypatch.setattr(upsert.Upsert, "stored_times", then_the_agent_creates_one)
    result = CliRunner().invoke(app, ["session", "import", str(tmp_path / "s.jsonl"), "--db-url", mysql_url])
    assert result.exit_code == 1, result.output
    assert "Duplicate entry" in result.stderr and "s1" in result.stderr, result.stderr

    async def stored() -> list[tuple[str, dict[str, Any]]]:
        async with SessionStore(mysql_url) as store:
            return [(s.id, s.state) for s in await store.list_sessions(None)]

    assert asyncio.run(stored()) == [("s1", {"from": "agent"})]
