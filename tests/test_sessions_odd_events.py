"""An event ADK cannot read (a field of the wrong type, as a foreign writer or a hand edit leaves
it) is one row of the `session get` and `session watch` tables saying what is wrong, and the
table goes on: never a multi-line pydantic dump ending the command. On sqlite, PostgreSQL and
MariaDB: each hands the event's JSON back its own way."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sessions_helpers import adk_service, build, run_sql, sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
APP = "demo_app"  # sessions_helpers.build's app
# (field path, JSON value) written over the first three events of the session
ODD = [(["author"], "5"), (["content"], '"str"'), (["content", "parts"], '"not a list"')]
MARKERS = [
    "[not an ADK event: author: Input should be a valid string, got 5]",
    "[not an ADK event: content: Input should be a valid dictionary or instance of Content, got 'str']",
    "[not an ADK event: content.parts: Input should be a valid list, got 'not a list']",
]


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "adk.db")
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


def _set(url: str, event_id: str, path: list[str], value: str) -> str:
    """SQL writing `value` (JSON text) at `path` of one event's event_data."""
    if url.startswith("postgresql"):
        column = f"jsonb_set(event_data, '{{{','.join(path)}}}', '{value}')"
        return f"UPDATE events SET event_data = {column} WHERE id = '{event_id}'"
    setter = "JSON_SET" if url.startswith("mysql") else "json_set"
    cast = f"JSON_EXTRACT('{value}', '$')" if url.startswith("mysql") else f"json('{value}')"
    return f"UPDATE events SET event_data = {setter}(event_data, '$.{'.'.join(path)}', {cast}) WHERE id = '{event_id}'"


def _odd_session(url: str) -> None:
    """Session u1/s1 of four events (user text, a call, its response, the answer), the first three made odd."""
    build(url, {("u1", "s1"): 4})

    async def ids() -> list[str]:
        service = adk_service(url)
        try:
            session = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
            assert session is not None
            return [e.id for e in session.events]
        finally:
            await service.close()

    events = asyncio.run(ids())
    asyncio.run(run_sql(url, *(_set(url, eid, path, value) for eid, (path, value) in zip(events, ODD, strict=False))))


def test_session_get_shows_each_odd_event_as_one_row(runner: CliRunner, db: str) -> None:
    _odd_session(db)
    result = runner.invoke(app, ["session", "get", "--db-url", db, APP, "u1", "s1"])
    assert result.exit_code == 0, result.stderr
    assert "ValidationError" not in result.stderr and "unexpected" not in result.stderr
    lines = result.stdout.splitlines()
    rows = lines[lines.index(next(line for line in lines if line.startswith("n\ttime"))) + 1 :]
    assert len(rows) == 4  # one line per event, the good one too
    for row, marker in zip(rows, MARKERS, strict=False):
        fields = row.split("\t")
        assert fields[0] == str(rows.index(row) + 1) and fields[4] == "invalid" and fields[5] == marker
    assert rows[1].split("\t")[2] == "agent"  # what is usable of an odd event is shown
    assert rows[3].split("\t")[4] not in ("invalid", "")


def test_session_watch_shows_each_odd_event_as_one_row(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "adk.db")
    _odd_session(url)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "veadk_mem", "session", "watch", APP, "u1", "s1", "--db-url", url]
    proc = subprocess.Popen(
        [*cmd, "--interval", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while len(lines) < 5 and time.monotonic() < deadline:  # the header and four rows
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "ValidationError" not in err
    assert [line.split("\t")[5] for line in lines[1:4]] == MARKERS
    assert len(lines) == 5 and "invalid" not in lines[4]
