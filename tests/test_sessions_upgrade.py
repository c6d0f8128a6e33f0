"""`vmem session upgrade` on databases written by real old google-adk releases (the v0 pickle layouts).

The old release writes sessions in its own venv (tests/old_adk_writer.py, as in
test_sessions_old_adk.py) and dumps what its get_session returns; after the upgrade, the
current google-adk (in .venv) must read every session equal. sqlite for every pickle-era
release; PostgreSQL and MariaDB for 1.15.1, whose DatabaseSessionService takes the sync
URLs (psycopg2, pymysql) its venv has.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from test_sessions_old_adk import RELEASES, old_python, run_old, same_session, vmem, write_with

from veadk_mem.errors import StoreError

PICKLE_ERA = [v for v, releases in RELEASES.items() if releases is not None]
SERVER_RELEASE = "1.15.1"


def sqlite_tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def current_adk_read(url: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """What the current google-adk's DatabaseSessionService reads for each session id, as camelCase JSON."""
    from google.adk.sessions import DatabaseSessionService

    async def read() -> dict[str, dict[str, Any]]:
        service = DatabaseSessionService(db_url=url)
        try:
            out = {}
            listed = set()
            for user in sorted({k.split("-")[0] for k in keys}):
                listed |= {s.id for s in (await service.list_sessions(app_name="old_app", user_id=user)).sessions}
                for sid in [k for k in keys if k.startswith(user + "-")]:
                    session = await service.get_session(app_name="old_app", user_id=user, session_id=sid)
                    assert session is not None, sid
                    out[sid] = json.loads(session.model_dump_json(by_alias=True, exclude_none=True))
            assert listed == set(keys)
            return out
        finally:
            await service.close()

    return asyncio.run(read())


def current_adk_appends(url: str, user: str, sid: str) -> tuple[str, int]:
    """The current ADK appends an event to an upgraded session: (its text as read back, event count)."""
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    async def append() -> tuple[str, int]:
        service = DatabaseSessionService(db_url=url)
        try:
            session = await service.get_session(app_name="old_app", user_id=user, session_id=sid)
            assert session is not None
            event = Event(
                author="user",
                invocation_id="inv-after",
                content=types.Content(role="user", parts=[types.Part(text="after the upgrade")]),
            )
            await service.append_event(session, event)
            again = await service.get_session(app_name="old_app", user_id=user, session_id=sid)
            assert again is not None and again.events[-1].content is not None
            return str(again.events[-1].content.parts[0].text), len(again.events)  # type: ignore[index]
        finally:
            await service.close()

    return asyncio.run(append())


def as_current(old: dict[str, Any]) -> dict[str, Any]:
    """The old release's dump through the current ADK's Session model: fields it added get their defaults."""
    from google.adk.sessions import Session

    return dict(json.loads(Session.model_validate(old).model_dump_json(by_alias=True, exclude_none=True)))


def assert_current_adk_reads(url: str, adk: dict[str, Any], version: str) -> None:
    got = current_adk_read(url, sorted(adk))
    for sid, expected in adk.items():
        assert same_session(got[sid], as_current(expected)), (
            f"google-adk {version} wrote {sid}; current ADK reads it differently"
        )


@pytest.fixture(params=PICKLE_ERA, ids=lambda v: f"adk-{v}")
def written(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    """(version, sqlite database that release wrote, what its get_session returned for each session)."""
    return write_with(request.param, tmp_path)


def test_upgraded_database_reads_equal_in_current_adk(
    written: tuple[str, Path, dict[str, Any]], tmp_path: Path
) -> None:
    version, db, adk = written
    backup = tmp_path / "backup.jsonl"
    result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(backup))
    assert result.exit_code == 0, result.stderr
    assert f"the column set of ADK {RELEASES[version]}" in result.stderr
    assert "--drop-old" in result.stderr
    assert_current_adk_reads(f"sqlite+aiosqlite:///{db}", adk, version)

    tables = sqlite_tables(db)
    kept = [t for t in tables if "_v0_" in t and not t.startswith("sqlite_")]
    assert sorted(t.split("_v0_")[0] for t in kept) == ["app_states", "events", "sessions", "user_states"]
    assert not [t for t in tables if t.startswith("vmem_upgrade")]
    assert {"adk_internal_metadata", "idx_events_app_user_session_ts_id"} <= set(tables)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM adk_internal_metadata WHERE key = 'schema_version'").fetchone() == ("1",)
        assert {r[2] for r in conn.execute("PRAGMA foreign_key_list(events)")} == {"sessions"}

    # the backup round-trips: imported into a new database, it reads as the old release read
    lines = [json.loads(x) for x in backup.read_text().splitlines()]
    assert sorted(x["id"] for x in lines if "events" in x) == sorted(adk)
    fresh = tmp_path / "restored.db"
    assert vmem("session", "import", str(backup), "--db-url", str(fresh)).exit_code == 0
    assert_current_adk_reads(f"sqlite+aiosqlite:///{fresh}", adk, version)

    again = vmem("session", "upgrade", "--db-url", str(db))
    assert again.exit_code == 0, again.stderr
    assert "already in the current layout" in again.stderr and "--drop-old" in again.stderr
    dropped = vmem("--json", "session", "upgrade", "--db-url", str(db), "--drop-old")
    assert dropped.exit_code == 0, dropped.stderr
    report = json.loads(dropped.stdout)
    assert report["status"] == "current" and sorted(report["dropped"]) == sorted(kept)
    assert not [t for t in sqlite_tables(db) if "_v0_" in t]
    assert_current_adk_reads(f"sqlite+aiosqlite:///{db}", adk, version)
    text, count = current_adk_appends(f"sqlite+aiosqlite:///{db}", "bob", "bob-s1")
    assert (text, count) == ("after the upgrade", len(adk["bob-s1"]["events"]) + 1)


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    db, out = tmp_path / "old.db", tmp_path / "adk.json"
    run_old("1.15.1", "write", f"sqlite:///{db}", str(out))
    before, tables = digest(db), sqlite_tables(db)
    backup = tmp_path / "backup.jsonl"
    result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(backup), "--dry-run", "--drop-old")
    assert result.exit_code == 0, result.stderr
    assert "the column set of ADK 1.15-1.17" in result.stderr
    assert "would back up 4 sessions, 34 events" in result.stderr
    assert "sessions -> sessions_v0_" in result.stderr and "dry run: nothing changed" in result.stderr
    assert digest(db) == before and sqlite_tables(db) == tables and not backup.exists()
    plan = vmem("--json", "session", "upgrade", "--db-url", str(db), "--dry-run")
    assert plan.exit_code == 0, plan.stderr
    report = json.loads(plan.stdout)
    assert (report["status"], report["layout"], report["releases"], report["sessions"]) == (
        "dry_run",
        "v0",
        "1.15-1.17",
        4,
    )
    assert set(report["renamed"]) == {"sessions", "events", "app_states", "user_states"}
    assert digest(db) == before


@pytest.mark.parametrize("version", PICKLE_ERA, ids=lambda v: f"adk-{v}")
def test_a_failure_before_the_swap_leaves_the_database_as_it_was(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, out = tmp_path / "old.db", tmp_path / "adk.json"
    run_old(version, "write", f"sqlite:///{db}", str(out))
    adk = json.loads(out.read_text())
    before, tables = digest(db), sqlite_tables(db)

    async def fail(conn: Any) -> None:
        raise StoreError("injected failure after the copy")

    monkeypatch.setattr("veadk_mem.sessions.upgrade.before_swap", fail)
    result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(tmp_path / "b.jsonl"))
    assert result.exit_code == 1
    assert "injected failure after the copy" in result.stderr
    assert sqlite_tables(db) == tables  # no temporary table left, nothing renamed
    assert digest(db) == before
    again = tmp_path / "again.json"
    run_old(version, "read", f"sqlite:///{db}", str(again))
    restored = json.loads(again.read_text())
    assert sorted(restored) == sorted(adk)
    assert all(same_session(restored[sid], adk[sid]) for sid in adk)


def test_refused_while_another_connection_holds_the_write_lock(tmp_path: Path) -> None:
    db, out = tmp_path / "old.db", tmp_path / "adk.json"
    run_old("1.21.0", "write", f"sqlite:///{db}", str(out))
    before = sqlite_tables(db)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("UPDATE sessions SET state = state")
        backup = tmp_path / "b.jsonl"
        result = vmem(
            "session", "upgrade", "--db-url", str(db), "--backup", str(backup), env={"VMEM_SQLITE_BUSY_TIMEOUT": "0.2"}
        )
    finally:
        holder.rollback()
        holder.close()
    assert result.exit_code == 1
    lines = [x for x in result.stderr.splitlines() if x.startswith("vmem: error:")]
    assert len(lines) == 1 and "another connection holds the database" in lines[0], result.stderr
    assert "nothing was changed" in lines[0]
    assert sqlite_tables(db) == before and not backup.exists()


def test_current_layout_and_bad_backup(tmp_path: Path) -> None:
    db, out = tmp_path / "new.db", tmp_path / "adk.json"
    run_old("1.22.1", "write", f"sqlite:///{db}", str(out))
    before = digest(db)
    result = vmem("session", "upgrade", "--db-url", str(db))
    assert result.exit_code == 0, result.stderr
    assert "already in the current layout" in result.stderr
    assert digest(db) == before
    old = tmp_path / "old.db"
    run_old("1.18.0", "write", f"sqlite:///{old}", str(out))
    taken = tmp_path / "taken.jsonl"
    taken.write_text("precious\n")
    result = vmem("session", "upgrade", "--db-url", str(old), "--backup", str(taken))
    assert result.exit_code == 2
    assert "exists" in result.stderr and taken.read_text() == "precious\n"


# --- PostgreSQL and MariaDB ----------------------------------------------------------------


def _sync_url(url: str) -> str:
    """The async URL of a fixture as the old ADK takes it (sync drivers psycopg2 / pymysql)."""
    return url.replace("+asyncpg", "+psycopg2").replace("+aiomysql", "+pymysql")


def _server_drivers() -> None:
    python = old_python(SERVER_RELEASE)
    done = subprocess.run([str(python), "-c", "import psycopg2, pymysql"], capture_output=True)
    if done.returncode:
        pytest.skip(
            f"*** psycopg2 / pymysql are not installed in .venv-adk/{SERVER_RELEASE} (bash .ci/test adds them) ***"
        )


@pytest.fixture(params=["postgres", "mysql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """(async URL of a fresh database ADK 1.15.1 wrote, what its get_session returned)."""
    request.applymarker(getattr(pytest.mark, request.param))
    _server_drivers()
    url = request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url")
    out = tmp_path / "adk.json"
    run_old(SERVER_RELEASE, "write", _sync_url(url), str(out))
    return url, json.loads(out.read_text())


async def _tables(url: str) -> dict[str, list[str]]:
    """Table name -> the tables its foreign keys refer to."""
    from sqlalchemy import inspect
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return dict(
                await conn.run_sync(
                    lambda c: {
                        t: sorted(fk["referred_table"] for fk in inspect(c).get_foreign_keys(t))
                        for t in inspect(c).get_table_names()
                    }
                )
            )
    finally:
        await engine.dispose()


def test_upgrade_on_a_server(server: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    url, adk = server
    before = asyncio.run(_tables(url))
    assert "vmem_upgrade_sessions" not in before
    result = vmem("session", "upgrade", "--db-url", url, "--backup", str(tmp_path / "b.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert "the column set of ADK 1.15-1.17" in result.stderr
    assert_current_adk_reads(url, adk, SERVER_RELEASE)
    tables = asyncio.run(_tables(url))
    assert tables["events"] == ["sessions"]
    kept = sorted(t for t in tables if "_v0_" in t)
    assert len(kept) == 4 and not [t for t in tables if t.startswith("vmem_upgrade")]
    events_v0 = next(t for t in kept if t.startswith("events_"))
    assert tables[events_v0] == [next(t for t in kept if t.startswith("sessions_"))]
    result = vmem("session", "upgrade", "--db-url", url, "--drop-old")
    assert result.exit_code == 0, result.stderr
    assert not [t for t in asyncio.run(_tables(url)) if "_v0_" in t]
    assert_current_adk_reads(url, adk, SERVER_RELEASE)
    assert current_adk_appends(url, "alice", "alice-s0") == ("after the upgrade", len(adk["alice-s0"]["events"]) + 1)


async def _insert_session(url: str) -> None:
    """A second connection adds a session, as an agent would, while the upgrade runs."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) "
                    "VALUES ('old_app', 'carol', 'late', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
    finally:
        await engine.dispose()


@pytest.mark.parametrize("change", ["write", "fail"])
def test_a_server_upgrade_aborted_before_the_swap_leaves_the_tables(
    server: tuple[str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    url, adk = server
    before = asyncio.run(_tables(url))
    hook: Callable[[Any], Awaitable[None]]

    async def write(conn: Any) -> None:
        await _insert_session(url)

    async def fail(conn: Any) -> None:
        raise StoreError("injected failure after the copy")

    hook = write if change == "write" else fail
    monkeypatch.setattr("veadk_mem.sessions.upgrade.before_swap", hook)
    result = vmem("session", "upgrade", "--db-url", url, "--backup", str(tmp_path / "b.jsonl"))
    assert result.exit_code == 1, result.stderr
    if change == "write":
        assert "the tables changed during the upgrade (sessions 4 -> 5" in result.stderr
    else:
        assert "injected failure" in result.stderr
    assert asyncio.run(_tables(url)) == before  # no temporary tables, nothing renamed
    again = tmp_path / "again.json"
    run_old(SERVER_RELEASE, "read", _sync_url(url), str(again))
    restored = json.loads(again.read_text())
    for sid in adk:
        assert same_session(restored[sid], adk[sid]), sid


# --- lossless: a huge state delta converts, an undecodable one stops or is kept raw (issue 21) ---

BIG = 250_000  # values in one event's state_delta: past the listing's bound of 200,000
BIG_WRITER = Path(__file__).resolve().parent / "old_adk_upgrade_writer.py"


def write_big(version: str, url: str, tmp_path: Path) -> dict[str, Any] | None:
    """Session alice-big written by that old ADK, one event holding a BIG-value state_delta; its dump.
    None where that ADK itself cannot store it (MariaDB: its `actions` column is a 64 KiB BLOB)."""
    out = tmp_path / "big.json"
    python = old_python(version)
    done = subprocess.run(
        [str(python), str(BIG_WRITER), "big", url, str(out), str(BIG)], capture_output=True, text=True
    )
    if url.startswith("mysql"):
        assert done.returncode != 0 and "Data too long for column 'actions'" in done.stderr, done.stderr[-2000:]
        return None
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(out.read_text()))


def assert_big_upgrade(db_url: str, adk_url: str, adk: dict[str, Any], version: str, tmp_path: Path) -> None:
    expected = {f"k{i:06d}": i for i in range(BIG)}
    assert adk["alice-big"]["events"][1]["actions"]["stateDelta"] == expected  # what the old ADK itself read
    backup = tmp_path / "b.jsonl"
    result = vmem("session", "upgrade", "--db-url", db_url, "--backup", str(backup))
    assert result.exit_code == 0, result.stderr
    assert "not decoded" not in result.stderr and "undecodable" not in result.stderr
    got = current_adk_read(adk_url, ["alice-big"])["alice-big"]
    assert got["events"][1]["actions"]["stateDelta"] == expected
    assert same_session(got, as_current(adk["alice-big"])), f"google-adk {version}: read differently"
    lines = [json.loads(x) for x in backup.read_text().splitlines()]
    session = next(x for x in lines if x.get("id") == "alice-big")
    assert session["events"][1]["actions"]["stateDelta"] == expected


@pytest.mark.parametrize("version", PICKLE_ERA, ids=lambda v: f"adk-{v}")
def test_a_huge_state_delta_converts_whole(version: str, tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    adk = write_big(version, f"sqlite:///{db}", tmp_path)
    assert adk is not None
    assert_big_upgrade(str(db), f"sqlite+aiosqlite:///{db}", adk, version, tmp_path)


@pytest.fixture(params=["postgres", "mysql"])
def server_url(request: pytest.FixtureRequest) -> str:
    """The async URL of a fresh, empty PostgreSQL or MariaDB database."""
    request.applymarker(getattr(pytest.mark, request.param))
    _server_drivers()
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


def test_a_huge_state_delta_converts_whole_on_a_server(server_url: str, tmp_path: Path) -> None:
    adk = write_big(SERVER_RELEASE, _sync_url(server_url), tmp_path)
    if adk is None:  # MariaDB: the old ADK refused to write it (checked), so no such event can be there
        return
    assert_big_upgrade(server_url, server_url, adk, SERVER_RELEASE, tmp_path)


class _Boom:
    """A pickle that, loaded by `pickle.loads`, would run a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (f"touch {self.marker}",))


async def _events(url: str) -> list[tuple[str, str, str, bytes]]:
    """(session id, event id, user id, actions bytes) of every event, in session and time order."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT session_id, id, user_id, actions FROM events ORDER BY session_id, timestamp, id")
            )
            return [(r[0], r[1], r[2], bytes(r[3])) for r in rows]
    finally:
        await engine.dispose()


async def _set_actions(url: str, values: dict[str, bytes]) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for event_id, data in values.items():
                if url.startswith("mysql"):  # aiomysql cannot bind bytes with the installed PyMySQL
                    stmt, value = "UPDATE events SET actions = UNHEX(:a) WHERE id = :i", data.hex()
                else:
                    stmt, value = "UPDATE events SET actions = :a WHERE id = :i", data
                await conn.execute(text(stmt), {"a": value, "i": event_id})
    finally:
        await engine.dispose()


def _spoil(adk_url: str, marker: Path) -> dict[str, tuple[str, str, bytes]]:
    """Make two events' actions undecodable: one names os.system, one is cut short.
    Event id -> (user, session, the bytes now stored)."""
    import pickle

    rows = asyncio.run(_events(adk_url))
    first = next(r for r in rows if r[0] == "alice-s0")
    second = [r for r in rows if r[0] == "bob-s1"][2]
    crafted = pickle.dumps(_Boom(marker), protocol=2)
    truncated = second[3][: len(second[3]) // 2]
    asyncio.run(_set_actions(adk_url, {first[1]: crafted, second[1]: truncated}))
    return {first[1]: ("alice", "alice-s0", crafted), second[1]: ("bob", "bob-s1", truncated)}


def _kept_tables(db_url: str, adk_url: str) -> list[str]:
    if db_url.endswith(".db"):
        return [t for t in sqlite_tables(Path(db_url)) if "_v0_" in t and not t.startswith("sqlite_")]
    return [t for t in asyncio.run(_tables(adk_url)) if "_v0_" in t]


def assert_undecodable_stops_or_is_kept(
    db_url: str, adk_url: str, adk: dict[str, Any], tmp_path: Path, snapshot: Callable[[], Any]
) -> None:
    import base64

    marker = tmp_path / "ran"
    spoiled = _spoil(adk_url, marker)
    before = snapshot()
    backup = tmp_path / "b.jsonl"
    result = vmem("session", "upgrade", "--db-url", db_url, "--backup", str(backup))
    assert result.exit_code == 1, result.stderr
    for event_id, (user, sid, _) in spoiled.items():
        assert f"app 'old_app' user '{user}' session '{sid}' event '{event_id}'" in result.stderr
    assert "cannot be decoded" in result.stderr and "--keep-undecodable" in result.stderr
    assert "nothing was changed" in result.stderr
    assert snapshot() == before and not backup.exists() and not marker.exists()
    assert not list(tmp_path.glob("b.jsonl*"))

    result = vmem("session", "upgrade", "--db-url", db_url, "--backup", str(backup), "--keep-undecodable")
    assert result.exit_code == 0, result.stderr
    assert "2 events kept with undecodable actions" in result.stderr
    for event_id in spoiled:
        assert f"event '{event_id}': actions not decoded" in result.stderr
    assert not marker.exists()
    got = current_adk_read(adk_url, sorted(adk))
    lines = {x["id"]: x for x in map(json.loads, backup.read_text().splitlines()) if "events" in x}
    for sid, expected in adk.items():
        if sid not in ("alice-s0", "bob-s1"):
            assert same_session(got[sid], as_current(expected)), sid
    for event_id, (_, sid, data) in spoiled.items():
        raw = base64.b64encode(data).decode("ascii")
        event = next(e for e in got[sid]["events"] if e["id"] == event_id)
        assert event["customMetadata"]["vmem_raw_actions"] == raw
        saved = next(e for e in lines[sid]["events"] if e["id"] == event_id)
        assert saved["customMetadata"]["vmem_raw_actions"] == raw
        assert [e["id"] for e in got[sid]["events"]] == [e["id"] for e in adk[sid]["events"]]

    # the new tables now hold one session (and its events) less than the kept ones: --drop-old refuses
    kept = _kept_tables(db_url, adk_url)
    assert len(kept) == 4
    from google.adk.sessions import DatabaseSessionService

    async def delete() -> None:
        service = DatabaseSessionService(db_url=adk_url)
        try:
            await service.delete_session(app_name="old_app", user_id="alice", session_id="alice-s1")
        finally:
            await service.close()

    asyncio.run(delete())
    result = vmem("session", "upgrade", "--db-url", db_url, "--drop-old")
    assert result.exit_code == 1, result.stderr
    assert "not dropping the old tables" in result.stderr and "sessions" in result.stderr
    assert _kept_tables(db_url, adk_url) == kept


@pytest.mark.parametrize("version", PICKLE_ERA, ids=lambda v: f"adk-{v}")
def test_undecodable_actions_stop_the_upgrade_or_are_kept_raw(version: str, tmp_path: Path) -> None:
    db, out = tmp_path / "old.db", tmp_path / "adk.json"
    run_old(version, "write", f"sqlite:///{db}", str(out))
    adk = json.loads(out.read_text())
    assert_undecodable_stops_or_is_kept(str(db), f"sqlite+aiosqlite:///{db}", adk, tmp_path, lambda: digest(db))


def test_undecodable_actions_stop_the_upgrade_or_are_kept_raw_on_a_server(
    server: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, adk = server

    def snapshot() -> Any:
        return asyncio.run(_tables(url)), asyncio.run(_events(url))

    assert_undecodable_stops_or_is_kept(url, url, adk, tmp_path, snapshot)


# --- the backup file (issue 21 item 10) --------------------------------------------------------


def test_stale_backup_parts_are_removed_and_others_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl
    import os

    db, out = tmp_path / "old.db", tmp_path / "adk.json"
    run_old("1.15.1", "write", f"sqlite:///{db}", str(out))
    work = tmp_path / "backups"
    work.mkdir()
    backup = work / "b.jsonl"
    stale = work / "b.jsonl.k3j9_x2a.part"  # a kill -9 during this backup's write
    stale.write_text('{"half": ')
    others = [work / "b.jsonl.notes", work / "c.jsonl.k3j9_x2a.part", work / "b.jsonl.part", work / "xb.jsonl.a1.part"]
    for path in others:
        path.write_text("not ours")
    live = work / "b.jsonl.live0001.part"  # a run writing right now holds its lock
    live.write_text("")
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(backup), "--dry-run")
        assert result.exit_code == 0 and stale.exists()  # a dry run writes no backup and removes nothing
        result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(backup))
        assert result.exit_code == 0, result.stderr
    finally:
        os.close(holder)
    assert not stale.exists() and live.exists() and backup.exists()
    assert all(p.read_text() == "not ours" for p in others)
    assert sorted(p.name for p in work.iterdir()) == sorted(["b.jsonl", live.name, *(p.name for p in others)])

    # a default-named backup: parts of earlier default-named backups in the working directory go
    old = tmp_path / "older.db"
    run_old("1.15.1", "write", f"sqlite:///{old}", str(out))
    monkeypatch.chdir(work)
    earlier = work / "vmem-upgrade-backup-20260101000000.jsonl.ab12cd34.part"
    earlier.write_text("{")
    result = vmem("session", "upgrade", "--db-url", str(old))
    assert result.exit_code == 0, result.stderr
    assert not earlier.exists() and live.exists() and all(p.exists() for p in others)
    assert len(list(work.glob("vmem-upgrade-backup-*.jsonl"))) == 1


def test_a_failed_backup_write_names_the_backup_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    db, out = tmp_path / "old.db", tmp_path / "adk.json"
    run_old("1.15.1", "write", f"sqlite:///{db}", str(out))
    before = digest(db)
    backup = tmp_path / "out" / "b.jsonl"
    backup.parent.mkdir()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(backup))
    assert result.exit_code == 1, result.stderr
    assert f"no space left on device writing {backup}" in result.stderr
    assert "-o " not in result.stderr
    assert digest(db) == before and not list(backup.parent.iterdir())


def test_heavy_event_pages_shrink_and_every_row_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of events shrink after a heavy one (memory stays about _PAGE_BYTES) and no row is missed."""
    from veadk_mem.sessions import upgrade

    db, out = tmp_path / "old.db", tmp_path / "adk.json"
    run_old("1.15.1", "write", f"sqlite:///{db}", str(out))
    adk = json.loads(out.read_text())
    sizes: list[int] = []
    weigh = upgrade._actions_bytes

    def spy(rows: Any) -> int:
        sizes.append(len(rows))
        return weigh(rows)

    monkeypatch.setattr(upgrade, "_PAGE", 8)
    monkeypatch.setattr(upgrade, "_PAGE_BYTES", 2_000)  # an ADK 1.15 actions pickle is about 700 bytes
    monkeypatch.setattr(upgrade, "_actions_bytes", spy)
    result = vmem("session", "upgrade", "--db-url", str(db), "--backup", str(tmp_path / "b.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert sizes[0] == 8 and min(sizes) < 8, sizes
    assert_current_adk_reads(f"sqlite+aiosqlite:///{db}", adk, "1.15.1")
