"""Ctrl-C during `vmem session import` (issue #41 item 3): the committed count the message gives is
what the database holds, wherever the SIGINT lands (before, during or after a batch's COMMIT), on
sqlite, PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import sqlite_url
from test_sessions_import_faults import write_export

ROOT = Path(__file__).resolve().parents[1]


class _Sqlite:
    """A fresh sqlite file per run; counts its sessions."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path, self.run = tmp_path, 0

    def url(self) -> str:
        self.run += 1
        return sqlite_url(self.tmp_path / f"s{self.run}.db")

    def sessions(self) -> int:
        try:
            with sqlite3.connect(self.tmp_path / f"s{self.run}.db", timeout=30) as conn:
                return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
        except sqlite3.OperationalError:  # no tables yet
            return 0

    def close(self) -> None:
        pass


class _Postgres:
    """The test's PostgreSQL database, emptied (its tables dropped) before each run; one open connection
    counts its sessions, each query in its own transaction so it sees every COMMIT."""

    def __init__(self, url: str) -> None:
        import asyncpg

        self._url = url
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql")))

    def url(self) -> str:
        tables = self.loop.run_until_complete(
            self.conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        )
        for row in tables:
            self.loop.run_until_complete(self.conn.execute(f'DROP TABLE "{row[0]}" CASCADE'))
        return self._url

    def sessions(self) -> int:
        if self.loop.run_until_complete(self.conn.fetchval("SELECT to_regclass('sessions')")) is None:
            return 0
        return int(self.loop.run_until_complete(self.conn.fetchval("SELECT count(*) FROM sessions")))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


class _MariaDB:
    """The test's MariaDB database, emptied before each run; one autocommit connection counts its
    sessions (autocommit: each SELECT a fresh snapshot, not the first one's under REPEATABLE READ)."""

    def __init__(self, url: str) -> None:
        import pymysql
        from sqlalchemy.engine import make_url

        self._url = url
        parts = make_url(url)
        self.conn: Any = pymysql.connect(
            host=parts.host, port=parts.port, user=parts.username, password="", database=parts.database, autocommit=True
        )

    def url(self) -> str:
        with self.conn.cursor() as cur:
            cur.execute("SHOW TABLES")
            tables = [row[0] for row in cur.fetchall()]
            cur.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in tables:
                cur.execute(f"DROP TABLE `{table}`")
            cur.execute("SET FOREIGN_KEY_CHECKS = 1")
        return self._url

    def sessions(self) -> int:
        import pymysql

        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM sessions")
                return int(cur.fetchone()[0])
        except pymysql.err.ProgrammingError:  # no tables yet
            return 0

    def close(self) -> None:
        self.conn.close()


def _said(text: str) -> int:
    """The committed count an interrupted import's message gives ("nothing was written": 0)."""
    if "nothing was written" in text or "no session was written" in text:
        return 0
    found = re.search(r"interrupted -- ([\d,]+) session\(s\) before it were written and committed", text)
    assert found, text
    return int(found.group(1).replace(",", ""))


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgres", "mysql"])
def test_ctrl_c_at_any_point_of_an_import_reports_what_the_database_holds(
    request: pytest.FixtureRequest, database: str, tmp_path: Path
) -> None:
    """SIGINT to the process group of a real `vmem session import`, at 24 points spread over its
    write pass (each run a little later): every run exits 130 (or 0 when it had finished) and the
    committed count it prints equals COUNT(*) of sessions afterwards, "nothing was written" only
    with none."""
    source = write_export(tmp_path / "in.jsonl", 6000, 4)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    if database == "sqlite":
        db: _Sqlite | _Postgres | _MariaDB = _Sqlite(tmp_path)
    elif database == "postgres":
        db = _Postgres(str(request.getfixturevalue("pg_url")))
    else:
        db = _MariaDB(str(request.getfixturevalue("mysql_url")))
    wrong: list[tuple[int, int, str]] = []
    seen: list[int] = []
    try:
        for run in range(24):
            cmd = [sys.executable, "-m", "veadk_mem", "session", "import", str(source), "--db-url", db.url()]
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True
            )
            try:
                deadline = time.monotonic() + 120
                while db.sessions() == 0 and proc.poll() is None:  # the first batch committed
                    assert time.monotonic() < deadline
                    time.sleep(0.002)
                time.sleep((run % 6) * 0.05)  # at the first COMMIT, then later
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGINT)
                _, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
            text = err.decode()
            stored = db.sessions()
            if proc.returncode == 0:
                assert stored == 6000, text
                continue
            assert proc.returncode == 130, text
            seen.append(stored)
            if _said(text) != stored:
                wrong.append((_said(text), stored, text.strip().splitlines()[-1]))
    finally:
        db.close()
    assert not wrong, wrong
    assert len(seen) >= 12 and len(set(seen)) >= 2, seen  # interrupted at several points
