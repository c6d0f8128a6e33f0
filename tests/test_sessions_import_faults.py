"""`session import` when things go wrong (issue #21 items 6, 8 and 11): a missing file, Ctrl-C
during the write pass, a reader child that stops answering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import APP, interrupt_when, sqlite_rows, sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app

ROOT = Path(__file__).resolve().parents[1]


def write_export(path: Path, sessions: int, events: int) -> Path:
    """An export file (vmem's JSONL) of `sessions` sessions of `events` text events each."""
    with path.open("w", encoding="utf-8") as out:
        for s in range(sessions):
            base = 1_790_000_000.0 + s
            evs = [
                {
                    "id": f"e{s}-{i}",
                    "author": "user" if i % 2 == 0 else "agent",
                    "invocationId": f"inv-{i // 2}",
                    "timestamp": base + i * 0.001,
                    "content": {"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"message {i} " * 4}]},
                }
                for i in range(events)
            ]
            line = {"id": f"s{s:06d}", "appName": APP, "userId": f"u{s % 50}", "state": {"n": s}, "events": evs}
            out.write(json.dumps(line) + "\n")
    return path


def test_import_of_a_missing_file_is_exit_2_naming_it(runner: CliRunner, tmp_path: Path) -> None:
    """Item 6: exit 2 "no such file" naming the path (it was exit 1, unexpected FileNotFoundError)."""
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["session", "import", "no-such-file.jsonl", "--db-url", sqlite_url(db)])
    assert result.exit_code == 2, result.output
    assert "no-such-file.jsonl: no such file" in result.stderr
    assert "unexpected" not in result.stderr and not db.exists()
    folder = runner.invoke(app, ["session", "import", str(tmp_path), "--db-url", sqlite_url(db)])
    assert folder.exit_code == 2 and "is a directory" in folder.stderr


def test_ctrl_c_during_the_write_pass_says_how_many_sessions_were_committed(pg_url: str, tmp_path: Path) -> None:
    """Item 8: Ctrl-C (SIGINT to the process group, as a terminal sends it) while sessions are
    being written: exit 130, and the message counts the sessions committed, which are in the database."""
    import asyncio

    import asyncpg

    source = write_export(tmp_path / "big.jsonl", 8000, 10)
    plain = pg_url.replace("postgresql+asyncpg", "postgresql")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "veadk_mem", "session", "import", str(source), "--db-url", pg_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )

    async def committed() -> int:
        conn = await asyncpg.connect(plain)
        try:
            if await conn.fetchval("SELECT to_regclass('sessions')") is None:
                return 0
            return int(await conn.fetchval("SELECT count(*) FROM sessions"))
        finally:
            await conn.close()

    text = interrupt_when(proc, lambda: asyncio.run(committed()) != 0)
    stored = asyncio.run(committed())
    assert proc.returncode == 130, text
    assert 0 < stored < 8000, stored
    assert f"interrupted -- {stored:,} session(s) before it were written and committed" in text, text
    assert len(text.strip().splitlines()) <= 2, text  # the error (and at most a progress line), no traceback


def test_a_batch_the_database_rolled_back_for_a_deadlock_is_written_again(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer deadlocked with a batch (MariaDB's 1213): the database rolled it back whole,
    so the import writes the same records again, after 50 ms, and nothing is lost."""
    import time

    from sqlalchemy.exc import OperationalError

    from veadk_mem.sessions import upsert

    real = upsert.Upsert.write_batch
    calls: list[float] = []

    async def deadlocked_once(self: Any, batch: Any, *, force: bool, **kw: Any) -> Any:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise OperationalError(
                "INSERT INTO sessions", {}, Exception("(1213, 'Deadlock found when trying to get lock')")
            )
        return await real(self, batch, force=force, **kw)

    monkeypatch.setattr(upsert.Upsert, "write_batch", deadlocked_once)
    source = write_export(tmp_path / "s.jsonl", 30, 3)
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["session", "import", str(source), "--db-url", sqlite_url(db), "--json"])
    assert result.exit_code == 0, result.output
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.05
    assert sqlite_rows(db, "SELECT count(*) FROM sessions") == [(30,)]

    calls.clear()

    async def always_deadlocked(self: Any, batch: Any, *, force: bool, **kw: Any) -> Any:
        calls.append(time.monotonic())
        raise OperationalError(
            "INSERT INTO sessions", {}, Exception("(1213, 'Deadlock found when trying to get lock')")
        )

    monkeypatch.setattr(upsert.Upsert, "write_batch", always_deadlocked)
    again = runner.invoke(app, ["session", "import", str(source), "--db-url", sqlite_url(tmp_path / "t.db")])
    assert again.exit_code == 1 and "Deadlock found" in again.stderr and "nothing was written" in again.stderr
    assert len(calls) == 5  # five tries, then the error as it came


def test_a_batch_that_failed_after_its_commit_is_counted_once_and_not_written_again(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is counted the moment its transaction commits (so that a Ctrl-C in the
    connection's release cannot lose it from the message's count); a retryable error after
    that commit must neither write the batch again nor count it twice."""
    from sqlalchemy.exc import OperationalError

    from veadk_mem.sessions import upsert

    real = upsert.Upsert.write_batch
    calls: list[int] = []

    async def fails_on_the_way_out(self: Any, batch: Any, *, force: bool, **kw: Any) -> Any:
        calls.append(1)
        written = await real(self, batch, force=force, **kw)
        if len(calls) == 1:
            raise OperationalError("ROLLBACK", {}, Exception("(1213, 'Deadlock found when trying to get lock')"))
        return written

    monkeypatch.setattr(upsert.Upsert, "write_batch", fails_on_the_way_out)
    source = write_export(tmp_path / "s.jsonl", 30, 3)
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["session", "import", str(source), "--db-url", sqlite_url(db), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sessions"] == 30, result.stdout
    assert len(calls) == 1
    assert sqlite_rows(db, "SELECT count(*) FROM sessions") == [(30,)]


def test_tables_another_creator_made_meanwhile_are_created_again(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second creator (another import, the agent's first start) made a table between the
    import's look and its CREATE TABLE: the layout is read again and the tables made, no error."""
    from sqlalchemy import MetaData
    from sqlalchemy.exc import OperationalError

    real = MetaData.create_all
    calls: list[int] = []

    def raced_once(self: MetaData, bind: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("CREATE TABLE sessions", {}, Exception("table sessions already exists"))
        real(self, bind, **kwargs)

    monkeypatch.setattr(MetaData, "create_all", raced_once)
    source = write_export(tmp_path / "s.jsonl", 3, 2)
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["session", "import", str(source), "--db-url", sqlite_url(db)])
    assert result.exit_code == 0, result.output
    assert len(calls) == 2
    assert sqlite_rows(db, "SELECT count(*) FROM sessions") == [(3,)]


@pytest.mark.parametrize("server", ["pg_url", "mysql_url"])
def test_state_rows_another_writer_created_meanwhile_are_merged_into(
    runner: CliRunner, request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    """Another writer (a second import, an agent's first create_session of the app) committed the
    app's and the user's state rows between the batch's look for them and its INSERT: a duplicate
    key (write batches run under READ COMMITTED, as PostgreSQL's default). The batch was rolled back
    whole, so it is written again and merges into those rows; it used to fail, exit 1, "nothing
    was written" (two first imports into an empty MariaDB at once, 2 of 6 runs under load)."""
    import asyncio
    import threading

    from sessions_helpers import adk_get, run_sql
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    url = str(request.getfixturevalue(server))
    other = [
        "INSERT INTO app_states (app_name, state, update_time) "
        "VALUES ('a', '{\"theme\": \"dark\"}', CURRENT_TIMESTAMP)",
        "INSERT INTO user_states (app_name, user_id, state, update_time) "
        "VALUES ('a', 'u', '{\"seen\": 1}', CURRENT_TIMESTAMP)",
    ]
    raced: list[str] = []

    def meanwhile(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not raced and statement.lstrip().upper().startswith("INSERT INTO APP_STATES"):
            raced.append(statement)  # once: the other writer's own INSERT comes through here too
            # its own connection and event loop (this one is inside the import's), committed before ours goes on
            writer = threading.Thread(target=lambda: asyncio.run(run_sql(url, *other)))
            writer.start()
            writer.join()

    line = {
        "id": "s1",
        "appName": "a",
        "userId": "u",
        "state": {"app:tier": "gold", "user:lang": "fr", "n": 1},
        "events": [],
        "lastUpdateTime": 1_790_000_000.0,
    }
    source = tmp_path / "s.jsonl"
    source.write_text(json.dumps(line) + "\n", encoding="utf-8")
    event.listen(Engine, "before_cursor_execute", meanwhile)
    try:
        result = runner.invoke(app, ["session", "import", str(source), "--db-url", url])
    finally:
        event.remove(Engine, "before_cursor_execute", meanwhile)
    assert raced, "the import inserted no app state row"
    assert result.exit_code == 0, result.output
    stored = asyncio.run(adk_get(url, "a", "u", "s1"))
    assert stored is not None
    assert stored.state == {"app:theme": "dark", "app:tier": "gold", "user:seen": 1, "user:lang": "fr", "n": 1}


def _stopped_creation(url: str, *, keep_a_session: bool = False) -> None:
    """The database a creator stopped between ADK's tables and their schema_version row leaves:
    on MySQL/MariaDB each CREATE TABLE commits at once. ADK made the tables here; the row and the
    `events` table (the last one created) are taken away again."""
    import asyncio

    from sessions_helpers import adk_service, run_sql

    async def create() -> None:
        service = adk_service(url)
        try:
            await service.create_session(app_name="a", user_id="u", session_id="early", state={})
        finally:
            await service.close()

    asyncio.run(create())
    statements = ["DELETE FROM adk_internal_metadata", "DROP TABLE events"]
    if not keep_a_session:
        statements[:0] = ["DELETE FROM sessions", "DELETE FROM app_states", "DELETE FROM user_states"]
    asyncio.run(run_sql(url, *statements))


@pytest.mark.parametrize("server", ["mysql_url", "pg_url"])
def test_a_creation_stopped_before_its_schema_row_is_finished_by_the_next_import(
    runner: CliRunner, request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    """ADK's metadata table without its schema_version row and no row in any ADK table: a creation
    that did not finish (Ctrl-C or a kill part-way, or a second creator looking meanwhile). The
    import finishes it and ADK opens the database; it used to be exit 1, "unknown ADK
    schema_version ''", for vmem and ADK alike, on every later run."""
    import asyncio

    from sessions_helpers import adk_get

    url = str(request.getfixturevalue(server))
    _stopped_creation(url)
    source = write_export(tmp_path / "s.jsonl", 3, 2)
    result = runner.invoke(app, ["session", "import", str(source), "--db-url", url])
    assert result.exit_code == 0, result.output
    stored = asyncio.run(adk_get(url, APP, "u1", "s000001"))
    assert stored is not None and len(stored.events) == 2


def test_a_schema_row_missing_beside_sessions_is_still_refused(
    runner: CliRunner, mysql_url: str, tmp_path: Path
) -> None:
    """Without the schema_version row but with sessions stored, the database is not one being
    created: vmem refuses it, as ADK does, names why, and `doctor` says it fails (exit 1)."""
    _stopped_creation(mysql_url, keep_a_session=True)
    source = write_export(tmp_path / "s.jsonl", 3, 2)
    result = runner.invoke(app, ["session", "import", str(source), "--db-url", mysql_url])
    assert result.exit_code == 1, result.output
    assert "unknown ADK schema_version '' in adk_internal_metadata" in result.stderr
    doctor = runner.invoke(app, ["--json", "doctor", "--db-url", mysql_url])
    checks = [c for c in json.loads(doctor.stdout) if c["name"].startswith("short_term_memory")]
    assert [c["status"] for c in checks] == ["fail"], checks
    assert doctor.exit_code == 1, doctor.output


def test_ctrl_c_while_the_tables_are_created_leaves_a_database_adk_opens(mysql_url: str, tmp_path: Path) -> None:
    """Ctrl-C as soon as the first table exists (MariaDB commits each CREATE TABLE at once): the
    creation is one short step run to its end, so the tables come with their schema_version row,
    ADK opens the database and the same import run again completes."""
    import asyncio

    import pymysql
    from sessions_helpers import adk_service

    source = write_export(tmp_path / "s.jsonl", 200, 2)
    name = mysql_url.rsplit("/", 1)[1].split("?")[0]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "veadk_mem", "session", "import", str(source), "--db-url", mysql_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)

    def tables() -> set[str]:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,))
            return {str(r[0]) for r in cur.fetchall()}

    try:
        text = interrupt_when(proc, lambda: bool(tables()))
        assert proc.returncode in (0, 130), text
        with conn.cursor() as cur:
            cur.execute(f"SELECT `key`, value FROM `{name}`.adk_internal_metadata")
            assert cur.fetchall() == (("schema_version", "1"),)
    finally:
        conn.close()

    async def adk_opens() -> None:
        service = adk_service(mysql_url)
        try:
            await service.list_sessions(app_name=APP)
        finally:
            await service.close()

    asyncio.run(adk_opens())
    again = subprocess.run(
        [sys.executable, "-m", "veadk_mem", "session", "import", str(source), "--db-url", mysql_url],
        capture_output=True,
        text=True,
        env=env,
    )
    assert again.returncode == 0, again.stderr
