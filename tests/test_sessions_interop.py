"""vmem and the real google-adk on the same databases: sqlite, PostgreSQL and MariaDB, both directions."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import APP, adk_get, adk_service, adk_view, build, build_v0, run_sql, sqlite_url

from veadk_mem.sessions.layout import Layout
from veadk_mem.sessions.notes import Notes
from veadk_mem.sessions.store import SessionFilter, SessionKey, SessionStore, iter_import_records

SESSIONS = {("alice", "s1"): 12, ("alice", "s2"): 3, ("bob", "s3"): 7, ("bob", "empty"): 0}


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind, as an async SQLAlchemy URL."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "adk.db")
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


async def _store_session(url: str, app: str, user: str, sid: str) -> Any:
    async with SessionStore(url) as store:
        return await store.get_session(app, user, sid)


def test_adk_written_sessions_read_back_identically(db: str) -> None:
    build(db, SESSIONS)

    async def go() -> None:
        async with SessionStore(db) as store:
            assert store.db.layout is Layout.V1
            summaries = await store.list_sessions(SessionFilter(app=APP))
            counts = {(s.user_id, s.id): s.event_count for s in summaries}
            assert counts == SESSIONS
            for (user, sid), _n in SESSIONS.items():
                ours = await store.get_session(APP, user, sid)
                theirs = await adk_get(db, APP, user, sid)
                assert theirs is not None
                assert adk_view(ours) == adk_view(theirs)
                # the list's merged state is ADK's state too
                assert next(s for s in summaries if s.id == sid).state == theirs.state
            last = await store.get_session(APP, "alice", "s1", last=4)
            full = await store.get_session(APP, "alice", "s1")
            assert [e.id for e in last.events] == [e.id for e in full.events[-4:]]

    asyncio.run(go())


def test_vmem_import_reads_back_in_adk_and_adk_keeps_appending(db: str, tmp_path: Path) -> None:
    source = sqlite_url(tmp_path / "source.db")
    build(source, SESSIONS)
    dump = tmp_path / "dump.jsonl"

    async def go() -> None:
        async with SessionStore(source) as src:
            dump.write_text("".join([p async for p in src.export_jsonl()]), encoding="utf-8")
        async with SessionStore(db, create=True) as dst:
            report = await dst.import_records(iter_import_records(dump))
            assert report.created_tables and report.layout == "v1"
            assert report.sessions == len(SESSIONS)
        for user, sid in SESSIONS:
            original = await adk_get(source, APP, user, sid)
            imported = await adk_get(db, APP, user, sid)
            assert original is not None and imported is not None
            assert adk_view(imported) == adk_view(original)
        # the agent that owns the database keeps working on an imported session
        service = adk_service(db)
        try:
            session = await service.get_session(app_name=APP, user_id="alice", session_id="s2")
            from google.adk.events import Event, EventActions

            await service.append_event(session, Event(author="agent", actions=EventActions(state_delta={"x": 1})))
            again = await service.get_session(app_name=APP, user_id="alice", session_id="s2")
            assert len(again.events) == SESSIONS[("alice", "s2")] + 1
        finally:
            await service.close()

    asyncio.run(go())


def test_import_twice_changes_nothing_and_roundtrips_across_databases(db: str, tmp_path: Path) -> None:
    source = sqlite_url(tmp_path / "source.db")
    build(source, SESSIONS)
    back = sqlite_url(tmp_path / "back.db")

    async def export(url: str) -> str:
        async with SessionStore(url) as store:
            return "".join([p async for p in store.export_jsonl()])

    async def load(url: str, text: str) -> None:
        path = tmp_path / "in.jsonl"
        path.write_text(text, encoding="utf-8")
        async with SessionStore(url, create=True) as store:
            await store.import_records(iter_import_records(path))

    async def go() -> None:
        first = await export(source)
        await load(db, first)
        once = await export(db)
        await load(db, first)
        assert await export(db) == once
        await load(back, once)  # sqlite -> db -> sqlite
        assert _lines(await export(back)) == _lines(first)

    asyncio.run(go())


def test_an_event_whose_json_lacks_its_time_reads_with_the_column_as_adk_does(db: str, tmp_path: Path) -> None:
    """ADK's v1 reader takes an event's time from its stored JSON, from the time column only
    when the JSON has none; vmem's get, get --json and export read that column as text on
    MySQL (codec.to_epoch parses it), which must give ADK's time to the microsecond."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    build(db, SESSIONS)

    async def strip() -> list[str]:
        theirs = await adk_get(db, APP, "alice", "s1")
        assert theirs is not None
        ids = [theirs.events[1].id, theirs.events[7].id]
        engine = create_async_engine(db)
        try:
            async with engine.begin() as conn:
                for eid in ids:
                    found = await conn.execute(text("SELECT event_data FROM events WHERE id = :i"), {"i": eid})
                    raw = found.scalar_one()
                    data = json.loads(raw) if isinstance(raw, str) else dict(raw)
                    assert data.pop("timestamp") is not None
                    value = "CAST(:d AS JSONB)" if engine.dialect.name == "postgresql" else ":d"
                    await conn.execute(
                        text(f"UPDATE events SET event_data = {value} WHERE id = :i"), {"d": json.dumps(data), "i": eid}
                    )
        finally:
            await engine.dispose()
        return ids

    ids = asyncio.run(strip())
    theirs = asyncio.run(adk_get(db, APP, "alice", "s1"))
    assert theirs is not None
    want = {e.id: e.timestamp for e in theirs.events}
    assert all(want[i] != 1_790_000_000.0 for i in ids)  # the column's time, not a default
    assert adk_view(asyncio.run(_store_session(db, APP, "alice", "s1"))) == adk_view(theirs)
    runner = CliRunner()
    got = runner.invoke(app, ["session", "get", APP, "alice", "s1", "--json", "--db-url", db])
    assert got.exit_code == 0, got.output
    assert {e["id"]: e["timestamp"] for e in json.loads(got.stdout)["events"]} == want
    out = tmp_path / "out.jsonl"
    done = runner.invoke(app, ["session", "export", "--user", "alice", "-o", str(out), "--db-url", db])
    assert done.exit_code == 0, done.output
    line = next(json.loads(x) for x in out.read_text().splitlines() if json.loads(x).get("id") == "s1")
    assert {e["id"]: e["timestamp"] for e in line["events"]} == want


AWKWARD = [  # (user, session id, event id, invocation id): an ASCII unit separator, quotes, 4-byte text
    ("u\x1fsep", "s\x1f1", "e\x1f1", "inv\x1fa"),
    ('quo"te\\', "s-ü-🙂", "e,2", "inv,b"),
    ("plain", "s3", "E3", "inv c"),
]


def test_export_reads_keys_holding_any_character_exactly(db: str, tmp_path: Path) -> None:
    """Export gives ADK's own sessions when a key holds an ASCII unit separator, quotes,
    backslashes or 4-byte text, and on MySQL when a DBA made the ids case-sensitive
    (utf8mb4_bin beside the table's collation)."""
    from google.adk.events import Event
    from google.genai import types
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    async def write() -> None:
        service = adk_service(db)
        try:
            for n, (user, sid, eid, inv) in enumerate(AWKWARD):
                session = await service.create_session(app_name=APP, user_id=user, session_id=sid, state={"n": n})
                for i in range(3):
                    words = types.Content(role="user", parts=[types.Part(text=f"{sid} {i}")])
                    event = Event(id=f"{eid}-{i}", invocation_id=inv, author="user", content=words)
                    event.timestamp = 1_790_000_000.25 + n * 10 + i
                    await service.append_event(session, event)
        finally:
            await service.close()
        if db.startswith("mysql"):
            await run_sql(db, "ALTER TABLE events MODIFY id VARCHAR(128) COLLATE utf8mb4_bin NOT NULL")

    asyncio.run(write())
    out = tmp_path / "out.jsonl"
    done = CliRunner().invoke(app, ["session", "export", "-o", str(out), "--db-url", db])
    assert done.exit_code == 0, done.output
    lines = [json.loads(x) for x in out.read_text().splitlines() if '"events"' in x]
    assert len(lines) == len(AWKWARD)
    for user, sid, _eid, _inv in AWKWARD:
        theirs = asyncio.run(adk_get(db, APP, user, sid))
        assert theirs is not None
        line = next(x for x in lines if (x["userId"], x["id"]) == (user, sid))
        want = [(e.id, e.invocation_id, e.timestamp, e.content.parts[0].text) for e in theirs.events]  # type: ignore[union-attr]
        got = [(e["id"], e["invocationId"], e["timestamp"], e["content"]["parts"][0]["text"]) for e in line["events"]]
        assert got == want, (user, sid)


def test_mysql_export_gives_adks_events_of_long_sessions_and_null_event_data(mysql_url: str, tmp_path: Path) -> None:
    """MySQL's export of keys holding odd characters, a NULL event_data and a long session: each
    session's events as ADK reads them, in ADK's order."""
    from google.adk.events import Event
    from google.genai import types
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    long_words = "🙂 long " * 300  # 2,400 characters an event

    async def write() -> None:
        service = adk_service(mysql_url)
        try:
            for n, (user, sid, eid, inv) in enumerate([*AWKWARD, ("bob", "long", "L", "inv-l")]):
                session = await service.create_session(app_name=APP, user_id=user, session_id=sid)
                for i in range(20 if sid == "long" else 3):
                    words = long_words if sid == "long" else f"{sid} {i}"
                    content = types.Content(role="user", parts=[types.Part(text=words)])
                    event = Event(id=f"{eid}-{i}", invocation_id=inv, author="user", content=content)
                    event.timestamp = 1_790_000_000.25 + n * 100 + i
                    await service.append_event(session, event)
        finally:
            await service.close()
        await run_sql(mysql_url, "UPDATE events SET event_data = NULL WHERE id = 'E3-1'")

    asyncio.run(write())
    out = tmp_path / "out.jsonl"
    done = CliRunner().invoke(app, ["session", "export", "-o", str(out), "--db-url", mysql_url])
    assert done.exit_code == 0, done.output
    lines = {(d["userId"], d["id"]): d for d in map(json.loads, out.read_text().splitlines()) if "events" in d}
    assert len(lines) == len(AWKWARD) + 1
    theirs = asyncio.run(adk_get(mysql_url, APP, "bob", "long"))
    assert theirs is not None
    assert [e["content"]["parts"][0]["text"] for e in lines[("bob", "long")]["events"]] == [long_words] * 20
    assert [e["id"] for e in lines[("bob", "long")]["events"]] == [e.id for e in theirs.events]
    assert [e["id"] for e in lines[("plain", "s3")]["events"]] == ["E3-0", "E3-1", "E3-2"]  # E3-1: NULL JSON


def _lines(text: str) -> list[Any]:
    return sorted((json.loads(line) for line in text.splitlines()), key=lambda d: json.dumps(d, sort_keys=True))


def test_v0_database_is_read_and_written_in_its_layout(db: str) -> None:
    build_v0(db, {("alice", "old"): 8, ("bob", "older"): 2})

    async def go() -> None:
        async with SessionStore(db) as store:
            assert store.db.layout is Layout.V0
            notes = Notes()
            ours = await store.get_session(APP, "alice", "old", notes=notes)
            assert not notes.warnings
        theirs = await adk_get(db, APP, "alice", "old")
        assert theirs is not None
        assert adk_view(ours) == adk_view(theirs)
        assert any(e.actions.state_delta for e in ours.events)
        # an import into v0 keeps v0: ADK 2.x still reads it, pickles and all
        ours.id = "copied"
        async with SessionStore(db) as store:
            await store.import_records([ours])
            assert store.db.layout is Layout.V0
        copied = await adk_get(db, APP, "alice", "copied")
        assert copied is not None
        assert [e.actions.state_delta for e in copied.events] == [e.actions.state_delta for e in theirs.events]
        async with SessionStore(db) as store:
            report = await store.delete_sessions([SessionKey(APP, "alice", "copied")])
            assert report.events == 8
        assert await adk_get(db, APP, "alice", "copied") is None

    asyncio.run(go())


class _Exploit:
    def __reduce__(self) -> Any:
        import os

        return (os.system, ("touch /tmp/vmem-pwned-by-pickle",))


def test_crafted_pickle_in_v0_actions_never_runs(tmp_path: Path) -> None:
    marker = Path("/tmp/vmem-pwned-by-pickle")
    marker.unlink(missing_ok=True)
    url = sqlite_url(tmp_path / "v0.db")
    build_v0(url, {("alice", "old"): 3})
    import sqlite3

    with sqlite3.connect(tmp_path / "v0.db") as conn:
        conn.execute("UPDATE events SET actions = ? WHERE rowid = 2", (pickle.dumps(_Exploit()),))

    async def go() -> None:
        async with SessionStore(url) as store:
            notes = Notes()
            session = await store.get_session(APP, "alice", "old", notes=notes)
            assert len(session.events) == 3
            assert any(
                "refusing to load posix.system" in w or "refusing to load os.system" in w for w in notes.warnings
            )
            text = "".join([p async for p in store.export_jsonl()])
            assert "stateDelta" in text

    asyncio.run(go())
    assert not marker.exists()


def test_sqlite_session_service_files(tmp_path: Path) -> None:
    path = tmp_path / "svc.db"
    build(str(path), SESSIONS)  # a plain path: ADK's SqliteSessionService
    url = sqlite_url(path)

    async def go() -> None:
        async with SessionStore(url) as store:
            assert store.db.layout is Layout.SQLITE
            for user, sid in SESSIONS:
                ours = await store.get_session(APP, user, sid)
                theirs = await adk_get(str(path), APP, user, sid)
                assert theirs is not None
                assert adk_view(ours) == adk_view(theirs)
            text = "".join([p async for p in store.export_jsonl()])
        dump = tmp_path / "d.jsonl"
        dump.write_text(text, encoding="utf-8")
        # re-import into the same file keeps its layout; SqliteSessionService still reads it
        async with SessionStore(url) as store:
            await store.import_records(iter_import_records(dump))
            assert store.db.layout is Layout.SQLITE
        again = await adk_get(str(path), APP, "alice", "s1")
        assert again is not None and len(again.events) == SESSIONS[("alice", "s1")]

    asyncio.run(go())


def _schema(url: str) -> dict[str, Any]:
    """Tables, columns (type, nullability), primary keys, foreign keys and indexes, as the database reports them."""
    from sqlalchemy import inspect
    from sqlalchemy.ext.asyncio import create_async_engine

    def read(conn: Any) -> dict[str, Any]:
        insp = inspect(conn)
        out: dict[str, Any] = {}
        for table in sorted(insp.get_table_names()):
            out[table] = {
                "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns(table)],
                "pk": insp.get_pk_constraint(table)["constrained_columns"],
                "fk": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"], (f.get("options") or {}).get("ondelete"))
                    for f in insp.get_foreign_keys(table)
                ),
                "indexes": sorted((i["name"], tuple(i["column_names"])) for i in insp.get_indexes(table)),
            }
        return out

    async def go() -> dict[str, Any]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                return dict(await conn.run_sync(read))
        finally:
            await engine.dispose()

    return asyncio.run(go())


def test_an_empty_database_gets_v1_exactly_as_adk_creates_it(db: str, tmp_path: Path) -> None:
    reference = sqlite_url(tmp_path / "reference.db")
    if not db.startswith("sqlite"):
        reference = db  # ADK first, read its schema, then drop and let vmem create
    build(reference, {("alice", "s1"): 1})
    adk_schema = _schema(reference)
    if reference == db:
        tables = ("events", "sessions", "app_states", "user_states", "adk_internal_metadata")
        asyncio.run(run_sql(db, *(f"DROP TABLE {table}" for table in tables)))
    else:
        db = sqlite_url(tmp_path / "vmem.db")

    async def create() -> None:
        async with SessionStore(db, create=True) as store:
            await store.import_records([])

    asyncio.run(create())
    assert _schema(db) == adk_schema


def test_delete_on_every_database_leaves_nothing_for_adk(db: str) -> None:
    build(db, SESSIONS)

    async def go() -> None:
        async with SessionStore(db) as store:
            report = await store.delete_sessions(SessionFilter(user="alice"), purge_state=True)
            assert report.events == 15 and report.user_states == [(APP, "alice")]
        for sid in ("s1", "s2"):
            assert await adk_get(db, APP, "alice", sid) is None
        left = await adk_get(db, APP, "bob", "s3")
        assert left is not None and len(left.events) == 7

    asyncio.run(go())


def test_cli_paging_and_windows_on_every_database(db: str) -> None:
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    build(db, SESSIONS)
    runner = CliRunner()

    def run(*args: str) -> Any:
        result = runner.invoke(app, ["session", *args, "--db-url", db])
        assert result.exit_code == 0, result.output
        return result

    page = json.loads(run("list", "--limit", "2", "--offset", "1", "--since", "2000-01-01", "--json").stdout)
    assert len(page) == 2
    assert len(json.loads(run("list", "--offset", "1", "--user", "alice", "--json").stdout)) == 1
    last = json.loads(run("get", APP, "alice", "s1", "--events", "3", "--json").stdout)
    assert len(last["events"]) == 3
    assert "function_call" in run("get", APP, "alice", "s1").stdout
