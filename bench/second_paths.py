"""Every second (speed-only) path of the session store, measured end to end: the whole `vmem` command.

Issue 39 item 3: a path whose end-to-end gain is under 1.3x is deleted, the rest stay behind
`[tuning] fast_paths` (env VMEM_FAST_PATHS). The eleven second paths the issue named, and where
each stands (the deleted ones' figures are in docs/BENCHMARKS.md and their commits):

1. `import_child.ReaderProcess`: an import's write pass read in a child process (deleted).
2. `driver.InsertPlan`: rows inserted on the raw driver instead of SQLAlchemy's insert (deleted).
3. `rawsession.raw_session` (`checks.check_record`): a record validated without pydantic. Kept,
   the one path behind the switch: measured here.
4. `timecols.naive_utc_many`/`sqlite_text_many`: a batch of times through numpy (deleted).
5. `gc_pause.bulk_objects`/`collect_young`: the cyclic collector paused (deleted).
6. `driver.DriverPlan`: small selects in one driver call (deleted).
7. `driver.skip_idle_rollback`: sqlite's pool rolled back only a connection in a transaction (deleted).
8. MySQL packed rows (`select_packed`): an event's key columns as one text (deleted).
9. MySQL length-framed GROUP_CONCAT (`select_joined`): a session a row (deleted).
10. `codec.camel_event`: gone with item 0 (output exact to ADK goes through pydantic).
11. `statements.raw_json`/`raw_time`/`session_time`: JSON and time columns selected as text and
    decoded by vmem (kept unswitched: they are part of the query, not a second implementation).

Each row is one `vmem` command run as a subprocess (CPU seconds of the child: user + system,
from `resource.getrusage(RUSAGE_CHILDREN)`, median of 3) with the fast paths on and off, in one
run, for the commands a kept path is on. The database is built once with vmem's own import.

Run: `.venv/bin/python bench/second_paths.py [--events 20000] [--db sqlite|mysql]`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TEXT = "The quick brown fox jumps over the lazy dog. " * 3


def _event(prefix: str, i: int, start: float) -> dict[str, Any]:
    """One event in ADK's camelCase JSON: a rotation of user text, tool call, tool response, answer."""
    kind = i % 4
    base: dict[str, Any] = {
        "id": f"{prefix}-{i:06d}",
        "invocationId": f"inv-{i // 4}",
        "timestamp": start + i + 0.123456,
        "actions": {"stateDelta": {"turn": i} if i % 5 == 0 else {}, "artifactDelta": {}},
    }
    if kind == 0:
        base |= {"author": "user", "content": {"role": "user", "parts": [{"text": f"{i}: {TEXT}"}]}}
    elif kind == 1:
        call = {"id": f"call-{i}", "name": "get_weather", "args": {"city": "Hangzhou", "days": 3}}
        base |= {
            "author": "agent",
            "content": {"role": "model", "parts": [{"functionCall": call}]},
            "usageMetadata": {"promptTokenCount": 812, "candidatesTokenCount": 24, "totalTokenCount": 836},
        }
    elif kind == 2:
        response = {"id": f"call-{i - 1}", "name": "get_weather", "response": {"result": "sunny, 21 C"}}
        base |= {"author": "agent", "content": {"role": "user", "parts": [{"functionResponse": response}]}}
    else:
        base |= {
            "author": "agent",
            "content": {"role": "model", "parts": [{"text": f"answer {i}: {TEXT}"}]},
            "usageMetadata": {"promptTokenCount": 903, "candidatesTokenCount": 61, "totalTokenCount": 964},
        }
    return base


def write_file(path: Path, sessions: int, events_per_session: int) -> int:
    """A JSONL import file of `sessions` sessions; returns the number of events."""
    from veadk_mem.jsonio import dumps

    start = 1_790_000_000.0
    with path.open("w", encoding="utf-8") as handle:
        for s in range(sessions):
            sid = f"s{s:06d}"
            events = [_event(sid, i, start + s * 60) for i in range(events_per_session)]
            session = {
                "id": sid,
                "appName": "bench",
                "userId": f"u{s % 100:03d}",
                "state": {"topic": sid, "app:tier": "gold"},
                "events": events,
                "lastUpdateTime": events[-1]["timestamp"],
            }
            handle.write(dumps(session, compact=True) + "\n")
    return sessions * events_per_session


# the commands each kept path is on: the ratio off/on is what the switch earns there
USES = {"import": ["raw_session"]}


def vmem(args: list[str], fast: bool, stdin: Path | None = None) -> float:
    """CPU seconds (user + system) of one `vmem` subprocess; fails loudly on a non-zero exit."""
    env = {**os.environ, "VMEM_FAST_PATHS": "1" if fast else "0"}
    code = "import sys; from veadk_mem.cli.app import main; sys.argv = ['vmem', *sys.argv[1:]]; main()"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(stdin or os.devnull, "rb") as inp:
        done = subprocess.run(
            [sys.executable, "-c", code, *args], env=env, stdin=inp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"vmem {' '.join(args)} (fast={fast}): exit {done.returncode}: {done.stderr[-500:]!r}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_cpu(make: Any, runs: int = 3) -> float:
    """Median CPU seconds of `runs` runs of `make()` (which returns one run's CPU seconds)."""
    return statistics.median(make() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events in the database (1,000,000 in the issue)")
    parser.add_argument("--per-session", type=int, default=200, help="events a session")
    parser.add_argument("--db", choices=("sqlite", "mysql", "postgresql"), default="sqlite")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f}, events: {args.events:,}, db: {args.db}")
    work = Path(tempfile.mkdtemp(prefix="vmem-second-"))
    try:
        jsonl = work / "in.jsonl"
        n = write_file(jsonl, max(1, args.events // args.per_session), args.per_session)
        sessions = n // args.per_session

        def fresh_url(name: str) -> str:
            if args.db == "sqlite":
                target = work / f"{name}.db"
                target.unlink(missing_ok=True)
                return str(target)
            server = {
                "mysql": "mysql+aiomysql://root@127.0.0.1:3306",
                "postgresql": "postgresql+asyncpg://127.0.0.1:5432",
            }
            db = f"vmem_second_paths_{os.getpid()}_{name}"
            drop, create = f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}"
            if args.db == "mysql":
                import pymysql

                conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
                with conn.cursor() as cursor:
                    cursor.execute(drop)
                    cursor.execute(create)
                conn.close()
            else:  # the async driver is the only PostgreSQL one vmem installs
                import asyncio

                import asyncpg

                async def admin() -> None:
                    conn = await asyncpg.connect(host="127.0.0.1", port=5432, database="test")
                    await conn.execute(drop)
                    await conn.execute(create)
                    await conn.close()

                asyncio.run(admin())
            return f"{server[args.db]}/{db}"

        rows: list[tuple[str, str, float, float]] = []

        def measure(command: str, argv: Any, setup: Any = None) -> None:
            def one(fast: bool) -> float:
                if setup is not None:
                    setup()
                return vmem(argv(), fast)

            on = median_cpu(lambda: one(True), args.runs)
            off = median_cpu(lambda: one(False), args.runs)
            rows.append((command, ", ".join(USES[command]), on, off))

        target = {"url": ""}

        def new_target() -> None:
            target["url"] = fresh_url("target")

        measure("import", lambda: ["session", "import", str(jsonl), "--db-url", target["url"], "-q"], new_target)

        print(
            f"\n{n:,} events in {sessions:,} sessions, {args.db}; "
            f"CPU seconds of the vmem process, median of {args.runs}\n"
        )
        print("| command | paths switched | fast on (s) | off (s) | gain (off/on) |")
        print("| --- | --- | ---: | ---: | ---: |")
        for command, path, on, off in rows:
            print(f"| {command} | {path} | {on:.2f} | {off:.2f} | {off / on:.2f}x |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
