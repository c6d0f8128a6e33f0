"""Export batches close by bytes as well as rows (issue 41 item 9): a run of 1 MB events is read a few
at a time under `VMEM_BATCH_BYTES`, with the same output as a read bounded by rows only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from veadk_mem.errors import BadInput
from veadk_mem.sessions.records import BATCH_BYTES, batch_bytes

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def test_batch_bytes_is_the_tuning_key_with_its_environment_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VMEM_BATCH_BYTES", raising=False)
    assert batch_bytes() == BATCH_BYTES == 64 << 20
    monkeypatch.setenv("VMEM_BATCH_BYTES", "1048576")
    assert batch_bytes() == 1 << 20
    monkeypatch.setenv("VMEM_BATCH_BYTES", "8MiB")
    assert batch_bytes() == 8 << 20
    for bad in ("0", "-5", "lots"):
        monkeypatch.setenv("VMEM_BATCH_BYTES", bad)
        with pytest.raises(BadInput, match="environment variable VMEM_BATCH_BYTES"):
            batch_bytes()


def _peak_kb(args: list[str], env: dict[str, str]) -> int:
    code = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    command = [sys.executable, "-c", code, sys.executable, "-m", "veadk_mem", *args]
    return int(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.split()[-1])


@pytest.mark.slow
def test_an_export_of_big_events_holds_a_few_of_them_at_a_time(tmp_path: Path) -> None:
    """60 MB of 1 MB events: bounded at 8 MiB the export's peak RSS stays well below the rows-only
    read's (which holds every event of a batch of up to 5,000), and the two files are identical."""
    text = "x" * 1_000_000
    source = tmp_path / "in.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for n in range(30):
            events = [
                {
                    "id": f"e{n}-{i}",
                    "author": "user",
                    "invocationId": f"i{n}",
                    "timestamp": 1_790_000_000.0 + n + i / 10,
                    "content": {"role": "user", "parts": [{"text": f"{n}/{i} {text}"}]},
                }
                for i in range(2)
            ]
            session = {
                "id": f"s{n}",
                "appName": "app",
                "userId": "u",
                "state": {},
                "events": events,
                "lastUpdateTime": 1_790_000_001.0 + n,
            }
            out.write(json.dumps(session) + "\n")
    db = tmp_path / "big.db"
    subprocess.run(
        [sys.executable, "-m", "veadk_mem", "session", "import", str(source), "--db-url", str(db)],
        env=ENV,
        check=True,
        capture_output=True,
    )
    bounded, rows_only = tmp_path / "bounded.jsonl", tmp_path / "rows.jsonl"
    low = _peak_kb(
        ["session", "export", "-o", str(bounded), "--db-url", str(db)], {**ENV, "VMEM_BATCH_BYTES": str(8 << 20)}
    )
    high = _peak_kb(
        ["session", "export", "-o", str(rows_only), "--db-url", str(db)], {**ENV, "VMEM_BATCH_BYTES": str(1 << 50)}
    )
    assert bounded.read_bytes() == rows_only.read_bytes()
    assert bounded.read_bytes().count(b'"invocationId"') == 60
    assert high - low > 80 * 1024, f"bounded {low // 1024} MB, rows only {high // 1024} MB"
