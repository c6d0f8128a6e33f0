"""`vmem session upgrade` of a v0 (pickle) sqlite database, ADK 1.15's column set: wall time and peak RSS.

    .venv/bin/python bench/session_upgrade.py                # 2,000 sessions x 20 events
    .venv/bin/python bench/session_upgrade.py --sessions 200 # quicker

The database is made without the old ADK (its append_event would take minutes at this
size): the v0 tables of ADK 1.15-1.17 (`build_tables(Layout.V0, <1.15 columns>)`, the
events table without usage_metadata, citation_metadata, input_transcription and
output_transcription) and rows written by vmem's import, which writes that column set and
pickles `actions` as ADK does. Each event has text, every fifth a state delta.

The upgrade runs as `vmem session upgrade` in a fresh process (the CLI's own entry point),
which reports its wall time, its CPU time (user + system: on a shared, loaded machine the
wall time says more about the neighbours than about the upgrade) and its peak RSS (VmHWM)
above its RSS at start, both before the imports (the interpreter alone) and after them
(what the upgrade itself adds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEXT = "The quick brown fox jumps over the lazy dog. " * 3
ADK_115_MISSING = ("usage_metadata", "citation_metadata", "input_transcription", "output_transcription")


def _sessions(n: int, per: int) -> Any:
    from veadk_mem import events as ev

    start = 1_790_000_000.0
    for i in range(n):
        sid = f"s{i:05d}"
        events = [
            ev.Event(
                id=f"{sid}-{j:04d}",
                invocation_id=f"inv-{j // 2}",
                author="user" if j % 2 == 0 else "agent",
                timestamp=start + i * 30 + j + 0.123456,
                content=ev.Content(role="user" if j % 2 == 0 else "model", parts=[ev.Part(text=f"{j}: {TEXT}")]),
                actions=ev.EventActions(state_delta={"turn": j} if j % 5 == 0 else {}),
            )
            for j in range(per)
        ]
        yield ev.Session(
            id=sid,
            app_name="bench",
            user_id=f"u{i % 100:03d}",
            state={"topic": sid, "app:tier": "gold", "user:lang": "zh"},
            events=events,
            last_update_time=events[-1].timestamp,
        )


async def build(path: Path, n: int, per: int) -> None:
    """A v0 sqlite file with ADK 1.15's column set and n sessions of `per` events."""
    from sqlalchemy import create_engine

    from veadk_mem.sessions.layout import V0_CORE_COLUMNS, Layout, build_tables
    from veadk_mem.sessions.store import SessionStore

    full = build_tables(Layout.V0)
    columns = frozenset(c.name for c in full.events.columns if c.name not in ADK_115_MISSING) | V0_CORE_COLUMNS
    engine = create_engine(f"sqlite:///{path}")
    build_tables(Layout.V0, columns).metadata.create_all(engine)
    engine.dispose()
    async with SessionStore(str(path)) as store:
        assert store.db.tables.releases == "1.15-1.17", store.db.tables.describe()
        await store.import_records(_sessions(n, per))


CHILD = """
import json, os, resource, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
start = rss()
from veadk_mem.cli.app import app
import veadk_mem.sessions.upgrade, veadk_mem.sessions.store, sqlalchemy.ext.asyncio, aiosqlite
imported = rss()
t0 = time.perf_counter()
u0 = resource.getrusage(resource.RUSAGE_SELF)
try:
    app(sys.argv[1:], prog_name="vmem")
except SystemExit as exc:
    code = exc.code
took = time.perf_counter() - t0
u1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
print(json.dumps({"code": code, "seconds": took, "cpu": cpu, "start_mb": start, "imported_mb": imported,
                  "peak_mb": hwm()}), file=sys.stderr)
"""


def upgrade(db: Path, backup: Path) -> dict[str, Any]:
    """Run `vmem session upgrade` in a fresh process; its figures."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "--quiet", "session", "upgrade", "--db-url", str(db), "--backup", str(backup)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - t0
    lines = done.stderr.strip().splitlines()
    figures = dict(json.loads(lines[-1]))
    assert figures["code"] in (0, None), done.stderr
    figures["wall"] = wall
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--events", type=int, default=20, help="events per session")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "adk-1.15.db"
        t0 = time.perf_counter()
        asyncio.run(build(db, args.sessions, args.events))
        size = db.stat().st_size / 2**20
        print(
            f"built a v0 (ADK 1.15-1.17) sqlite database: {args.sessions:,} sessions x {args.events} events, "
            f"{size:.1f} MB, in {time.perf_counter() - t0:.1f} s"
        )
        f = upgrade(db, Path(tmp) / "backup.jsonl")
        backup_mb = (Path(tmp) / "backup.jsonl").stat().st_size / 2**20
        print(
            f"vmem session upgrade: {f['seconds']:.1f} s in the command, {f['cpu']:.1f} s of CPU (user + system: "
            f"the figure to compare on a loaded machine) ({f['wall']:.1f} s wall, process start included); "
            f"peak RSS {f['peak_mb']:.0f} MB: {f['peak_mb'] - f['start_mb']:.0f} MB above the "
            f"process's start, {f['peak_mb'] - f['imported_mb']:.0f} MB above it after imports "
            f"({f['start_mb']:.0f} MB at start, {f['imported_mb']:.0f} MB imported); backup {backup_mb:.1f} MB"
        )


if __name__ == "__main__":
    main()
