"""`vmem session get ID_OR_PREFIX` (#45 item 6): a session found by its id, or the start of it,
in any app and for any user, as git finds a commit by a short id; on databases the real
google-adk wrote (sqlite, PostgreSQL, MariaDB)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sessions_helpers import build, sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.sessions.store import SessionKey, SessionStore

ROOT = Path(__file__).resolve().parent.parent
PLACES = {  # app -> {(user, session id): events}
    "demo_app": {("alice", "a1b2c3d4-1111"): 3, ("bob", "zz-unique"): 2, ("carol", "A1B2c3-upper"): 1},
    "other_app": {("bob", "a1b2ffff-2222"): 2, ("dan", "abc"): 1, ("dan", "abcdef"): 1},
    "third_app": {("erin", "shared"): 1, ("erin", "100%_x"): 1},
}
PLACES["demo_app"][("frank", "shared")] = 1


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of each kind with PLACES' sessions, written by google-adk."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "adk.db")
    else:
        url = str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))
    for app_name, sessions in PLACES.items():
        build(url, sessions, app=app_name)
    return url


def _get(runner: CliRunner, db: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["session", "get", *args, "--db-url", db])
    return result.exit_code, result.stdout, result.stderr


def test_a_unique_prefix_or_id_finds_the_session_in_any_app(runner: CliRunner, db: str) -> None:
    code, out, err = _get(runner, db, "a1b2c", "--json")
    assert code == 0, err
    found = json.loads(out)
    assert (found["appName"], found["userId"], found["id"]) == ("demo_app", "alice", "a1b2c3d4-1111")
    assert len(found["events"]) == 3
    # MariaDB's collation compares case-insensitively: "A1B2c3-upper" does not begin with "a1b2c"
    code, out, _ = _get(runner, db, "A1B2", "--json")
    assert code == 0 and json.loads(out)["id"] == "A1B2c3-upper"
    code, out, err = _get(runner, db, "zz-unique")  # the whole id, the table for people
    assert code == 0, err
    assert "demo_app" in out and "bob" in out and "zz-unique" in out
    # an id that is whole and also the start of another names the one it is (git: a full id)
    code, out, _ = _get(runner, db, "abc", "--json")
    assert code == 0 and json.loads(out)["id"] == "abc"
    # LIKE's wildcards are plain characters in a prefix
    code, out, _ = _get(runner, db, "100%", "--json")
    assert code == 0 and json.loads(out)["id"] == "100%_x"
    code, _, err = _get(runner, db, "9", "--json")
    assert code == 3, err


def test_an_ambiguous_prefix_lists_the_candidates_and_exits_2(runner: CliRunner, db: str) -> None:
    code, out, err = _get(runner, db, "a1b2")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == "vmem: error: session id 'a1b2' is ambiguous: 2 sessions match"
    assert lines[1:3] == ["demo_app/alice/a1b2c3d4-1111", "other_app/bob/a1b2ffff-2222"]
    assert "hint: give more of the id" in err
    # the same whole id in two apps
    code, _, err = _get(runner, db, "shared")
    assert code == 2
    assert "demo_app/frank/shared" in err.splitlines() and "third_app/erin/shared" in err.splitlines()


def test_none_is_exit_3_and_two_arguments_are_a_usage_error(runner: CliRunner, db: str) -> None:
    code, _, err = _get(runner, db, "nothing-like-it")
    assert code == 3 and "no session id is or begins with 'nothing-like-it'" in err
    code, _, err = _get(runner, db, "demo_app", "alice")
    assert code == 2 and "APP USER SESSION_ID" in err


def test_the_wrong_app_or_user_says_where_the_id_exists(runner: CliRunner, db: str) -> None:
    code, _, err = _get(runner, db, "other_app", "alice", "a1b2c3d4-1111")
    assert code == 3
    assert "session other_app/alice/a1b2c3d4-1111: not found" in err
    assert "hint: session a1b2c3d4-1111 exists in app demo_app for user alice" in err
    code, _, err = _get(runner, db, "demo_app", "nobody", "shared")
    assert code == 3
    assert "exists in app demo_app for user frank; in app third_app for user erin" in err
    code, _, err = _get(runner, db, "demo_app", "alice", "a1b2c3d4")  # a prefix is no id in the 3-argument form
    assert code == 3 and "hint" not in err


def test_the_lookup_reads_the_sessions_keys_only(db: str) -> None:
    """One statement on the sessions table per lookup: never the events table."""
    from sqlalchemy import event

    seen: list[str] = []

    async def go() -> list[SessionKey]:
        async with SessionStore(db) as store:
            event.listen(store.db.engine.sync_engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
            return await store.rows.sessions_by_id("a1b2")

    keys = asyncio.run(go())
    assert [str(k) for k in keys] == ["demo_app/alice/a1b2c3d4-1111", "other_app/bob/a1b2ffff-2222"]
    lookups = [s for s in seen if "sessions" in s]
    assert lookups and all("events" not in s.lower() for s in lookups)
    assert all("LIMIT" in s.upper() for s in lookups)  # bounded


def test_watch_takes_a_prefix(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "adk.db")
    build(url, {("alice", "a1b2c3d4-1111"): 3}, app="demo_app")
    build(url, {("bob", "zz-other"): 2}, app="other_app")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "veadk_mem", "session", "watch", "a1b2", "--db-url", url, "--json", "--events", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # the last event already there
        assert first["author"]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "a1b2c3d4-1111" in err
    finally:
        proc.kill()
    ambiguous = subprocess.run([*cmd[:5], "zz-other-nope", *cmd[6:]], capture_output=True, text=True, env=env)
    assert ambiguous.returncode == 3


def test_watch_with_the_wrong_app_says_where_the_id_exists(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "adk.db")
    build(url, {("alice", "a1b2c3d4-1111"): 1}, app="demo_app")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "veadk_mem", "session", "watch", "other_app", "alice", "a1b2c3d4-1111"]
    result = subprocess.run([*cmd, "--db-url", url], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 3
    assert "hint: session a1b2c3d4-1111 exists in app demo_app for user alice" in result.stderr
