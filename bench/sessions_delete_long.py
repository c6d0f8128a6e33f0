"""An agent writing to a sqlite file while `session delete` removes one long session: the agent's longest wait.

    .venv/bin/python bench/sessions_delete_long.py                  # one session of 300,000 events
    .venv/bin/python bench/sessions_delete_long.py --events 100000 --runs 1

sqlite has one writer for the whole file. The old way deleted a session's events in one
transaction (2,000,000 events held the lock 5-6 s, past ADK's 5 s busy timeout: the agent's
append failed). vmem deletes a long session in transactions of `long_delete.SQLITE_LONG_STEP`
events, newest first, with the pause after each (`engine.sqlite_gap`). This writes a file
where ADK made the session (its tables, its index) and copies its event row to N events,
then, alternately the old way (`Deletes._delete_batch`: one transaction) and vmem's, deletes
it while a thread writes a row every 50 ms through its own connection (5 s busy timeout, as
ADK's, `sessions_sqlite_writer.write_every_50ms`): it prints the delete's wall time, the
agent's writes, their p50 / max latency, errors, the load, and the ratio of the two max waits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sessions_sqlite_writer import write_every_50ms

APP, USER, SID = "bench_app", "bench_user", "long"


def build(path: Path, events: int) -> None:
    """ADK's tables with one session written by ADK, its event row copied to `events` rows."""
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    async def adk() -> None:
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
        try:
            session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
            content = types.Content(role="user", parts=[types.Part(text="a question of about this length")])
            await service.append_event(session, Event(author="user", invocation_id="i", content=content))
            await service.create_session(app_name="agent_app", user_id="agent_user", session_id="live")
        finally:
            await service.close()

    asyncio.run(adk())
    with sqlite3.connect(path) as conn:
        (_id, app, user, sid, inv, _ts, data) = conn.execute(
            "SELECT * FROM events WHERE session_id = ?", (SID,)
        ).fetchone()
        doc = json.loads(data)
        start = int(doc["timestamp"]) + 1
        head = json.dumps({k: v for k, v in doc.items() if k not in ("id", "timestamp")})[:-1]
        rows = (
            (
                f"e{i:08d}",
                app,
                user,
                sid,
                inv,
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start + i // 1000)) + f".{i % 1000:03d}000",
                f'{head}, "id": "e{i:08d}", "timestamp": {start + i / 1000}}}',
            )
            for i in range(1, events)
        )
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def run(seed: Path, work: Path, short: bool) -> tuple[str, float]:
    """Delete the long session from a copy of `seed`, the old way or vmem's, while the agent writes."""
    from veadk_mem.sessions.records import DeleteReport
    from veadk_mem.sessions.store import SessionKey, SessionStore

    path = work / f"run-{'short' if short else 'one'}.db"
    shutil.copy(seed, path)
    latencies: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    async def go() -> tuple[float, int]:
        async with SessionStore(f"sqlite+aiosqlite:///{path}") as store:
            chosen = await store.find_sessions([SessionKey(APP, USER, SID)])
            thread = threading.Thread(target=write_every_50ms, args=(path, latencies, errors, stop))
            thread.start()
            time.sleep(0.2)
            t0 = time.perf_counter()
            try:
                if short:
                    report = await store.delete_sessions(chosen)
                else:  # the old way: the session one batch, one transaction
                    report = DeleteReport(sessions=[], events=0)
                    await store._deletes._delete_batch(chosen, report, False)
                return time.perf_counter() - t0, report.events
            finally:
                stop.set()
                thread.join()

    load = os.getloadavg()[0]
    wall, deleted = asyncio.run(go())
    load = max(load, os.getloadavg()[0])
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    worst = latencies[-1] * 1000 if latencies else float("nan")
    way = "short transactions (vmem)" if short else "one transaction (old)"
    row = f"| {way} | {deleted:,} | {wall:.1f} | {len(latencies)} | {p50:.0f} / {worst:,.0f} | {len(errors)} |"
    row += f" {load:.1f} |"
    return row, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000, help="events of the long session")
    parser.add_argument("--runs", type=int, default=2, help="pairs of runs (old way, vmem's)")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vmem-delete-long-"))
    seed = work / "seed.db"
    build(seed, opts.events)
    print(f"one session of {opts.events:,} events; an agent writes a row every 50 ms (5 s busy timeout)")
    print("| delete | events | wall s | agent writes | agent write p50 / max ms | agent errors | load |")
    print("|---|---|---|---|---|---|---|")
    worst: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(opts.runs):
        for short in (False, True):
            row, longest = run(seed, work, short)
            worst[short].append(longest)
            print(row, flush=True)
    print(f"agent's longest wait, old / vmem: {max(worst[False]) / max(worst[True]):.1f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
