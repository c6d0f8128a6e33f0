"""Import batches close by bytes as well as rows (issue 41 item 9): lines just under the big-line cut
are written a few at a time under `VMEM_BATCH_BYTES`, not hundreds of them per batch."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from veadk_mem.sessions.batches import _take_batch
from veadk_mem.sessions.rawsession import RawSession
from veadk_mem.sessions.validate import iter_checked

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def _session(n: int, text: str) -> dict[str, object]:
    events = [
        {
            "id": f"e{n}-{i}",
            "author": "user",
            "invocationId": f"i{n}",
            "timestamp": 1_790_000_000.0 + n + i / 10,
            "content": {"role": "user", "parts": [{"text": f"{n}/{i} {text}"}]},
        }
        for i in range(3)
    ]
    return {"id": f"s{n}", "appName": "app", "userId": "u", "state": {}, "events": events, "lastUpdateTime": 1.8e9 + n}


def test_each_line_s_bytes_reach_its_record_and_close_the_batch(tmp_path: Path) -> None:
    """A JSONL line's length is on its record (0 for a JSON list); `_take_batch` closes once the
    records taken reach `max_bytes`, and takes at least one whatever its size."""
    lines = [json.dumps(_session(n, "y" * 1000)) + "\n" for n in range(6)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(lines), encoding="utf-8")
    records = [record for _, record in iter_checked(source, big="skip")]
    assert [r.size for r in records] == [len(line.encode()) for line in lines]
    listed = tmp_path / "in.json"
    listed.write_text(json.dumps([_session(0, "y")]), encoding="utf-8")
    assert [r.size for _, r in iter_checked(listed, big="skip")] == [0]

    size = records[0].size
    stream = iter(records)
    batch, done = _take_batch(stream, 60.0, 5000, 2 * size + 1)
    assert [r.id for r in batch] == ["s0", "s1", "s2"] and not done  # the third reaches the bound
    batch, done = _take_batch(stream, 60.0, 5000, 1)
    assert [r.id for r in batch] == ["s3"] and not done
    batch, done = _take_batch(stream, 60.0, 5000, 1 << 40)
    assert [r.id for r in batch] == ["s4", "s5"] and done
    unsized = [RawSession("x", "app", "u", {}, 1.0, []) for _ in range(3)]
    assert len(_take_batch(iter(unsized), 60.0, 5000, 1)[0]) == 3  # size unknown (0): rows and time only


@pytest.mark.slow
def test_an_import_of_lines_under_the_big_line_cut_holds_a_few_at_a_time(tmp_path: Path) -> None:
    """~180 MB of 1.5 MB lines (three 500 KB events each), under the 2 MB cut that would stream
    them: with `VMEM_BATCH_BYTES` at 16 MiB the import's peak RSS stays far below the file's size,
    and every session is written."""
    text = "x" * 500_000
    source = tmp_path / "in.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for n in range(120):
            out.write(json.dumps(_session(n, text)) + "\n")
    assert source.stat().st_size > 170 << 20
    db = tmp_path / "big.db"
    code = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    args = ["-m", "veadk_mem", "session", "import", str(source), "--db-url", str(db)]
    command = [sys.executable, "-c", code, sys.executable, *args]
    env = {**ENV, "VMEM_BATCH_BYTES": str(16 << 20)}
    peak_kb = int(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.split()[-1])
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (120,)
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (360,)
    assert peak_kb < 150 * 1024, f"peak RSS {peak_kb // 1024} MB for a {source.stat().st_size >> 20} MB file"
