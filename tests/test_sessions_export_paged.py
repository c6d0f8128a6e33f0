"""`session export` of a session larger than a batch reads it a page at a time (issue 39, item 4):
the same bytes as a whole read, a damaged one left out whole, memory that does not grow with it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sessions_helpers import sqlite_url
from test_sessions_import_stream import big_session

from veadk_mem.sessions.export import Export
from veadk_mem.sessions.store import SessionStore, iter_import_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "paged.db")
    return str(request.getfixturevalue("pg_url" if request.param == "postgres" else "mysql_url"))


def _fill(url: str, path: Path, sessions: dict[str, int]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for sid, n in sessions.items():
            out.write(json.dumps(big_session(sid, n)) + "\n")

    async def go() -> None:
        async with SessionStore(url, create=True) as store:
            await store.import_records(iter_import_records(path))

    asyncio.run(go())


async def _export(url: str, batch_events: int, paged_events: int = 1000) -> tuple[str, list[str]]:
    async with SessionStore(url) as store:
        pieces = store.export_jsonl(batch_events=batch_events, paged_events=paged_events)
        text = "".join([piece async for piece in pieces])
        return text, list(pieces.warnings)


def test_a_paged_session_is_exported_byte_for_byte_as_a_whole_one(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(db, tmp_path / "in.jsonl", {"small-a": 3, "long": 2_500, "small-b": 40})
    whole, _ = asyncio.run(_export(db, 1_000_000, 1_000_000))
    paged_ids: list[str] = []
    real = Export._paged_line

    def spy(self: Export, listed: Any) -> Any:
        paged_ids.append(listed.id)
        return real(self, listed)

    monkeypatch.setattr(Export, "_paged_line", spy)
    paged, warnings = asyncio.run(_export(db, 100))
    assert paged_ids == ["long"]  # more than a batch: paged; the others read in batches
    assert paged == whole and not warnings
    [line] = [json.loads(x) for x in paged.splitlines() if json.loads(x).get("id") == "long"]
    assert len(line["events"]) == 2_500


def test_a_damaged_paged_session_is_left_out_whole(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    url = sqlite_url(path)
    _fill(url, tmp_path / "in.jsonl", {"ok": 3, "long": 1_500})
    import sqlite3

    with sqlite3.connect(path) as conn:
        (victim,) = conn.execute(
            "SELECT id FROM events WHERE session_id = 'long' ORDER BY timestamp LIMIT 1 OFFSET 1200"
        ).fetchone()
        conn.execute("UPDATE events SET event_data = '{\"broken' WHERE id = ?", (victim,))
    text, warnings = asyncio.run(_export(url, 100))
    ids = [json.loads(x).get("id") for x in text.splitlines()]
    assert "long" not in ids and "ok" in ids
    assert not any('"sessionId":"long"' in x for x in text.splitlines())  # its times line left out too
    assert any("long" in w and "not exported" in w for w in warnings), warnings


def _peak_export_rss_kb(url: str, out: Path) -> int:
    code = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    command = [sys.executable, "-m", "veadk_mem", "session", "export", "-o", str(out), "--db-url", url]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", code, *command], env=env, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def vmem_import(source: Path, url: str) -> None:
    """`vmem session import SOURCE --db-url URL` in its own process (as a user runs it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "veadk_mem", "session", "import", str(source), "--db-url", url]
    subprocess.run(command, env=env, check=True, capture_output=True)


def test_exporting_a_million_event_session_stays_under_200_mb(tmp_path: Path) -> None:
    """One session of 1,000,000 events (a few hundred bytes each): the export's peak RSS stays under
    200 MB, where reading it whole took several GB."""
    source = tmp_path / "million.jsonl"
    with source.open("w", encoding="utf-8") as out:
        out.write(json.dumps(big_session("million", 1_000_000)) + "\n")
    url = sqlite_url(tmp_path / "million.db")
    vmem_import(source, url)
    source.unlink()
    out = tmp_path / "export.jsonl"
    peak = _peak_export_rss_kb(url, out)
    with out.open(encoding="utf-8") as handle:
        lines = [line for line in handle if '"kind"' not in line[:40]]
    assert len(lines) == 1 and lines[0].count('"invocationId"') == 1_000_000
    assert peak < 200 * 1024, f"export of a 1,000,000-event session peaked at {peak // 1024} MB"
