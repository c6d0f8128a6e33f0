"""vmem's session store side by side with google-adk's DatabaseSessionService, same database, one run.

    .venv/bin/python bench/sessions.py                      # sqlite, and PostgreSQL when reachable
    .venv/bin/python bench/sessions.py --backends sqlite --quick

Data (written with vmem's import, in ADK's v1 layout: ADK's append_event is far too slow at
this size): app `bench` with 2,000 sessions x 20 events over 100 users, one 20,000-event
session, and app `big` with 10,000 sessions x 2 events. Prints a Markdown table per backend.
In-process figures are medians of 5 samples after three warm-up calls (ADK's first call also
checks its tables and indexes), each sample the mean of a loop of calls lasting about 0.25 s;
PostgreSQL's tables are analyzed once after the load. Peak RSS of a get is measured in a
fresh process. The whole-process rows also time importing the stack DESIGN.md prescribes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

APP, BIG, HEAVY_USER, HEAVY_ID = "bench", "big", "heavy", "long"
TEXT = "The quick brown fox jumps over the lazy dog. " * 3


def _events(prefix: str, n: int, start: float) -> list[Any]:
    from veadk_mem import events as ev

    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "model"
        out.append(
            ev.Event(
                id=f"{prefix}-{i:06d}",
                invocation_id=f"inv-{i // 2}",
                author="user" if role == "user" else "agent",
                timestamp=start + i,
                content=ev.Content(role=role, parts=[ev.Part(text=f"{i}: {TEXT}")]),
                actions=ev.EventActions(state_delta={"turn": i} if i % 5 == 0 else {}),
            )
        )
    return out


def _sessions(quick: bool) -> Any:
    from veadk_mem import events as ev

    n_sessions, n_big, heavy = SIZES["sessions"], SIZES["big"], SIZES["heavy"]
    start = 1_790_000_000.0
    for i in range(n_sessions):
        sid = f"s{i:05d}"
        events = _events(sid, 20, start + i * 30)
        yield ev.Session(
            id=sid,
            app_name=APP,
            user_id=f"u{i % 100:03d}",
            state={"topic": sid, "app:tier": "gold", "user:lang": "zh"},
            events=events,
            last_update_time=events[-1].timestamp,
        )
    events = _events(HEAVY_ID, heavy, start)
    yield ev.Session(
        id=HEAVY_ID, app_name=APP, user_id=HEAVY_USER, state={}, events=events, last_update_time=events[-1].timestamp
    )
    for i in range(n_big):
        sid = f"b{i:05d}"
        events = _events(sid, 2, start + i)
        yield ev.Session(
            id=sid,
            app_name=BIG,
            user_id=f"u{i % 100:03d}",
            state={"n": i},
            events=events,
            last_update_time=start + i + 1,
        )


async def populate(url: str, quick: bool) -> tuple[float, int]:
    from veadk_mem.sessions.store import SessionStore

    started = time.perf_counter()
    async with SessionStore(url, create=True) as store:
        report = await store.import_records(_sessions(quick))
    elapsed = time.perf_counter() - started
    if url.startswith("postgresql"):
        # What autovacuum does to a settled database; left to chance right after the bulk load,
        # it changed the plans (stale row estimates, heap fetches) and swung figures 2x between runs.
        import asyncpg

        conn = await asyncpg.connect(url.replace("+asyncpg", ""))
        try:
            await conn.execute("VACUUM ANALYZE")
        finally:
            await conn.close()
    return elapsed, report.events


async def _median(fn: Callable[[], Awaitable[Any]], runs: int) -> float:
    """Median seconds per call over `runs` samples, after a warm-up.

    A sample is a loop of enough calls to last about 0.25 s (at most 200), and its time per
    call is the mean: a single sub-millisecond call is mostly timer noise, and a periodic
    cost is part of the price. ADK's list of 2,001 sessions alternates 57 and 130 ms, as a
    full garbage collection runs on every other call; a median of single calls picked
    either, at random.
    """
    for _ in range(3):  # warm-up: statement caches, buffers
        t0 = time.perf_counter()
        await fn()
        single = time.perf_counter() - t0
    calls = max(1, min(200, round(0.25 / max(single, 1e-6))))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            await fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


SIZES = {"sessions": 2000, "big": 10_000, "heavy": 20_000}


async def in_process(url: str, runs: int) -> list[tuple[str, float, float]]:
    """(measure, adk seconds, vmem seconds) for the in-process comparisons."""
    from google.adk.sessions import DatabaseSessionService

    from veadk_mem.sessions.store import SessionFilter, SessionStore

    rows = []
    adk = DatabaseSessionService(url)
    async with SessionStore(url) as store:
        cases: list[tuple[str, Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = [
            (
                "list one user's sessions (20)",
                lambda: adk.list_sessions(app_name=APP, user_id="u007"),
                lambda: store.list_sessions(SessionFilter(app=APP, user="u007")),
            ),
            (
                f"list app '{APP}' ({SIZES['sessions'] + 1:,} sessions)",
                lambda: adk.list_sessions(app_name=APP),
                lambda: store.list_sessions(SessionFilter(app=APP)),
            ),
            (
                f"list app '{BIG}' ({SIZES['big']:,} sessions)",
                lambda: adk.list_sessions(app_name=BIG),
                lambda: store.list_sessions(SessionFilter(app=BIG)),
            ),
            (
                "get a 20-event session",
                lambda: adk.get_session(app_name=APP, user_id="u007", session_id="s00007"),
                lambda: store.get_session(APP, "u007", "s00007"),
            ),
        ]
        for name, adk_fn, vmem_fn in cases:
            rows.append((name, await _median(adk_fn, runs), await _median(vmem_fn, runs)))
    await adk.close()
    return rows


async def export_rates(url: str) -> tuple[float, float, int, float, int]:
    """ADK (list + get of every session of app bench) vs vmem export of the same, then of everything."""
    from google.adk.sessions import DatabaseSessionService

    from veadk_mem.sessions.store import SessionFilter, SessionStore

    adk = DatabaseSessionService(url)
    await adk.list_sessions(app_name=APP, user_id="none")
    t0 = time.perf_counter()
    n_adk = 0
    with open(os.devnull, "w") as sink:
        listed = await adk.list_sessions(app_name=APP)
        for s in listed.sessions:
            full = await adk.get_session(app_name=APP, user_id=s.user_id, session_id=s.id)
            assert full is not None
            sink.write(full.model_dump_json(by_alias=True, exclude_none=True) + "\n")
            n_adk += len(full.events)
    adk_rate = n_adk / (time.perf_counter() - t0)
    await adk.close()
    async with SessionStore(url) as store:
        n_app = await _count_events(store, APP)
        t0 = time.perf_counter()
        with open(os.devnull, "w") as sink:
            async for piece in store.export_jsonl(SessionFilter(app=APP)):
                sink.write(piece)
        vmem_rate = n_app / (time.perf_counter() - t0)
        n_all = await _count_events(store, None)
        t0 = time.perf_counter()
        with open(os.devnull, "w") as sink:
            async for piece in store.export_jsonl():
                sink.write(piece)
        all_rate = n_all / (time.perf_counter() - t0)
    return adk_rate, vmem_rate, n_app, all_rate, n_all


async def _count_events(store: Any, app: str | None) -> int:
    from sqlalchemy import func, select

    e = store.db.tables.events
    stmt = select(func.count()).select_from(e)
    if app:
        stmt = stmt.where(e.c.app_name == app)
    async with store.db.engine.connect() as conn:
        return int((await conn.execute(stmt)).scalar_one())


# --- one measurement per fresh process: peak RSS ----------------------------------------------


async def _measure_get(kind: str, url: str) -> dict[str, float]:
    from veadk_mem.sessions.store import SessionStore

    def rss_mb() -> float:
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the (large) parent
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    if kind == "adk":
        from google.adk.sessions import DatabaseSessionService

        adk = DatabaseSessionService(url)
        await adk.get_session(app_name=APP, user_id="u007", session_id="s00007")
        base = rss_mb()
        t0 = time.perf_counter()
        got = await adk.get_session(app_name=APP, user_id=HEAVY_USER, session_id=HEAVY_ID)
        seconds = time.perf_counter() - t0
        assert got is not None
        await adk.close()
    else:
        async with SessionStore(url) as store:
            await store.get_session(APP, "u007", "s00007")
            [p async for p in store.session_json(APP, "u007", "s00007")]
            base = rss_mb()
            t0 = time.perf_counter()
            if kind == "vmem":
                full = await store.get_session(APP, HEAVY_USER, HEAVY_ID)
                assert full.events
            else:
                with open(os.devnull, "w") as sink:
                    async for piece in store.session_json(APP, HEAVY_USER, HEAVY_ID):
                        sink.write(piece)
            seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_mb": rss_mb() - base}


def measure_get(kind: str, url: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure-get", kind, "--url", url], capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


# --- whole processes: `vmem session list` vs a script through ADK ------------------------------

ADK_SCRIPT = """
import asyncio, json, sys
from google.adk.sessions import DatabaseSessionService
async def main():
    svc = DatabaseSessionService(sys.argv[1])
    res = await svc.list_sessions(app_name=sys.argv[2], user_id=sys.argv[3])
    print(json.dumps([s.model_dump(mode="json", by_alias=True, exclude={"events"}) for s in res.sessions]))
    await svc.close()
asyncio.run(main())
"""


# The stack DESIGN.md prescribes for `vmem session list`, imported and nothing else: a floor
# no design-conformant vmem can go under, printed beside the ADK script to show the 4x budget.
FLOOR = "import typer, pydantic, sqlalchemy.ext.asyncio, aiosqlite"


def whole_process(url: str, runs: int) -> tuple[float, float, float]:
    from as_installed import compile_vmem

    compile_vmem()  # as a pip install leaves it; google-adk's bytecode is compiled too
    vmem = str(Path(sys.executable).parent / "vmem")
    env = {**os.environ, "NO_COLOR": "1"}

    def timed(cmd: list[str]) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    adk = timed([sys.executable, "-c", ADK_SCRIPT, url, APP, "u007"])
    ours = timed([vmem, "session", "list", "--app", APP, "--user", "u007", "--json", "--db-url", url])
    floor = timed([sys.executable, "-c", FLOOR])
    return adk, ours, floor


# --- driver ---------------------------------------------------------------------------------


def _pg_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(host="127.0.0.1", port=5432, user="postgres", database="postgres")
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def import_rates(url: str, fresh_url: str) -> tuple[float, float, int]:
    """(ADK append_event events/s on 1,000 events, vmem import_file events/s, events) on `fresh_url`.

    vmem's side is the whole `vmem session import FILE` path: an export of `url` read twice
    (every line checked against the target's limits, keys checked), then written in batches.
    """
    from google.adk.sessions import DatabaseSessionService

    from veadk_mem.sessions.importer import import_file
    from veadk_mem.sessions.store import SessionStore

    workdir = Path(tempfile.mkdtemp(prefix="vmem-bench-import-"))
    try:
        dump = workdir / "export.jsonl"
        async with SessionStore(url) as store:
            with dump.open("w", encoding="utf-8") as handle:
                async for piece in store.export_jsonl():
                    handle.write(piece)
        t0 = time.perf_counter()
        report = await import_file(SessionStore(fresh_url, create=True), dump)
        vmem_rate = report.events / (time.perf_counter() - t0)
        service = DatabaseSessionService(fresh_url)
        try:
            t0 = time.perf_counter()
            for i in range(50):
                session = await service.create_session(app_name="adk_ref", user_id="u", session_id=f"r{i}")
                for event in _events(f"r{i}", 20, 1_790_000_000.0 + i * 30):
                    from google.adk.events import Event

                    await service.append_event(session, Event.model_validate(event.model_dump()))
            adk_rate = 1000 / (time.perf_counter() - t0)
        finally:
            await service.close()
        return adk_rate, vmem_rate, report.events
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def print_import(url: str, fresh_url: str) -> None:
    adk_rate, vmem_rate, n = asyncio.run(import_rates(url, fresh_url))
    print(
        f"| `vmem session import` of an export ({n:,} events; ADK: create_session + append_event) | "
        f"{adk_rate:,.0f} events/s | {vmem_rate:,.0f} events/s | {vmem_rate / adk_rate:,.1f}x |"
    )


def run_backend(name: str, url: str, quick: bool, runs: int, fresh_url: str = "", only_import: bool = False) -> None:
    fill_s, n_events = asyncio.run(populate(url, quick))
    print(f"\n### {name}\n")
    rate = n_events / fill_s
    print(f"populated {n_events:,} events with vmem's import_records in {fill_s:.1f} s ({rate:,.0f} events/s)\n")
    if only_import:
        print("| measure | ADK DatabaseSessionService | vmem | speed-up |")
        print("|---|---:|---:|---:|")
        print_import(url, fresh_url)
        return
    print("| measure | ADK DatabaseSessionService | vmem | speed-up |")
    print("|---|---:|---:|---:|")
    for measure, adk_s, vmem_s in asyncio.run(in_process(url, runs)):
        print(f"| {measure} | {adk_s * 1000:,.1f} ms | {vmem_s * 1000:,.1f} ms | {adk_s / vmem_s:,.1f}x |")
    adk_get = measure_get("adk", url)
    vmem_get = measure_get("vmem", url)
    stream_get = measure_get("stream", url)
    print(
        f"| get the {SIZES['heavy']:,}-event session: time | {adk_get['seconds'] * 1000:,.0f} ms | "
        f"{vmem_get['seconds'] * 1000:,.0f} ms (Session model) / "
        f"{stream_get['seconds'] * 1000:,.0f} ms (streamed JSON) | "
        f"{adk_get['seconds'] / vmem_get['seconds']:,.1f}x / {adk_get['seconds'] / stream_get['seconds']:,.1f}x |"
    )
    print(
        f"| get the {SIZES['heavy']:,}-event session: peak RSS growth | +{adk_get['rss_mb']:,.0f} MB | "
        f"+{vmem_get['rss_mb']:,.0f} MB (Session model) / "
        f"+{stream_get['rss_mb']:,.0f} MB (streamed, as the CLI does) | |"
    )
    adk_rate, vmem_rate, n_app, all_rate, n_all = asyncio.run(export_rates(url))
    print(
        f"| export app '{APP}' ({n_app:,} events; ADK: list + get each) | {adk_rate:,.0f} events/s | "
        f"{vmem_rate:,.0f} events/s | {vmem_rate / adk_rate:,.1f}x |"
    )
    print(f"| export everything ({n_all:,} events) | | {all_rate:,.0f} events/s | |")
    if fresh_url:
        print_import(url, fresh_url)
    adk_proc, vmem_proc, floor = whole_process(url, 5)
    print(
        f"| whole process: list one user's sessions (`vmem session list` vs a script through ADK) | "
        f"{adk_proc * 1000:,.0f} ms | {vmem_proc * 1000:,.0f} ms | {adk_proc / vmem_proc:,.1f}x |"
    )
    print(
        f"| whole process: `python -c '{FLOOR}'` (the prescribed stack, no work) | "
        f"{adk_proc * 1000:,.0f} ms | {floor * 1000:,.0f} ms | {adk_proc / floor:,.1f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres", help="comma list: sqlite, postgres")
    parser.add_argument("--quick", action="store_true", help="a tenth of the data, for a smoke run")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per in-process measure")
    parser.add_argument("--only-import", action="store_true", help="only the import rates (issue 9's figure)")
    parser.add_argument("--measure-get", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        SIZES.update(sessions=200, big=1000, heavy=2000)
    if args.measure_get:
        print(json.dumps(asyncio.run(_measure_get(args.measure_get, args.url))))
        return
    import google.adk

    print(f"python {sys.version.split()[0]}, google-adk {google.adk.__version__}, {os.cpu_count()} CPUs")
    for backend in args.backends.split(","):
        if backend == "sqlite":
            workdir = Path(tempfile.mkdtemp(prefix="vmem-bench-"))
            try:
                run_backend(
                    "sqlite",
                    f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
                    args.quick,
                    args.runs,
                    f"sqlite+aiosqlite:///{workdir / 'fresh.db'}",
                    args.only_import,
                )
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        elif backend == "postgres":
            if not _pg_reachable():
                print("\n### PostgreSQL: not reachable at 127.0.0.1:5432, skipped")
                continue
            name = f"vmem_bench_{uuid.uuid4().hex[:8]}"
            asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
            asyncio.run(_pg_admin(f'CREATE DATABASE "{name}_fresh"'))
            base = "postgresql+asyncpg://postgres@127.0.0.1:5432/"
            try:
                run_backend("PostgreSQL", base + name, args.quick, args.runs, base + name + "_fresh", args.only_import)
            finally:
                asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}_fresh" WITH (FORCE)'))


if __name__ == "__main__":
    main()
