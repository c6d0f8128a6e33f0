"""Issue 41 item 4: a delete by filter removes a session whose stored state the reads cannot decode.

The reads skip such a row (with a warning); a delete needs only its key. `session delete -u` and
`forget` found such rows by key already; `session delete --older-than` (and --since / --until)
took the reads' list alone and left the session and its events, exit 0, saying nothing.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from sessions_helpers import sqlite_url
from test_sessions_deletes import adk_session
from typer.testing import CliRunner

from veadk_mem.cli.app import app

OLD = "2020-01-01 00:00:00.000000"


def _two_old_sessions_one_corrupt(db: Path) -> None:
    for sid in ("s1", "s2"):
        asyncio.run(adk_session(sqlite_url(db), "carol", sid, ["card 4111 1111 1111 1111", "b"]))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET state = '{not json' WHERE id = 's2'")
        conn.execute("UPDATE events SET event_data = '{not json' WHERE session_id = 's2'")
        conn.execute("UPDATE sessions SET update_time = ?", (OLD,))


@pytest.mark.parametrize(
    "bound", [["--older-than", "1d"], ["--until", "2021-01-01"], ["-u", "carol", "--older-than", "1d"]]
)
def test_a_time_bounded_delete_removes_a_session_whose_state_is_corrupt(tmp_path: Path, bound: list[str]) -> None:
    db = tmp_path / "veadk.db"
    _two_old_sessions_one_corrupt(db)
    plan = CliRunner().invoke(app, ["session", "delete", *bound, "--db-url", str(db), "--dry-run", "--json"])
    assert plan.exit_code == 0, plan.stderr
    assert json.loads(plan.stdout)["session_count"] == 2  # the plan names it too

    result = CliRunner().invoke(app, ["session", "delete", *bound, "--db-url", str(db), "--yes", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert sorted(s["id"] for s in report["sessions"]) == ["s1", "s2"] and report["event_count"] == 4
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)


def test_a_time_bound_still_keeps_a_newer_session_whose_state_is_corrupt(tmp_path: Path) -> None:
    db = tmp_path / "veadk.db"
    _two_old_sessions_one_corrupt(db)
    with sqlite3.connect(db) as conn:  # s2 is recent: outside the bound, kept whatever its state
        conn.execute("UPDATE sessions SET update_time = '2999-01-01 00:00:00.000000' WHERE id = 's2'")
    result = CliRunner().invoke(app, ["session", "delete", "--older-than", "1d", "--db-url", str(db), "--yes"])
    assert result.exit_code == 0, result.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id FROM sessions").fetchall() == [("s2",)]
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (2,)
