"""Deletes beside a live agent (#41 items 1, 7, 8): the real google-adk DatabaseSessionService
writes and reads while vmem deletes.

- a long session's delete on sqlite never keeps the agent's append out for long, and ADK reads
  the session whole or as an earlier prefix meanwhile, never half-deleted;
- `--purge-state` racing an agent's create_session never leaves the new session without its
  app / user state rows (sqlite, PostgreSQL, MariaDB);
- event rows without a session (a killed import's staging) are counted by doctor and removed
  by `forget` and `session delete`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.sessions.store import SessionKey, SessionStore

APP = "demo_app"


def vmem(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args))


def adk(url: str, **kwargs: Any) -> Any:
    from google.adk.sessions import DatabaseSessionService

    return DatabaseSessionService(url, **kwargs)


def text_event(text: str, invocation: str = "inv") -> Any:
    from google.adk.events import Event
    from google.genai import types

    return Event(
        author="user", invocation_id=invocation, content=types.Content(role="user", parts=[types.Part(text=text)])
    )


async def adk_session(url: str, user: str, sid: str, texts: list[str]) -> None:
    service = adk(url)
    try:
        session = await service.create_session(app_name=APP, user_id=user, session_id=sid, state={"user:pref": "x"})
        for text in texts:
            await service.append_event(session, text_event(text))
    finally:
        await service.close()


def long_session(db: Path, user: str, sid: str, n: int) -> None:
    """A sqlite file where ADK wrote `sid` with one event, then n - 1 copies of that row (new ids, later times)."""
    asyncio.run(adk_session(sqlite_url(db), user, sid, ["first"]))
    with sqlite3.connect(db) as conn:
        (_eid, app_name, uid, sess, inv, _ts, data) = conn.execute(
            "SELECT * FROM events WHERE session_id = ?", (sid,)
        ).fetchone()
        doc = json.loads(data)
        start = int(doc["timestamp"]) + 1
        head = json.dumps({k: v for k, v in doc.items() if k not in ("id", "timestamp")})[:-1]

        def rows() -> Any:
            for i in range(1, n):
                ts = start + i / 1000
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start + i // 1000)) + f".{i % 1000:03d}000"
                yield (f"e{i:07d}", app_name, uid, sess, inv, stamp, f'{head}, "id": "e{i:07d}", "timestamp": {ts}}}')

        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", rows())


# --- item 7: a long session's delete on sqlite ------------------------------------------------


@pytest.mark.slow  # 100,000 events written, then deleted beside an agent: out of the fast tier
def test_an_agent_appends_and_reads_while_a_long_sqlite_session_is_deleted(tmp_path: Path) -> None:
    """100,000 events in one session: one delete transaction (the old way) held the file's write lock
    longer than the agent's busy timeout (0.5 s here, 5 s in ADK), and its append failed with
    "database is locked". In short transactions, the agent appends to its own session throughout,
    and every read of the long session meanwhile is whole or a prefix of it in ADK's order."""
    db = tmp_path / "veadk.db"
    url = sqlite_url(db)
    n = 100_000
    long_session(db, "alice", "long", n)
    asyncio.run(adk_session(url, "bob", "live", ["hello"]))
    errors: list[str] = []
    appended: list[float] = []
    reads: list[list[str]] = []
    deleting = threading.Event()
    done = threading.Event()

    def agent() -> None:
        from google.adk.sessions.base_session_service import GetSessionConfig

        async def go() -> None:
            service = adk(url, connect_args={"timeout": 0.5})
            try:
                deleting.wait(60)
                while not done.is_set():
                    try:
                        session = await service.get_session(app_name=APP, user_id="bob", session_id="live")
                        await service.append_event(session, text_event("during"))
                        appended.append(time.monotonic())
                        seen = await service.get_session(
                            app_name=APP,
                            user_id="alice",
                            session_id="long",
                            config=GetSessionConfig(num_recent_events=3),
                        )
                        if seen is not None:
                            reads.append([e.id for e in seen.events])
                    except Exception as exc:  # what the agent would see
                        errors.append(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.02)
            finally:
                await service.close()

        asyncio.run(go())

    async def delete() -> Any:
        async with SessionStore(str(db)) as store:
            chosen = await store.find_sessions([SessionKey(APP, "alice", "long")])
            deleting.set()
            started = time.monotonic()
            report = await store.delete_sessions(chosen)
            return report, started, time.monotonic()

    thread = threading.Thread(target=agent)
    thread.start()
    try:
        report, started, ended = asyncio.run(delete())
    finally:
        done.set()
        thread.join()
    assert not errors, errors[:3]
    assert report.events == n and [s.id for s in report.sessions] == ["long"]
    assert any(started < t < ended for t in appended)  # the agent wrote while the delete ran
    assert reads  # ADK read the long session while it was deleted: its latest events, or those of an earlier time
    newest = [int(ids[-1][1:]) for ids in reads]
    assert newest == sorted(newest, reverse=True) and newest[-1] < n - 1  # deleted from the end: never a gap
    for ids, last in zip(reads, newest, strict=True):
        assert ids == [f"e{i:07d}" for i in range(last - 2, last + 1)], ids
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM events WHERE session_id = 'long'").fetchone()
    assert rows == (0,)
    assert sqlite3.connect(db).execute("SELECT count(*) FROM sessions WHERE id = 'long'").fetchone() == (0,)


# --- item 8: --purge-state racing an agent's create_session -----------------------------------


def database(request: pytest.FixtureRequest, dialect: str, tmp_path: Path) -> str:
    if dialect == "sqlite":
        return sqlite_url(tmp_path / "veadk.db")
    return str(request.getfixturevalue("pg_url" if dialect == "postgresql" else "mysql_url"))


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_purge_state_racing_an_agents_create_session_leaves_it_its_state_rows(
    request: pytest.FixtureRequest, dialect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADK's create_session reads the app and user state rows, then inserts the session. Held
    between the two (a hook on ADK's own `_get_or_create_state`) while `delete --purge-state`
    removes the user's last session: the purge used to delete the rows the create had just read,
    and every append_event to the new session raised "App state missing"."""
    from google.adk.sessions import database_session_service as dss

    url = database(request, dialect, tmp_path)
    asyncio.run(adk_session(url, "alice", "old", ["hi"]))
    original = dss._get_or_create_state

    async def scenario() -> tuple[Any, list[str]]:
        read, go_on = asyncio.Event(), asyncio.Event()

        async def held(**kwargs: Any) -> Any:
            row = await original(**kwargs)
            if isinstance(kwargs["primary_key"], tuple):  # the user state: the create's last read
                read.set()
                await go_on.wait()
            return row

        monkeypatch.setattr(dss, "_get_or_create_state", held)
        agent = adk(url)
        try:
            create = asyncio.ensure_future(agent.create_session(app_name=APP, user_id="alice", session_id="new"))
            await read.wait()
            async with SessionStore(url) as store:
                purge = asyncio.ensure_future(
                    store.delete_sessions([SessionKey(APP, "alice", "old")], purge_state=True)
                )
                await asyncio.sleep(0.5)  # the purge runs (sqlite), or waits for the create's lock (servers)
                go_on.set()
                await create
                report = await purge
            monkeypatch.setattr(dss, "_get_or_create_state", original)
            errors = []
            session = await agent.get_session(app_name=APP, user_id="alice", session_id="new")
            for text in ("one", "two"):
                try:
                    session = await agent.append_event(session, text_event(text)) and session
                except ValueError as exc:
                    errors.append(str(exc))
            return report, errors
        finally:
            await agent.close()

    report, errors = asyncio.run(scenario())
    assert [s.id for s in report.sessions] == ["old"]
    assert errors == []
    after = asyncio.run(adk_get_events(url, "alice", "new"))
    assert after == ["one", "two"]


async def adk_get_events(url: str, user: str, sid: str) -> list[str]:
    service = adk(url)
    try:
        session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
        assert session is not None
        return [p.text for e in session.events if e.content for p in e.content.parts or [] if p.text]
    finally:
        await service.close()


# --- items 1 and 4: event rows without a session (a killed import's staging) ------------------


def staged(db: Path, user: str, sid: str, texts: list[str]) -> None:
    """What a killed import's staging leaves on sqlite: ADK's event rows under a key with no session row."""
    asyncio.run(adk_session(sqlite_url(db), user, sid, texts))
    with sqlite3.connect(db) as conn:  # foreign keys off, as on vmem's connections (ADK's cascade: none)
        conn.execute("DELETE FROM sessions WHERE user_id = ? AND id = ?", (user, sid))


def event_rows(db: Path, user: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM events WHERE user_id = ?", (user,)).fetchone()[0])


def test_doctor_counts_staged_rows_and_forget_and_delete_remove_them(runner: CliRunner, tmp_path: Path) -> None:
    """ADK hands such rows to a session later created under the same key: doctor names them, and
    `forget USER` / `session delete APP USER ID` remove them (forget used to leave them, exit 0;
    delete by id said not found, exit 3)."""
    db = tmp_path / "veadk.db"
    asyncio.run(adk_session(sqlite_url(db), "carol", "kept", ["hello"]))
    staged(db, "carol", "staged", ["card 4111 1111 1111 1111", "more"])
    staged(db, "dave", "half", ["dave's"])
    result = vmem(runner, "--json", "doctor", "--db-url", str(db))
    check = next(c for c in json.loads(result.stdout) if c["name"].startswith("short_term_memory"))
    assert check["orphan_events"] == {APP: 3}
    assert "3 event rows without a session" in check["detail"] and "vmem forget USER" in check["detail"]

    plan = vmem(runner, "--json", "forget", "carol", "--db-url", str(db), "--dry-run")
    assert json.loads(plan.stdout)["sessions"]["orphan_events"] == 2
    result = vmem(runner, "forget", "carol", "--db-url", str(db), "--yes")
    assert result.exit_code == 0, result.stderr
    assert event_rows(db, "carol") == 0 and event_rows(db, "dave") == 1

    result = vmem(runner, "--json", "session", "delete", APP, "dave", "half", "--db-url", str(db), "--yes")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["orphan_events"] == 1 and event_rows(db, "dave") == 0
    missing = vmem(runner, "session", "delete", APP, "dave", "half", "--db-url", str(db), "--yes")
    assert missing.exit_code == 3  # nothing under that key now: not found, as before
    result = vmem(runner, "--json", "doctor", "--db-url", str(db))
    check = next(c for c in json.loads(result.stdout) if c["name"].startswith("short_term_memory"))
    assert check["orphan_events"] == {} and "without a session" not in check["detail"]


# --- item 12: `session upgrade --drop-old` compares what the copy holds, not row counts -------


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_drop_old_refuses_while_a_kept_session_is_missing_though_the_counts_agree(
    runner: CliRunner, request: pytest.FixtureRequest, dialect: str, tmp_path: Path
) -> None:
    """After an upgrade an agent deleted one session and created another: the same counts, and the
    old guard dropped the old tables with the last copy of the deleted session."""
    from sessions_helpers import build_v0

    url = database(request, dialect, tmp_path)
    build_v0(url, {("alice", "s1"): 3, ("bob", "s2"): 2})
    given = str(tmp_path / "veadk.db") if dialect == "sqlite" else url
    result = vmem(runner, "session", "upgrade", "--db-url", given, "--backup", str(tmp_path / "b.jsonl"))
    assert result.exit_code == 0, result.stderr

    async def swap() -> None:
        service = adk(url)
        try:
            await service.delete_session(app_name=APP, user_id="alice", session_id="s1")
        finally:
            await service.close()
        await adk_session(url, "carol", "s3", ["a", "b", "c"])  # as many sessions and events as before

    asyncio.run(swap())
    result = vmem(runner, "session", "upgrade", "--db-url", given, "--drop-old")
    assert result.exit_code == 1, result.stderr
    assert "not dropping the old tables" in result.stderr and "'alice'" in result.stderr and "'s1'" in result.stderr
    assert "nothing was dropped" in result.stderr


# --- item 12: a killed import leaves no spool for a day ------------------------------------------


def test_a_long_lines_spool_has_no_name_and_a_dead_runs_stdin_spool_goes_at_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long line's checked events wait in a spool as large as the session: it has no name now, so
    a kill -9 leaves nothing. A stdin spool needs a name (the import's second pass and its reader
    process open it): one whose vmem is gone (its lock free) goes at the next run, not after a day,
    while one a live vmem holds stays."""
    import fcntl
    import io
    import os
    import subprocess
    import sys

    from veadk_mem.sessions import bigline
    from veadk_mem.sessions.files import SPOOL_PREFIX, spool_dir, spooled_stdin

    directory = spool_dir()
    events = [{"id": f"e{i}", "author": "user", "invocationId": "i", "timestamp": 1_790_000_000 + i} for i in range(50)]
    line = json.dumps({"id": "s", "appName": APP, "userId": "u", "events": events, "lastUpdateTime": 1_790_000_100})
    source = tmp_path / "big.jsonl"
    source.write_text(line + "\n")
    lines = bigline.iter_lines(source, str(source), 100)
    assert lines is not None
    big_line = next(data for _, data, _ in lines if isinstance(data, bigline.BigLine))
    before = set(os.listdir(directory))
    big = bigline.check_big(big_line, None, spool=True)
    try:
        assert set(os.listdir(directory)) == before  # the spool is open, and nameless
        assert sum(len(chunk) for chunk in bigline.event_chunks(big)) == 50
    finally:
        big.remove_spool()

    dead = directory / f"{SPOOL_PREFIX}killed.jsonl"  # a kill -9 during an import of stdin, an hour ago
    dead.write_text("{}")
    os.utime(dead, (time.time() - 3600, time.time() - 3600))
    held = directory / f"{SPOOL_PREFIX}live.jsonl"
    held.write_text("{}")
    os.utime(held, (time.time() - 3600, time.time() - 3600))
    holder = subprocess.Popen(  # another vmem, importing from its stdin meanwhile
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)",
            str(held),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"{}\n"), encoding="utf-8"))
        with spooled_stdin() as path, open(path) as probe, pytest.raises(OSError):  # this run holds its own
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert not dead.exists() and held.exists() and not path.exists()
    finally:
        holder.kill()
        holder.wait()


# --- item 4: delete by key whatever the rows hold -----------------------------------------------


def test_sessions_with_corrupt_json_are_deleted_by_key_by_delete_and_forget(runner: CliRunner, tmp_path: Path) -> None:
    """A session row whose state is not JSON (and events whose data is not): the reads skip it, and
    `session delete` by id said not found (exit 3) while `forget` printed `forgot carol`, exit 0,
    and left it. Deleting needs the key, not a decoded row."""
    db = tmp_path / "veadk.db"
    for sid in ("s1", "s2"):
        asyncio.run(adk_session(sqlite_url(db), "carol", sid, ["card 4111 1111 1111 1111", "b"]))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET event_data = '{not json'")
        conn.execute("UPDATE sessions SET state = '{not json' WHERE id = 's2'")
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())

    result = vmem(runner, "session", "delete", APP, "carol", "s1", "s2", "--db-url", str(db), "--yes")
    assert result.exit_code == 0, result.stderr
    assert event_rows(db, "carol") == 0
    assert sqlite3.connect(db).execute("SELECT count(*) FROM sessions").fetchone() == (0,)

    result = vmem(runner, "--json", "forget", "carol", "--db-url", str(copy), "--yes")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["deleted"]["sessions"] == 2
    assert event_rows(copy, "carol") == 0
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM user_states").fetchone() == (0,)
