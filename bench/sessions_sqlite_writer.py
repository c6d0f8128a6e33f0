"""An agent writing to a sqlite file while `session delete` runs, with and without the pause between batches.

    .venv/bin/python bench/sessions_sqlite_writer.py                  # 3,000 sessions deleted, 100 a batch
    .venv/bin/python bench/sessions_sqlite_writer.py --sessions 1000 --runs 3

sqlite has one writer for the whole file. A writer that finds it locked waits in sqlite's
busy handler, which sleeps and tries again; a delete whose next batch takes the lock the
instant the last one committed keeps such a writer out for batch after batch. vmem pauses
after each batch on sqlite (`engine.sqlite_gap`: as long as the batch held the lock, at
most 100 ms). This imports `--sessions` old sessions (`bench/sessions_scale.py`'s shapes)
into a fresh sqlite file, then, alternately without the pause and with it, deletes them
(`SessionStore.delete_sessions`, `--batch` sessions a transaction) while a thread writes a
row every 50 ms through its own connection (5 s busy timeout, as ADK's): it prints the
delete's wall time, the writes done meanwhile and their p50 / max latency, and the load.
"""

from __future__ import annotations

import argparse
import asyncio
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

import sessions_scale as scale


def run(seed: Path, work: Path, batch: int, pause: bool) -> str:
    from veadk_mem.sessions import deletes
    from veadk_mem.sessions.engine import sqlite_gap
    from veadk_mem.sessions.store import SessionFilter, SessionStore

    async def no_pause(dialect: str, held: float) -> None:
        return None

    deletes.sqlite_gap = sqlite_gap if pause else no_pause
    path = work / f"run-{'pause' if pause else 'none'}.db"
    shutil.copy(seed, path)
    latencies: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def agent() -> None:
        conn = sqlite3.connect(path, timeout=5, isolation_level=None)
        n = 0
        while not stop.is_set():
            n += 1
            t0 = time.perf_counter()
            try:
                conn.execute("BEGIN")
                conn.execute(
                    "INSERT INTO app_states (app_name, state, update_time) VALUES ('probe', '{}', ?) "
                    "ON CONFLICT (app_name) DO UPDATE SET update_time = excluded.update_time",
                    (n,),
                )
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                errors.append(str(exc))
                conn.execute("ROLLBACK")
            latencies.append(time.perf_counter() - t0)
            time.sleep(0.05)
        conn.close()

    async def go() -> float:
        async with SessionStore(f"sqlite+aiosqlite:///{path}") as store:
            listed = await store.list_sessions(SessionFilter(older_than=365 * 86400), oldest_first=True)
            thread = threading.Thread(target=agent)
            thread.start()
            t0 = time.perf_counter()
            await store.delete_sessions(listed, recheck=True, batch=batch)
            wall = time.perf_counter() - t0
            stop.set()
            thread.join()
            return wall

    load = os.getloadavg()[0]
    wall = asyncio.run(go())
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    worst = latencies[-1] * 1000 if latencies else float("nan")
    return (
        f"| {'yes' if pause else 'no'} | {wall:.1f} | {len(latencies)} | {p50:.0f} / {worst:.0f} | "
        f"{len(errors)} | {load:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3000, help="old sessions to delete")
    parser.add_argument("--batch", type=int, default=100, help="sessions per delete transaction")
    parser.add_argument("--runs", type=int, default=2, help="pairs of runs (without, with the pause)")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vmem-sqlite-writer-"))
    source, seed = work / "in.jsonl", work / "seed.db"
    scale.build_file(source, opts.sessions * 40, 0, opts.sessions)
    *_, code, err = scale.vmem(["session", "import", str(source)], f"sqlite+aiosqlite:///{seed}")
    if code != 0:
        sys.exit(f"import failed: {err}")
    print("| pause | delete wall s | agent writes | agent write p50 / max ms | agent errors | load |")
    print("|---|---|---|---|---|---|")
    for _ in range(opts.runs):
        for pause in (False, True):
            print(run(seed, work, opts.batch, pause), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
