"""Issue 41 item 9: `ltm save` and `ltm import` hold their batches by bytes, not only by rows.

A replay embedded 256 sessions (or 4,096 events) together whatever their size, and an import
kept up to 500 memories waiting per (index, user), for any number of users: a file of huge
records was held by the row count. Both now also cut at `[tuning] batch_bytes`
(`[tuning] batch_bytes`, `VMEM_BATCH_BYTES`). Each test here failed on the code before its fix.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.events import Session
from veadk_mem.ltm.base import MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory


@pytest.fixture(autouse=True)
def local_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")
    monkeypatch.setenv("LONG_TERM_MEMORY_LOCAL_PATH", str(tmp_path / "ltm.db"))


def _session(n: int, size: int) -> Session:
    from veadk_mem.events import parse_session

    return parse_session(
        {
            "id": f"s{n}",
            "appName": "app",
            "userId": "u",
            "state": {},
            "events": [
                {
                    "id": f"s{n}-e",
                    "author": "user",
                    "invocationId": "i",
                    "timestamp": 1_790_000_000.0,
                    "content": {"role": "user", "parts": [{"text": f"{n} " + "x" * size}]},
                }
            ],
        },
        f"s{n}",
    )


def test_a_replay_batch_is_cut_by_bytes() -> None:
    from veadk_mem.ltm.replay import _batches, session_bytes

    sessions = [_session(n, 100_000) for n in range(10)]
    assert all(100_000 < session_bytes(s) < 101_000 for s in sessions)

    async def sizes(batch_bytes: int) -> list[int]:
        async def items() -> AsyncIterator[Any]:
            for s in sessions:
                yield s.id, s

        return [len(b) async for b in _batches(items(), batch_bytes)]

    assert asyncio.run(sizes(300_000)) == [3, 3, 3, 1]
    assert asyncio.run(sizes(64 * 1024 * 1024)) == [10]  # the default: rows cut first


def test_ltm_save_takes_the_bound_from_the_environment(runner: CliRunner, tmp_path: Path) -> None:
    sessions = tmp_path / "s.jsonl"
    lines = []
    for n in range(6):
        session = _session(n, 40_000)
        lines.append(json.dumps(session.model_dump(mode="json", by_alias=True, exclude_none=True)))
    sessions.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["ltm", "save", str(sessions), "--json"], env={"VMEM_BATCH_BYTES": "100000"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["totals"]["saved"] == 6
    bad = runner.invoke(app, ["ltm", "save", str(sessions)], env={"VMEM_BATCH_BYTES": "lots"})
    assert bad.exit_code == 2 and "environment variable VMEM_BATCH_BYTES: expected a size such as 64MiB" in bad.stderr


class Saves(LongTermMemory):
    """The facade, noting how many records each save hands the store."""

    batches: list[int]

    async def save_records(self, user_id: str, records: list[MemoryRecord], index: str, **kw: Any) -> list[str]:
        self.batches.append(len(records))
        return await super().save_records(user_id, records, index, **kw)


def test_an_import_holds_its_waiting_batches_by_bytes() -> None:
    from veadk_mem.ltm.transfer import import_records

    ltm = Saves.from_settings(load_settings().settings)
    assert isinstance(ltm, Saves)
    ltm.batches = []
    # 40 users, 3 memories of 20,000 characters each: no batch reaches 500 rows
    records = [
        ("app", MemoryRecord(text=f"{n} " + "y" * 20_000, user_id=f"u{n % 40}", app_name="app"), None, None)
        for n in range(120)
    ]

    async def go() -> Any:
        try:
            return await import_records(ltm, iter(records), batch_bytes=200_000)
        finally:
            await ltm.close()

    summary = asyncio.run(go())
    assert summary.saved == 120 and summary.failed == 0
    # ten memories of 20 KB fill 200,000 bytes: every waiting batch (ten users', one memory each)
    # is saved then, so no more than ten memories ever wait; by rows alone all 120 waited to the end
    assert ltm.batches == [1] * 120
