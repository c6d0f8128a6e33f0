"""Ctrl-C during `vmem session import` (issue #41 item 3): the committed count the message gives is
what the database holds, wherever the SIGINT lands (before, during or after a batch's COMMIT)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sessions_helpers import sqlite_url
from test_sessions_import_faults import write_export

ROOT = Path(__file__).resolve().parents[1]


def _sessions(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
    except sqlite3.OperationalError:  # no tables yet
        return 0


def _said(text: str) -> int:
    """The committed count an interrupted import's message gives ("nothing was written": 0)."""
    if "nothing was written" in text or "no session was written" in text:
        return 0
    found = re.search(r"interrupted -- ([\d,]+) session\(s\) before it were written and committed", text)
    assert found, text
    return int(found.group(1).replace(",", ""))


@pytest.mark.slow
def test_ctrl_c_at_any_point_of_an_import_reports_what_the_database_holds(tmp_path: Path) -> None:
    """SIGINT to the process group of a real `vmem session import` into sqlite, at 24 points spread
    over its write pass (each run a little later): every run exits 130 (or 0 when it had finished)
    and the committed count it prints equals COUNT(*) of sessions afterwards, "nothing was written"
    only with none."""
    source = write_export(tmp_path / "in.jsonl", 6000, 4)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    wrong: list[tuple[int, int, str]] = []
    seen: list[int] = []
    for run in range(24):
        db = tmp_path / f"s{run}.db"
        cmd = [sys.executable, "-m", "veadk_mem", "session", "import", str(source), "--db-url", sqlite_url(db)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while _sessions(db) == 0 and proc.poll() is None:  # the first batch committed
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
        stored = _sessions(db)
        if proc.returncode == 0:
            assert stored == 6000, text
            continue
        assert proc.returncode == 130, text
        seen.append(stored)
        if _said(text) != stored:
            wrong.append((_said(text), stored, text.strip().splitlines()[-1]))
    assert not wrong, wrong
    assert len(seen) >= 12 and len(set(seen)) >= 2, seen  # interrupted at several points
