"""An agent writing to a sqlite file while `session delete` runs, with and without the pause between batches.

    .venv/bin/python bench/sessions_sqlite_writer.py                  # 3,000 sessions deleted, 100 a batch
    .venv/bin/python bench/sessions_sqlite_writer.py --sessions 1000 --runs 3
    .venv/bin/python bench/sessions_sqlite_writer.py --big 200000     # import of one big session instead

sqlite has one writer for the whole file. A writer that finds it locked waits in sqlite's
busy handler, which sleeps and tries again; a delete whose next batch takes the lock the
instant the last one committed keeps such a writer out for batch after batch. vmem pauses
after each batch on sqlite (`engine.sqlite_gap`: as long as the batch held the lock, at
most 100 ms). This imports `--sessions` old sessions (`bench/sessions_scale.py`'s shapes)
into a fresh sqlite file, then, alternately without the pause and with it, deletes them
(`SessionStore.delete_sessions`, `--batch` sessions a transaction) while a thread writes a
row every 50 ms through its own connection (5 s busy timeout, as ADK's): it prints the
delete's wall time, the writes done meanwhile and their p50 / max latency, and the load.

With `--big N`, the same agent writes while `session import` writes a file holding one
session of N events (a long line, streamed) into a sqlite file holding ADK's tables,
alternately in the one transaction it was (`BigWrites._write_big`) and in short transactions
with the session row last (`BigWrites._write_big_staged`, what vmem does on sqlite): it prints
the import's wall time and rate and the agent's writes, p50 / p99 / max latency and errors.
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


def write_every_50ms(path: Path, latencies: list[float], errors: list[str], stop: threading.Event) -> None:
    """The agent: a one-row write transaction every 50 ms through its own connection (5 s busy timeout, as ADK's)."""
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


def run_import(seed: Path, source: Path, work: Path, events: int, staged: bool) -> str:
    """Import `source` (one big session) into a copy of `seed` while the agent writes: one table row."""
    from veadk_mem.sessions.big_writes import BigWrites
    from veadk_mem.sessions.importer import import_file
    from veadk_mem.sessions.store import SessionStore

    path = work / f"import-{'staged' if staged else 'one'}.db"
    shutil.copy(seed, path)
    latencies: list[float] = []
    errors: list[str] = []
    stop = threading.Event()
    original = BigWrites._write_big_staged

    async def one_transaction(self: BigWrites, big: object, *, force: bool, staging: list[str]) -> object:
        return await self._write_big(big, force=force)  # type: ignore[arg-type]

    BigWrites._write_big_staged = original if staged else one_transaction  # type: ignore[method-assign,assignment]
    thread = threading.Thread(target=write_every_50ms, args=(path, latencies, errors, stop))
    load = os.getloadavg()[0]
    try:
        thread.start()
        t0 = time.perf_counter()
        asyncio.run(import_file(SessionStore(f"sqlite+aiosqlite:///{path}"), source))
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        thread.join()
        BigWrites._write_big_staged = original  # type: ignore[method-assign]
    load = max(load, os.getloadavg()[0])
    latencies.sort()
    ms = (
        [latencies[int(q * (len(latencies) - 1))] * 1000 for q in (0.5, 0.99, 1.0)] if latencies else [float("nan")] * 3
    )
    return (
        f"| {'short transactions' if staged else 'one transaction'} | {wall:.1f} | {events / wall:,.0f} | "
        f"{len(latencies)} | {ms[0]:.0f} / {ms[1]:.0f} / {ms[2]:,.0f} | {len(errors)} | {load:.1f} |"
    )


def main_big(events: int, runs: int) -> None:
    """`--big N`: the import of one N-event session, in one transaction and in short ones, `runs` pairs."""
    import random

    work = Path(tempfile.mkdtemp(prefix="vmem-sqlite-writer-"))
    source, seed_file, seed = work / "big.jsonl", work / "seed.jsonl", work / "seed.db"
    start = time.time() - 3 * 86400
    source.write_text(
        scale._session_line(random.Random(22), scale.BIG_APP, scale.BIG_USER, scale.BIG_ID, events, start)
    )
    seed_file.write_text(scale._session_line(random.Random(1), "agent_app", "agent_user", "seed", 1, start))
    *_, code, err = scale.vmem(["session", "import", str(seed_file)], f"sqlite+aiosqlite:///{seed}")
    if code != 0:
        sys.exit(f"seed import failed: {err}")
    print(f"one session of {events:,} events, {source.stat().st_size / 1e6:,.0f} MB line")
    print("| import | wall s | events/s | agent writes | agent write p50 / p99 / max ms | agent errors | load |")
    print("|---|---|---|---|---|---|---|")
    for _ in range(runs):
        for staged in (False, True):
            print(run_import(seed, source, work, events, staged), flush=True)
    shutil.rmtree(work, ignore_errors=True)


def run(seed: Path, work: Path, batch: int, pause: bool) -> str:
    from veadk_mem.sessions import deletes, long_delete
    from veadk_mem.sessions.engine import sqlite_gap
    from veadk_mem.sessions.store import SessionFilter, SessionStore

    async def no_pause(dialect: str, held: float) -> None:
        return None

    deletes.sqlite_gap = long_delete.sqlite_gap = sqlite_gap if pause else no_pause
    path = work / f"run-{'pause' if pause else 'none'}.db"
    shutil.copy(seed, path)
    latencies: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def agent() -> None:
        write_every_50ms(path, latencies, errors, stop)

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
    parser.add_argument("--big", type=int, default=0, help="instead: import one session of this many events")
    opts = parser.parse_args()
    if opts.big:
        main_big(opts.big, opts.runs)
        return
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
