"""`vmem session ...` end to end on sqlite files written by the real google-adk; outputs, exit codes, faults."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from google.adk.sessions import Session as AdkSession
from sessions_helpers import APP, adk_get, adk_view, build, sqlite_rows, sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app

SESSIONS = {("alice", "s1"): 12, ("alice", "s2"): 3, ("bob", "s3"): 7}


@pytest.fixture(scope="module")
def adk_written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SESSIONS written once a module by the real google-adk (a fifth of a second each time)."""
    path = tmp_path_factory.mktemp("adk") / "veadk.db"
    build(sqlite_url(path), SESSIONS)
    return path


@pytest.fixture
def dbfile(tmp_path: Path, adk_written: Path) -> Path:
    """A copy of that database of this test's own: tests delete and import into it."""
    path = tmp_path / "veadk.db"
    shutil.copyfile(adk_written, path)
    return path


def vmem(runner: CliRunner, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), input=input, env=env)


def test_list_table_and_json(runner: CliRunner, dbfile: Path) -> None:
    result = vmem(runner, "session", "list", "--db-url", str(dbfile))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == [  # off a terminal: --tsv's names (#45 item 11), for awk
        "app_name",
        "user_id",
        "id",
        "event_count",
        "state_keys",
        "create_time",
        "update_time",
    ]
    assert "s1" in result.stdout and "12" in result.stdout

    result = vmem(runner, "session", "list", "--db-url", str(dbfile), "--user", "alice", "--json")
    rows = json.loads(result.stdout)
    assert {r["id"] for r in rows} == {"s1", "s2"}
    first = rows[0]
    assert list(first) == [  # ADK's own list_sessions item (camelCase), one update time
        "id",
        "appName",
        "userId",
        "state",
        "lastUpdateTime",
        "eventCount",
        "createTime",
    ]
    assert first["state"]["app:region"] == "cn" and first["state"]["user:lang"] == "zh"
    assert isinstance(first["createTime"], float) and isinstance(first["lastUpdateTime"], float)
    assert [r["lastUpdateTime"] for r in rows] == sorted((r["lastUpdateTime"] for r in rows), reverse=True)
    assert {r["id"]: r["eventCount"] for r in rows} == {"s1": 12, "s2": 3}
    tsv = vmem(runner, "session", "list", "--db-url", str(dbfile), "-u", "alice", "--tsv").stdout.splitlines()
    assert tsv[0].split("\t") == [
        "app_name",
        "user_id",
        "id",
        "event_count",
        "state_keys",
        "create_time",
        "update_time",
    ]
    assert {line.split("\t")[2] for line in tsv[1:]} == {"s1", "s2"}
    plain = vmem(runner, "session", "list", "--db-url", str(dbfile), "-u", "alice").stdout.splitlines()
    assert len(plain) == 3 and [line.split()[2] for line in plain[1:]] == [r["id"] for r in rows]  # grep, cut, awk


def test_list_paging_and_time_filters(runner: CliRunner, dbfile: Path) -> None:
    result = vmem(runner, "session", "list", "--db-url", str(dbfile), "--limit", "2", "--json")
    assert len(json.loads(result.stdout)) == 2
    assert "--offset 2" in result.stderr
    result = vmem(runner, "session", "list", "--db-url", str(dbfile), "--limit", "1", "--offset", "1")
    assert result.stderr == "showing 1 session; more may exist: use --offset 2 or --limit 0\n"
    result = vmem(runner, "session", "list", "--db-url", str(dbfile), "--limit", "2", "--offset", "2", "--json")
    assert len(json.loads(result.stdout)) == 1
    # the sessions' last events are from September 2026
    result = vmem(
        runner, "session", "list", "--db-url", str(dbfile), "--since", "2000-01-01", "--until", "1d", "--json"
    )
    assert len(json.loads(result.stdout)) == 3
    result = vmem(runner, "session", "list", "--db-url", str(dbfile), "--until", "2026-01-01T00:00Z", "--json")
    assert json.loads(result.stdout) == []
    result = vmem(runner, "session", "list", "--db-url", str(dbfile), "--since", "2099-01-01", "--json")
    assert json.loads(result.stdout) == []
    result = vmem(runner, "session", "list", "--db-url", str(dbfile), "--since", "yesterday")
    assert result.exit_code == 2 and "--since" in result.stderr


def test_get_timeline_and_json(runner: CliRunner, dbfile: Path) -> None:
    import asyncio

    result = vmem(runner, "session", "get", APP, "alice", "s1", "--db-url", str(dbfile))
    assert result.exit_code == 0, result.output
    out = result.stdout
    for word in ("thought", "function_call", "function_response", "media", "error", "lookup", "app:region", "user"):
        assert word in out
    result = vmem(runner, "--json", "session", "get", APP, "alice", "s1", "--db-url", str(dbfile))
    ours = AdkSession.model_validate_json(result.stdout)
    theirs = asyncio.run(adk_get(sqlite_url(dbfile), APP, "alice", "s1"))
    assert theirs is not None and adk_view(ours) == adk_view(theirs)
    result = vmem(runner, "session", "get", APP, "alice", "s1", "--events", "2", "--json", "--db-url", str(dbfile))
    assert [e["id"] for e in json.loads(result.stdout)["events"]] == [e.id for e in theirs.events[-2:]]


def test_missing_session_exits_3(runner: CliRunner, dbfile: Path) -> None:
    result = vmem(runner, "session", "get", APP, "alice", "nope", "--db-url", str(dbfile))
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1 and "not found" in result.stderr


def test_delete_by_id_keeps_state_and_leaves_no_orphans(runner: CliRunner, dbfile: Path) -> None:
    before = sqlite_rows(dbfile, "SELECT count(*) FROM events")[0][0]
    result = vmem(runner, "session", "delete", APP, "alice", "s1", "s2", "--dry-run", "--db-url", str(dbfile))
    assert result.exit_code == 0 and "dry run" in result.stderr
    assert sqlite_rows(dbfile, "SELECT count(*) FROM events")[0][0] == before
    result = vmem(runner, "session", "delete", APP, "alice", "s1", "--db-url", str(dbfile))
    assert result.exit_code == 2 and "--yes" in result.stderr  # no terminal to ask on
    result = vmem(runner, "session", "delete", APP, "alice", "s1", "ghost", "--yes", "--db-url", str(dbfile))
    assert result.exit_code == 3 and "ghost" in result.stderr
    assert sqlite_rows(dbfile, "SELECT count(*) FROM events")[0][0] == before
    result = vmem(runner, "session", "delete", APP, "alice", "s1", "--yes", "--json", "--db-url", str(dbfile))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["session_count"] == 1 and report["event_count"] == 12 and report["user_states"] == []
    assert report["sessions"] == [{"app_name": APP, "user_id": "alice", "id": "s1"}] and not report["dry_run"]
    assert sqlite_rows(dbfile, "SELECT count(*) FROM events WHERE session_id='s1'")[0][0] == 0
    assert sqlite_rows(dbfile, "SELECT count(*) FROM user_states WHERE user_id='alice'")[0][0] == 1


def test_delete_by_filter_with_purge_state(runner: CliRunner, dbfile: Path) -> None:
    result = vmem(runner, "session", "delete", "--user", "alice", "--purge-state", "--yes", "--db-url", str(dbfile))
    assert result.exit_code == 0, result.output
    assert "deleted 2 sessions, 15 events" in result.stderr
    assert sqlite_rows(dbfile, "SELECT user_id FROM sessions") == [("bob",)]
    assert sqlite_rows(dbfile, "SELECT user_id FROM user_states") == [("bob",)]
    assert sqlite_rows(dbfile, "SELECT count(*) FROM app_states")[0][0] == 1  # bob still uses the app
    result = vmem(runner, "session", "delete", "--app", APP, "--older-than", "30d", "--yes", "--db-url", str(dbfile))
    assert result.exit_code == 0 and "deleted 1 session, 7 events" in result.stderr  # last event: Sept 2026
    result = vmem(runner, "session", "delete", "--app", APP, "--older-than", "30d", "--yes", "--db-url", str(dbfile))
    assert result.exit_code == 0 and "no sessions match: nothing deleted" in result.stderr
    result = vmem(runner, "session", "delete", "--db-url", str(dbfile))
    assert result.exit_code == 2


def test_export_import_roundtrip_and_idempotence(runner: CliRunner, dbfile: Path, tmp_path: Path) -> None:
    dump = tmp_path / "out.jsonl"
    result = vmem(runner, "session", "export", "-o", str(dump), "--db-url", str(dbfile))
    assert result.exit_code == 0, result.output
    lines = dump.read_text(encoding="utf-8").splitlines()
    kinds = [json.loads(line).get("kind", "session") for line in lines]
    assert kinds.count("session") == 3 and kinds.count("app_state") == 1 and kinds.count("user_state") == 2
    for line in lines:
        if "kind" not in json.loads(line):
            AdkSession.model_validate_json(line)  # every session line is ADK session JSON
    result = vmem(runner, "session", "export", "-o", str(dump), "--db-url", str(dbfile), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"output": str(dump), "sessions": 3, "not_exported": []}
    assert dump.read_text(encoding="utf-8").splitlines() == lines  # the data still in the file, not on stdout

    target = tmp_path / "new.db"
    result = vmem(runner, "session", "import", str(dump), "--db-url", str(target))
    assert result.exit_code == 0, result.output
    assert "created ADK v1 tables" in result.stderr
    assert "already there" not in result.stderr
    assert sqlite_rows(target, "SELECT value FROM adk_internal_metadata") == [("1",)]
    snapshot = _snapshot(target)
    result = vmem(runner, "session", "import", "-", "--db-url", str(target), input=dump.read_text(encoding="utf-8"))
    assert result.exit_code == 0, result.output
    assert _snapshot(target) == snapshot
    assert result.stderr.startswith("imported 3 sessions (3 already there, written over), ")
    assert "1 app state, 2 user states" in result.stderr
    result = vmem(runner, "session", "import", str(dump), "--db-url", str(target), "--json")
    assert json.loads(result.stdout)["replaced"] == json.loads(result.stdout)["sessions"] == 3

    again = tmp_path / "again.jsonl"
    vmem(runner, "session", "export", "-o", str(again), "--db-url", str(target))
    assert _parsed(again.read_text(encoding="utf-8").splitlines()) == _parsed(lines)
    result = vmem(runner, "session", "export", "--user", "bob", "--db-url", str(target))
    assert [json.loads(x).get("kind", "session") for x in result.stdout.splitlines()] == [
        "app_state",
        "user_state",
        "session_times",  # each session's create time, on a line of its own: ADK's Session refuses extra keys
        "session",
    ]


def _parsed(lines: list[str]) -> list[Any]:
    return sorted((json.loads(line) for line in lines), key=lambda d: json.dumps(d, sort_keys=True))


def _snapshot(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: sorted(sqlite_rows(path, f"SELECT * FROM {t}")) for t in ("sessions", "events", "app_states", "user_states")
    }


def test_bad_export_target_and_bad_stdin_are_named(runner: CliRunner, dbfile: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "out.jsonl"
    result = vmem(runner, "session", "export", "-o", str(missing), "--db-url", str(dbfile))
    assert result.exit_code == 2
    assert result.stderr == f"vmem: error: -o {missing}: no such directory: {missing.parent}\n"
    out_dir = tmp_path / "exports"
    out_dir.mkdir()
    result = vmem(runner, "session", "export", "-o", str(out_dir), "--db-url", str(dbfile))
    assert result.exit_code == 2 and "is a directory" in result.stderr
    assert list(out_dir.iterdir()) == [] and not list(tmp_path.glob("*.part"))  # nothing half-written
    target = tmp_path / "target.db"
    stdin = '{"id": "s", "appName": "a", "userId": "u"}\n{"bad\n'
    result = vmem(runner, "session", "import", "-", "--db-url", str(target), input=stdin)
    assert result.exit_code == 2
    assert result.stderr.startswith("vmem: error: <stdin>: line 2, column 6: invalid JSON")
    assert not target.exists()


def test_import_rejects_a_bad_line_and_writes_nothing(runner: CliRunner, dbfile: Path, tmp_path: Path) -> None:
    dump = tmp_path / "out.jsonl"
    vmem(runner, "session", "export", "-o", str(dump), "--db-url", str(dbfile))
    lines = dump.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[4])
    broken["events"][1]["timestamp"] = "not a time"
    lines[4] = json.dumps(broken)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = tmp_path / "target.db"
    result = vmem(runner, "session", "import", str(bad), "--db-url", str(target))
    assert result.exit_code == 2
    assert "line 5" in result.stderr and "$.events[1].timestamp" in result.stderr
    assert not target.exists()
    bad.write_text(lines[0] + "\n{not json\n", encoding="utf-8")
    result = vmem(runner, "session", "import", str(bad), "--db-url", str(dbfile))
    assert result.exit_code == 2 and "line 2" in result.stderr


def test_faults_are_one_line_without_secrets(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    result = vmem(runner, "session", "list", "--db-url", str(missing))
    assert result.exit_code == 1 and "no such sqlite file" in result.stderr
    assert not missing.exists()

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x)")
    result = vmem(runner, "session", "list", "--db-url", str(other))
    assert result.exit_code == 1 and "no ADK session tables" in result.stderr

    result = vmem(runner, "session", "list", "--db-url", "postgresql://bob:s3cret@127.0.0.1:1/x")
    assert result.exit_code == 1 and "cannot connect" in result.stderr
    assert "s3cret" not in result.output and "Traceback" not in result.output

    result = vmem(runner, "session", "list", "--db-url", "postgresql://bob:hunter@2@127.0.0.1/x")
    assert result.exit_code == 2 and "%40" in result.stderr and "hunter" not in result.stderr

    result = vmem(runner, "session", "list", env={"SHORT_TERM_MEMORY_BACKEND": "local"})
    assert result.exit_code == 4 and "local" in result.stderr


@pytest.mark.mysql
def test_wrong_password_is_reported_without_it(runner: CliRunner, mysql_url: str) -> None:
    url = mysql_url.replace("root@", "root:Wr0ngPass@")
    result = vmem(runner, "session", "list", "--db-url", url)
    assert result.exit_code == 1
    assert "authentication failed" in result.stderr
    assert "Wr0ngPass" not in result.output
    assert result.stderr.strip().count("\n") <= 1  # the message and its hint


@pytest.mark.postgres
def test_postgres_database_without_adk_tables(runner: CliRunner, pg_url: str) -> None:
    result = vmem(runner, "session", "get", APP, "u", "s", "--db-url", pg_url)
    assert result.exit_code == 1 and "no ADK session tables" in result.stderr


def test_locked_sqlite_waits_then_fails_cleanly(runner: CliRunner, dbfile: Path) -> None:
    holder = sqlite3.connect(dbfile, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # an agent in the middle of a write
    try:
        started = time.monotonic()
        result = vmem(
            runner,
            "session",
            "delete",
            APP,
            "alice",
            "s1",
            "--yes",
            "--db-url",
            str(dbfile),
            env={"VMEM_SQLITE_BUSY_TIMEOUT": "0.3"},
        )
        assert result.exit_code == 1 and "locked" in result.stderr
        assert time.monotonic() - started >= 0.3
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sqlite_rows(dbfile, "SELECT count(*) FROM events WHERE session_id='s1'")[0][0] == 12
    # with a writer that finishes within the busy timeout, the delete waits and succeeds (a minute's
    # timeout: the timer thread firing late on a loaded machine must not decide the outcome)
    holder = sqlite3.connect(dbfile, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(0.3, lambda: (holder.execute("COMMIT"), holder.close()))
    timer.start()
    wait = {"VMEM_SQLITE_BUSY_TIMEOUT": "60"}
    result = vmem(runner, "session", "delete", APP, "alice", "s1", "--yes", "--db-url", str(dbfile), env=wait)
    timer.join()
    assert result.exit_code == 0, result.output
    assert sqlite_rows(dbfile, "SELECT count(*) FROM events WHERE session_id='s1'")[0][0] == 0


def test_doctor_reports_a_missing_sqlite_file_without_creating_it(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    result = vmem(runner, "doctor", "--json", env={"SHORT_TERM_MEMORY_LOCAL_DATABASE_PATH": str(path)})
    assert result.exit_code == 1
    assert "no such sqlite file" in result.stdout
    assert not path.exists()


def test_session_help_is_complete(runner: CliRunner) -> None:
    for command in ("list", "get", "delete", "export", "import"):
        result = vmem(runner, "session", command, "--help")
        assert result.exit_code == 0 and "--db-url" in result.stdout


@pytest.mark.postgres
def test_postgresql_backend_from_settings_with_schema(
    runner: CliRunner, pg_url: str, dbfile: Path, tmp_path: Path
) -> None:
    import asyncio

    import asyncpg

    database = pg_url.rsplit("/", 1)[1]

    async def make_schema() -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=5432, user="postgres", database=database)
        try:
            await conn.execute("CREATE SCHEMA agents")
        finally:
            await conn.close()

    asyncio.run(make_schema())
    env = {
        "SHORT_TERM_MEMORY_BACKEND": "postgresql",
        "DATABASE_POSTGRESQL_HOST": "127.0.0.1",
        "DATABASE_POSTGRESQL_USER": "postgres",
        "DATABASE_POSTGRESQL_DATABASE": database,
        "DATABASE_POSTGRESQL_SCHEMA": "agents",
    }
    dump = tmp_path / "d.jsonl"
    vmem(runner, "session", "export", "-o", str(dump), "--db-url", str(dbfile))
    result = vmem(runner, "session", "import", str(dump), env=env)
    assert result.exit_code == 0, result.output
    result = vmem(runner, "session", "list", "--json", env=env)
    assert {r["id"] for r in json.loads(result.stdout)} == {"s1", "s2", "s3"}

    async def tables_in(schema: str) -> set[str]:
        conn = await asyncpg.connect(host="127.0.0.1", port=5432, user="postgres", database=database)
        try:
            rows = await conn.fetch("SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema)
            return {r["table_name"] for r in rows}
        finally:
            await conn.close()

    assert "sessions" in asyncio.run(tables_in("agents"))
    assert "sessions" not in asyncio.run(tables_in("public"))


def test_installed_vmem_lists_and_help_stays_light(dbfile: Path) -> None:
    import subprocess
    import sys

    vmem_bin = Path(sys.executable).parent / "vmem"
    done = subprocess.run(
        [str(vmem_bin), "session", "list", "--json", "--db-url", str(dbfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 3
    heavy = "('sqlalchemy', 'aiosqlite', 'veadk_mem.sessions.store')"
    probe = f"import sys, veadk_mem.cli.app; print(sorted(m for m in {heavy} if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"


def test_long_timelines_show_the_last_thousand_events(runner: CliRunner, tmp_path: Path) -> None:
    from veadk_mem import events as ev

    session = ev.Session(
        id="long",
        app_name=APP,
        user_id="u",
        events=[ev.Event(id=f"e{i:05d}", author="user", timestamp=1.7e9 + i) for i in range(1003)],
    )
    dump = tmp_path / "long.jsonl"
    dump.write_text(session.to_json() + "\n", encoding="utf-8")
    db = tmp_path / "long.db"
    assert vmem(runner, "session", "import", str(dump), "--db-url", str(db)).exit_code == 0
    result = vmem(runner, "session", "get", APP, "u", "long", "--db-url", str(db), env={"TTY_COMPATIBLE": "1"})
    assert result.exit_code == 0
    assert "showing the last 1000 of 1003 events" in result.stderr
    assert "1003" in result.stdout and "│ 3 " not in result.stdout
    result = vmem(runner, "session", "get", APP, "u", "long", "--json", "--db-url", str(db))
    assert len(json.loads(result.stdout)["events"]) == 1003


def test_errors_name_the_database_as_the_user_gave_it(runner: CliRunner, dbfile: Path) -> None:
    """A path stays a path and postgresql:// stays without vmem's async driver (and its password masked)."""
    result = vmem(runner, "session", "get", "a", "b", "c", "--db-url", str(dbfile))
    assert result.exit_code == 3 and f"not found in {dbfile}" in result.stderr
    result = vmem(runner, "session", "list", "--db-url", "postgresql://nobody:secret@127.0.0.1:1/x")
    assert result.exit_code == 1 and "postgresql://nobody:****@127.0.0.1:1/x: cannot connect" in result.stderr
    assert "asyncpg" not in result.stderr and "secret" not in result.stderr
    result = vmem(runner, "doctor", "--db-url", str(dbfile), "--json")
    assert f"{dbfile}: ADK schema" in result.stdout and "aiosqlite" not in result.stdout


def test_the_delete_flow_is_the_sessions_layers(dbfile: Path) -> None:
    """Find, plan, confirm, delete: `delete_flow` does what `vmem session delete` does, and a
    confirm that raises leaves every session (the CLI only asks and renders)."""
    import asyncio

    from veadk_mem.sessions.delete_flow import delete_flow
    from veadk_mem.sessions.store import SessionFilter, SessionKey, SessionStore

    asked: list[int] = []

    def refuse(plan: Any) -> None:
        asked.append(len(plan.sessions))
        raise RuntimeError("no")

    async def go() -> tuple[Any, Any, Any, int]:
        async with SessionStore(str(dbfile)) as store:
            dry = await delete_flow(store, flt=SessionFilter(app=APP, user="alice"), dry_run=True, confirm=refuse)
            with pytest.raises(RuntimeError):
                await delete_flow(store, flt=SessionFilter(app=APP, user="alice"), confirm=refuse)
            none = await delete_flow(store, flt=SessionFilter(app=APP, user="nobody"))
            done = await delete_flow(store, keys=[SessionKey(APP, "bob", "s3")])
            return dry, none, done, (await store.list_sessions(SessionFilter(app=APP), count_only=True)).total

    dry, none, done, left = asyncio.run(go())
    assert dry.dry_run and sorted(s.id for s in dry.sessions) == ["s1", "s2"]
    assert dry.events == 15 and asked == [2]  # the dry run asked nothing; the refused delete asked once
    assert none.sessions == [] and not none.dry_run
    assert [s.id for s in done.sessions] == ["s3"] and not done.dry_run and done.events == 7
    assert left == 2  # alice's two stay: the refusal deleted nothing
