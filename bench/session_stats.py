"""`vmem session stats` on a large database, and `vmem session watch` delivery and its cost to the agent.

    .venv/bin/python bench/session_stats.py                          # PostgreSQL and sqlite, 1,000,000 events
    .venv/bin/python bench/session_stats.py --events 200000 --backends sqlite
    .venv/bin/python bench/session_stats.py --skip-watch             # stats only

Data (written once with vmem's import in ADK's v1 layout, kept between runs: PostgreSQL
database `vmem_bench_stats`, sqlite file in the temp directory): app `fleet` holding all
events but 100,000, app `one` holding 100,000; sessions of 50 events over 1,000 users; each
turn a user text, a model function call with usage_metadata, the tool's response and a model
answer with usage_metadata, plus a compaction every 25th event. PostgreSQL is analyzed after
the load. Stats figures are whole processes (`python -m veadk_mem session stats --json`,
interpreter start included, vmem's bytecode compiled first as a pip install does), median of 3
(`--runs`) after one warm-up, with the median CPU time (user + sys) of the vmem process and the
load average beside the wall time: the machine is shared, and the database's own time is not in
that CPU figure.

Watch (PostgreSQL, on the same database): a watcher process polling once a second
(`--interval 1 --max-interval 1`) follows a session while ADK's DatabaseSessionService
appends 40 events at irregular gaps; delivery latency is the time from append_event's
return to the line arriving on the watcher's stdout. Then ADK's append latency, 100 appends,
with no watcher and with five watchers following the same session.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DB = "vmem_bench_stats"
PG_URL = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{PG_DB}"
PER_SESSION = 50
ONE_APP_EVENTS = 100_000
TEXT = "The quick brown fox jumps over the lazy dog. " * 3


def _session(app: str, n: int, sid: str, user: str, start: float) -> Any:
    from veadk_mem import events as ev

    usage = {
        "prompt_token_count": 900,
        "candidates_token_count": 60,
        "thoughts_token_count": 12,
        "total_token_count": 972,
    }
    events = []
    for i in range(n):
        ts = start + i * 7
        kind = i % 4
        extra: dict[str, Any] = {}
        if i % 25 == 24:
            compaction = {
                "start_timestamp": start,
                "end_timestamp": ts - 1,
                "compacted_content": {"role": "model", "parts": [{"text": "summary " + TEXT}]},
            }
            data = {"author": "user", "actions": {"compaction": compaction}}
        elif kind == 0:
            data = {"author": "user", "content": {"role": "user", "parts": [{"text": f"{i}: {TEXT}"}]}}
        elif kind == 1:
            call = {"id": f"c{i}", "name": "lookup", "args": {"q": "weather", "n": i}}
            data = {"author": "agent", "content": {"role": "model", "parts": [{"function_call": call}]}}
            extra = {"usage_metadata": usage}
        elif kind == 2:
            resp = {"id": f"c{i - 1}", "name": "lookup", "response": {"result": TEXT}}
            data = {"author": "agent", "content": {"role": "user", "parts": [{"function_response": resp}]}}
        else:
            data = {"author": "agent", "content": {"role": "model", "parts": [{"text": f"answer {i}: {TEXT}"}]}}
            extra = {"usage_metadata": usage}
        events.append(
            ev.Event.model_validate(
                {"id": f"{sid}-{i}", "invocation_id": f"i{i // 4}", "timestamp": ts, **data, **extra}
            )
        )
    return ev.Session(
        id=sid, app_name=app, user_id=user, state={"n": n}, events=events, last_update_time=events[-1].timestamp
    )


def _sessions(total: int) -> Any:
    start = time.time() - 400 * 86400  # spread over 400 days: every age bucket holds some
    fleet = total - ONE_APP_EVENTS
    count = 0
    for app, events in (("fleet", fleet), ("one", ONE_APP_EVENTS)):
        n_sessions = events // PER_SESSION
        for i in range(n_sessions):
            yield _session(app, PER_SESSION, f"{app}-{i:06d}", f"u{i % 1000:04d}", start + i * 400 * 86400 / n_sessions)
            count += PER_SESSION


async def _count(url: str) -> int:
    from veadk_mem.sessions.store import SessionStore

    try:
        async with SessionStore(url) as store:
            stats = await _events_total(store)
            return stats
    except Exception:
        return -1


async def _events_total(store: Any) -> int:
    from sqlalchemy import func, select

    e = store.db.tables.events
    stmt = select(func.count()).select_from(e).where(e.c.app_name.in_(["fleet", "one"]))  # not the watch's
    async with store.db.reader.connect() as conn:
        return int((await conn.execute(stmt)).scalar_one())


async def build(url: str, total: int) -> None:
    """Load the database unless it already holds `total` events."""
    from veadk_mem.sessions.store import SessionStore

    if await _count(url) == total:
        print(f"  {url}: {total:,} events already there", file=sys.stderr)
        return
    started = time.perf_counter()
    async with SessionStore(url, create=True) as store:
        report = await store.import_records(_sessions(total))
    print(f"  loaded {report.events:,} events in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if url.startswith("postgresql"):
        import asyncpg

        conn = await asyncpg.connect(url.replace("+asyncpg", ""))
        try:
            await conn.execute("VACUUM ANALYZE")
        finally:
            await conn.close()


async def _pg_database(fresh: bool) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN)
    try:
        if fresh:
            await conn.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", PG_DB):
            await conn.execute(f'CREATE DATABASE "{PG_DB}"')
    finally:
        await conn.close()


def _vmem(*args: str) -> tuple[float, float, str]:
    """Run vmem; its wall time, its CPU time (user + sys of the process, not the database's) and stdout."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "veadk_mem", *args], capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(f"vmem {' '.join(args)}: exit {out.returncode}: {out.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, out.stdout


def time_stats(url: str, runs: int) -> list[tuple[str, float, float, str]]:
    """Per command: median wall seconds, median CPU seconds of the vmem process, load average over the runs."""
    rows = []
    for label, extra in (
        ("session stats (everything)", []),
        ("session stats --by day --top 10", ["--by", "day", "--top", "10"]),
        (f"session stats --app one ({ONE_APP_EVENTS:,} events)", ["--app", "one"]),
    ):
        args = ["session", "stats", "--db-url", url, "--json", *extra]
        _vmem(*args)
        loads = [os.getloadavg()[0]]
        timed = [_vmem(*args) for _ in range(runs)]
        loads.append(os.getloadavg()[0])
        wall = statistics.median(t[0] for t in timed)
        cpu = statistics.median(t[1] for t in timed)
        rows.append((label, wall, cpu, f"{min(loads):.1f}-{max(loads):.1f}"))
    return rows


class _Watcher:
    """A `session watch --json` process; the arrival time of each event id on its stdout."""

    def __init__(self, url: str, sid: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "veadk_mem", "session", "watch", "live", "ops", sid, "--db-url", url]
        cmd += ["--json", "--events", "0", "--interval", "1", "--max-interval", "1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.arrived: dict[str, float] = {}
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._errors, daemon=True).start()

    def _read(self) -> None:
        import json

        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.arrived[json.loads(line)["id"]] = time.perf_counter()

    def _errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if "following session" in line:
                self.ready.set()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


async def time_watch(url: str) -> list[tuple[str, str]]:
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    service = DatabaseSessionService(url)
    rows: list[tuple[str, str]] = []
    try:
        sid = f"live-{int(time.time())}"
        session = await service.create_session(app_name="live", user_id="ops", session_id=sid)

        async def append(n: int, gap: tuple[float, float]) -> list[tuple[str, float, float]]:
            done = []
            for i in range(n):
                event = Event(
                    author="agent",
                    invocation_id=f"i{i}",
                    content=types.Content(role="model", parts=[types.Part(text=f"{i}: {TEXT}")]),
                )
                started = time.perf_counter()
                await service.append_event(session, event)
                finished = time.perf_counter()
                done.append((event.id, started, finished))
                await asyncio.sleep(random.uniform(*gap))
            return done

        one = _Watcher(url, sid)
        one.ready.wait(60)
        appended = await append(40, (0.2, 1.3))
        await asyncio.sleep(2.5)
        one.stop()
        latencies = sorted(one.arrived[i] - f for i, _, f in appended if i in one.arrived)
        missing = len(appended) - len(latencies)
        rows.append(
            (
                "watch delivery, append to printed (1 poll/s, 40 events)",
                f"median {statistics.median(latencies) * 1000:.0f} ms, p99 {_p99(latencies) * 1000:.0f} ms"
                + (f", {missing} missing" if missing else ""),
            )
        )
        for watchers in (0, 5):
            procs = [_Watcher(url, sid) for _ in range(watchers)]
            for p in procs:
                p.ready.wait(60)
            done = await append(100, (0.0, 0.05))
            for p in procs:
                p.stop()
            took = sorted(f - s for _, s, f in done)
            rows.append(
                (
                    f"ADK append_event with {watchers} watchers (100 appends)",
                    f"median {statistics.median(took) * 1000:.1f} ms, p99 {_p99(took) * 1000:.1f} ms",
                )
            )
    finally:
        await service.delete_session(app_name="live", user_id="ops", session_id=sid)
        await service.close()
    return rows


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the database (default 1,000,000)")
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--fresh", action="store_true", help="rebuild the databases even when they hold --events")
    parser.add_argument("--skip-watch", action="store_true")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure, after one warm-up (median)")
    args = parser.parse_args()
    from as_installed import compile_vmem

    compile_vmem()  # vmem's bytecode, as a pip install leaves it (this machine sets PYTHONDONTWRITEBYTECODE)
    for backend in args.backends.split(","):
        if backend == "postgresql":
            asyncio.run(_pg_database(args.fresh))
            url = PG_URL
        else:
            path = Path(tempfile.gettempdir()) / f"vmem_bench_stats_{args.events}.db"
            if args.fresh:
                path.unlink(missing_ok=True)
            url = f"sqlite+aiosqlite:///{path}"
        print(f"## {backend}: {args.events:,} events", file=sys.stderr)
        asyncio.run(build(url, args.events))
        print(f"\n### {backend}, {args.events:,} events\n")
        print("| what | wall s (whole process) | CPU s (vmem process) | load average |\n|---|---|---|---|")
        for label, wall, cpu, load in time_stats(url, args.runs):
            print(f"| {label} | {wall:.2f} | {cpu:.2f} | {load} |")
        if backend == "postgresql" and not args.skip_watch:
            print("\n| watch | figure |\n|---|---|")
            for label, figure in asyncio.run(time_watch(url)):
                print(f"| {label} | {figure} |")


if __name__ == "__main__":
    main()
