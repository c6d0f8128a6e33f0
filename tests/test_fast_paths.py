"""`[tuning] fast_paths`: off, every second path takes the plain one, with the same output and rows.

Off, an import validates through pydantic (not `rawsession`), the one second path left. Each
command's output, and the database an import writes, is compared both ways (sqlite always; the
servers too), so the two cannot drift. NaN and infinities are written as null on every write path.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import APP, build, build_v0, sqlite_url
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.sessions.importer import import_file
from veadk_mem.sessions.store import SessionStore

SESSIONS = {("alice", "s1"): 40, ("alice", "s2"): 3, ("bob", "s3"): 17, ("bob", "empty"): 0}


def _rows(path: Path) -> dict[str, list[Any]]:
    with sqlite3.connect(path) as conn:
        return {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
            for table in ("sessions", "events", "app_states", "user_states")
        }


def test_an_import_writes_the_same_rows_with_the_fast_paths_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = sqlite_url(tmp_path / "source.db")
    build(source, SESSIONS)

    async def export() -> str:
        async with SessionStore(source) as store:
            return "".join([p async for p in store.export_jsonl()])

    dump = tmp_path / "dump.jsonl"
    dump.write_text(asyncio.run(export()), encoding="utf-8")

    for name, flag in (("fast", "true"), ("plain", "false")):
        monkeypatch.setenv("VMEM_FAST_PATHS", flag)

        async def go(target: Path = tmp_path / f"{name}.db") -> None:
            async with SessionStore(sqlite_url(target), create=True) as store:
                report = await import_file(store, dump)
                assert report.sessions == len(SESSIONS)

        asyncio.run(go())
    fast, plain = _rows(tmp_path / "fast.db"), _rows(tmp_path / "plain.db")
    assert len(fast["events"]) == sum(SESSIONS.values())
    # sessions and events: equal column by column, events' JSON text and times included
    assert fast["sessions"] == plain["sessions"] and fast["events"] == plain["events"]
    # state rows: their update time is the import's own clock; the rest is equal
    for table in ("app_states", "user_states"):
        assert [r[:-1] for r in fast[table]] == [r[:-1] for r in plain[table]] != []


def _both_ways(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[str, str]:
    """stdout of `vmem ARGS` with the fast paths on, then off (each must exit 0)."""
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("VMEM_FAST_PATHS", flag)
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, (flag, result.stderr)
        out.append(result.stdout)
    return out[0], out[1]


def _read_commands_agree(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build(url, SESSIONS)
    for args in (
        ("session", "export", "--db-url", url),
        ("session", "get", APP, "alice", "s1", "--json", "--db-url", url),
        ("session", "get", APP, "bob", "s3", "--events", "5", "--json", "--db-url", url),
        ("session", "list", "-n", "0", "--json", "--db-url", url),
        ("session", "stats", "--json", "--db-url", url),
        ("session", "delete", "-a", APP, "--dry-run", "--json", "--db-url", url),
    ):
        fast, plain = _both_ways(monkeypatch, *args)
        assert fast == plain != "", args


def test_read_commands_print_the_same_both_ways_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _read_commands_agree(sqlite_url(tmp_path / "r.db"), monkeypatch)


def test_read_commands_print_the_same_both_ways_postgres(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _read_commands_agree(pg_url, monkeypatch)


def test_read_commands_print_the_same_both_ways_mysql(mysql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _read_commands_agree(mysql_url, monkeypatch)


def test_an_import_refuses_nan_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no write path takes a NaN from a file: the check refuses it, with the fast paths on or off
    record = {"id": "s", "appName": "a", "userId": "u", "state": {"x": float("nan")}, "events": []}
    jsonl = tmp_path / "nan.jsonl"
    jsonl.write_text(json.dumps(record) + "\n", encoding="utf-8")
    for flag in ("1", "0"):
        monkeypatch.setenv("VMEM_FAST_PATHS", flag)
        result = CliRunner().invoke(app, ["session", "import", str(jsonl), "--db-url", str(tmp_path / f"{flag}.db")])
        assert result.exit_code == 2, result.stderr
        assert "nan.jsonl: line 1: $.state.x: nan is not a JSON number" in result.stderr


async def _sql(url: str, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """Run one statement on `url` in its own transaction; its rows (none for a write)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(text(sql), params or {})
            return list(result.all()) if result.returns_rows else []
    finally:
        await engine.dispose()


def _nan_pickles(url: str) -> None:
    """Give every v0 event an `actions` pickle whose state_delta holds NaN and infinities."""
    import pickle

    from google.adk.events.event_actions import EventActions

    blob = pickle.dumps(EventActions(state_delta={"nan": float("nan"), "inf": float("inf"), "ninf": -float("inf")}))
    asyncio.run(_sql(url, "UPDATE events SET actions = :a", {"a": blob}))


def _upgrade_writes_nan_as_null(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    build_v0(url, {("alice", "s1"): 3})
    _nan_pickles(url)
    monkeypatch.setenv("VMEM_FAST_PATHS", flag)
    result = CliRunner().invoke(
        app, ["session", "upgrade", "--db-url", url, "--backup", str(tmp_path / f"b{flag}.jsonl")]
    )
    assert result.exit_code == 0, result.stderr
    cast = "CAST(event_data AS TEXT)" if url.startswith("postgresql") else "event_data"
    texts = [str(r[0]) for r in asyncio.run(_sql(url, f"SELECT {cast} FROM events"))]
    assert len(texts) == 3
    for text in texts:
        assert "NaN" not in text and "Infinity" not in text, text
        delta = json.loads(text)["actions"]["state_delta"]
        assert delta == {"nan": None, "inf": None, "ninf": None}


@pytest.mark.parametrize("flag", ["1", "0"])
def test_upgrade_of_a_nan_pickle_writes_null_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    _upgrade_writes_nan_as_null(sqlite_url(tmp_path / "v0.db"), tmp_path, monkeypatch, flag)


@pytest.mark.parametrize("flag", ["1", "0"])
def test_upgrade_of_a_nan_pickle_writes_null_postgres(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    _upgrade_writes_nan_as_null(pg_url, tmp_path, monkeypatch, flag)


@pytest.mark.parametrize("flag", ["1", "0"])
def test_upgrade_of_a_nan_pickle_writes_null_mysql(
    mysql_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    _upgrade_writes_nan_as_null(mysql_url, tmp_path, monkeypatch, flag)
