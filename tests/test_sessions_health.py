"""`SessionStore(url).db.health()`: what `vmem doctor` reports of a session database (issue 24 item 5)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sessions_helpers import build, build_v0, sqlite_url

from veadk_mem.sessions.store import SessionStore


def test_health_of_a_database_adk_wrote_gives_its_layout_and_size(tmp_path: Path) -> None:
    db = tmp_path / "veadk.db"
    build(sqlite_url(db), {("alice", "a"): 3, ("bob", "b"): 2})  # real google-adk
    health = asyncio.run(SessionStore(str(db)).db.health())
    assert health.layout == "v1"
    assert health.counts == {"sessions": 2, "events": 5}
    assert "ADK" in health.layout_description


def test_health_of_a_pickle_era_database_names_its_layout(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    build_v0(sqlite_url(db), {("alice", "a"): 2})
    health = asyncio.run(SessionStore(str(db)).db.health())
    assert health.layout == "v0" and health.counts == {"sessions": 1, "events": 2}


def test_health_reports_an_empty_or_foreign_database_without_opening_it_as_a_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    health = asyncio.run(SessionStore(str(empty)).db.health())
    assert health.layout == "empty" and health.counts is None
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE sessions (x INTEGER)")
        conn.execute("CREATE TABLE events (y INTEGER)")
    odd = asyncio.run(SessionStore(str(foreign)).db.health())
    assert odd.layout is None and odd.counts is None and odd.layout_description


def test_health_lets_the_drivers_error_out_when_the_server_is_not_there() -> None:
    with pytest.raises(OSError):
        asyncio.run(SessionStore("postgresql://postgres@127.0.0.1:9/x").db.health())


def test_doctor_names_the_database_a_refused_url_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --db-url SQLAlchemy cannot read (a port that is not a number) is a failed check named
    after the database it names, not after the configured backend (sqlite by default)."""
    import json

    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["doctor", "--json", "--db-url", "postgresql://u:pw@127.0.0.1:notaport/x"])
    [check] = [c for c in json.loads(result.stdout) if c["name"].startswith("short_term_memory")]
    assert check["name"] == "short_term_memory (postgresql)" and check["status"] == "fail", check
    assert "pw" not in result.stdout
