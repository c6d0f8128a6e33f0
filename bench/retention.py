"""Retention on a large session database while an ADK agent writes (issue #43, Measure).

    .venv/bin/python bench/retention.py                                   # 100,000 events, sqlite + PostgreSQL
    .venv/bin/python bench/retention.py --events 1000000 --backends postgresql,mysql,sqlite
    .venv/bin/python bench/retention.py --list-sessions 50000 --only list   # the 50,000-session list only

Builds bench/sessions_scale.py's export file (sessions of 4 to 36 events over 5 apps, one big
session, `--old` sessions untouched for 400 days), imports it into a database per backend and
copies that database, so that `session prune --dry-run` and `session prune` (rule: `max_age =
"365d"`) run on one copy and `session delete --older-than 365d` on the other: the same
sessions. Each is its own vmem process; its CPU (user+sys) is printed beside delete's, with
the append latency (p50 / p99 / max) and errors of google-adk's `DatabaseSessionService`
appending every 50 ms meanwhile (bench/sessions_scale.py's Agent). Then a prune with
`keep_last_events = 200` (trimming the big session), `session vacuum` and the bytes it
returned, and ADK's own `list_sessions` and `get_session` (CPU of the call in a process of
its own) before and after `vmem session index --create` on the database without ADK's events
index (dropped first, as ADK 1.x made databases; the measuring ADK 2.13 is kept from building
it at start-up). `--list-sessions N`: ADK's list_sessions of one app holding N sessions,
without ADK's events index, with it, and with an index on the sessions' sort order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import sessions_scale as scale  # noqa: E402

ADK_INDEX = "idx_events_app_user_session_ts_id"

ADK_CALL = """
import asyncio, sys, time
from google.adk.sessions import DatabaseSessionService
async def main():
    svc = DatabaseSessionService(sys.argv[1])
    svc._db_schema_version = "1"  # as ADK 1.x: no index built at start-up (the bench measures without it)
    svc._tables_created = True
    await svc.list_sessions(app_name="warm-up", user_id="nobody")
    best = (float("inf"), float("inf"))
    for _ in range(int(sys.argv[3])):
        c0, t0 = time.process_time(), time.perf_counter()
        if sys.argv[2] == "list":
            await svc.list_sessions(app_name=sys.argv[4])
        else:
            await svc.get_session(app_name=sys.argv[4], user_id=sys.argv[5], session_id=sys.argv[6])
        best = min(best, (time.process_time() - c0, time.perf_counter() - t0))
    print(*best)
    await svc.close()
asyncio.run(main())
"""


def adk_cpu(url: str, what: str, *args: str, runs: int = 2) -> tuple[float, float]:
    """(CPU s, wall s) of ADK's own list_sessions / get_session, the best of `runs`, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", ADK_CALL, url, what, str(runs), *args], capture_output=True, text=True, timeout=3600
    )
    if out.returncode != 0:
        print(f"    ADK {what} failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)
        return float("nan"), float("nan")
    cpu, wall = out.stdout.split()
    return float(cpu), float(wall)


def sql(url: str, statement: str) -> Any:
    """One statement on the bench's database, committed; the first value of its first row, if any."""
    if url.startswith("postgresql"):
        import asyncpg

        async def go() -> Any:
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
            try:
                return await conn.fetchval(statement)
            finally:
                await conn.close()

        return asyncio.run(go())
    if url.startswith("mysql"):
        name = url.rsplit("/", 1)[1].split("?")[0]
        return scale._mysql_admin(statement.replace("{db}", name))
    import sqlite3

    conn = sqlite3.connect(url.split("///", 1)[1])
    try:
        row = conn.execute(statement).fetchone()
        conn.commit()
        return row[0] if row else None
    finally:
        conn.close()


def drop_adk_index(url: str) -> None:
    if url.startswith("mysql"):  # InnoDB keeps the foreign key's index: ADK's tables have one there
        return
    sql(url, f"DROP INDEX IF EXISTS {ADK_INDEX}")


class Run:
    """One backend's rows: each vmem command with its CPU and the agent's latency meanwhile."""

    def __init__(self, agent: scale.Agent) -> None:
        self.agent = agent
        self.rows: list[str] = []

    def step(self, label: str, args: list[str], url: str, out: str = os.devnull) -> tuple[float, int]:
        load = os.getloadavg()[0]
        t0 = time.time()
        wall, cpu, rss, code, err = scale.vmem(args, url, out)
        lat, errors = self.agent.window(t0, time.time())
        row = (
            f"| {label} | {cpu:.2f} | {wall:.2f} | {rss:.0f} | "
            f"{scale._pct(lat, 0.5) * 1000:.0f} / {scale._pct(lat, 0.99) * 1000:.0f} / "
            f"{max(lat, default=float('nan')) * 1000:.0f} | {errors} | {max(load, os.getloadavg()[0]):.1f} | {code} |"
        )
        self.rows.append(row)
        print(row, flush=True)
        if code:
            print(f"    exit {code}: {err}", flush=True)
        return cpu, code


HEADER = (
    "| command | cpu s | wall s | peak RSS MB | agent append p50 / p99 / max ms | agent errors | load | exit |\n"
    "|---|---|---|---|---|---|---|---|"
)


def copy_database(name: str, url: str, work: Path) -> str:
    """A second database holding the same rows (sqlite: the file; PostgreSQL: a template copy)."""
    tag = uuid.uuid4().hex[:8]
    if name == "sqlite":
        path = url.split("///", 1)[1]
        target = work / f"copy-{tag}.db"
        shutil.copyfile(path, target)
        return f"sqlite+aiosqlite:///{target}"
    if name == "postgresql":
        db = url.rsplit("/", 1)[1]
        asyncio.run(scale._pg_admin(f'CREATE DATABASE "copy_{tag}" TEMPLATE "{db}"'))
        return url.rsplit("/", 1)[0] + f"/copy_{tag}"
    db = url.rsplit("/", 1)[1].split("?")[0]
    scale._mysql_admin(f"CREATE DATABASE `copy_{tag}` CHARACTER SET utf8mb4")
    for table in ("adk_internal_metadata", "sessions", "app_states", "user_states", "events"):
        scale._mysql_admin(f"CREATE TABLE `copy_{tag}`.`{table}` LIKE `{db}`.`{table}`")
        scale._mysql_admin(f"INSERT INTO `copy_{tag}`.`{table}` SELECT * FROM `{db}`.`{table}`")
    return url.replace(f"/{db}?", f"/copy_{tag}?")


def retention_run(name: str, url: str, source: Path, work: Path, sessions: int, old: int) -> list[str]:
    """prune --dry-run / prune beside delete --older-than on a copy, trim, vacuum, the index."""
    cfg = work / f"retention-{name}.toml"
    cfg.write_text('[retention]\nmax_age = "365d"\n', encoding="utf-8")
    trim = work / f"trim-{name}.toml"
    trim.write_text("[retention]\nkeep_last_events = 200\n", encoding="utf-8")
    seed = work / f"seed-{name}.jsonl"
    seed.write_text(scale._session_line(scale.random.Random(1), scale.AGENT_APP, scale.AGENT_USER, "seed", 1, 0))
    scale.vmem(["session", "import", str(seed)], url)
    t0 = time.perf_counter()
    _, _, _, code, err = scale.vmem(["session", "import", str(source)], url)
    print(f"import: exit {code} {err} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if name == "postgresql":
        asyncio.run(scale._pg_analyze(url))
    other = copy_database(name, url, work)
    print(f"\n## {name}: {sessions:,} sessions, {old:,} of them untouched for 400 days\n\n{HEADER}", flush=True)
    agent = scale.Agent(url)
    agent.start()
    run = Run(agent)
    dry, _ = run.step("prune --dry-run (max_age 365d)", ["-c", str(cfg), "session", "prune", "--dry-run"], url)
    prune, _ = run.step("prune --yes (max_age 365d)", ["-c", str(cfg), "session", "prune", "--yes"], url)
    agent.stop()
    agent2 = scale.Agent(other)
    agent2.start()
    run.agent = agent2
    delete, _ = run.step(
        "delete --older-than 365d --yes (a copy)", ["session", "delete", "--older-than", "365d", "--yes"], other
    )
    agent2.stop()
    agent = scale.Agent(url)  # a fresh agent on the first database for the rest
    agent.start()
    run.agent = agent
    run.step("prune --yes (keep_last_events 200)", ["-c", str(trim), "session", "prune", "--yes"], url)
    report = work / f"vacuum-{name}.json"
    run.step("session vacuum --yes", ["session", "vacuum", "--yes", "--json"], url, str(report))
    agent.stop()
    vac = json.loads(report.read_text() or "{}")
    indexed = index_run(url, run)
    lines = [*run.rows, ""]
    lines.append(
        f"prune / delete CPU: {prune / delete:.2f}x (prune {prune:.2f} s, delete {delete:.2f} s); "
        f"prune --dry-run / delete: {dry / delete:.2f}x"
    )
    lines.append(
        f"vacuum ({vac.get('action', '?')[:40]}): {vac.get('bytes_before') or 0:,} -> {vac.get('bytes_after') or 0:,} "
        f"bytes, {vac.get('reclaimed_bytes') or 0:,} returned"
    )
    lines += indexed
    for line in lines[len(run.rows) :]:
        print(line, flush=True)
    drop(name, other)
    return lines


def index_run(url: str, run: Run) -> list[str]:
    """ADK's list_sessions and get_session without ADK's events index, `index --create`, and after."""
    from google.adk.sessions import DatabaseSessionService

    drop_adk_index(url)
    app = scale.APPS[1]
    before_list = adk_cpu(url, "list", app)
    before_get = adk_cpu(url, "get", scale.BIG_APP, scale.BIG_USER, scale.BIG_ID)

    async def as_adk_1(self: Any) -> None:  # the agent must not build the index itself at start-up
        self._db_schema_version, self._tables_created = "1", True

    prepare = DatabaseSessionService.prepare_tables
    DatabaseSessionService.prepare_tables = as_adk_1  # type: ignore[method-assign]
    try:
        agent = scale.Agent(url)
        run.agent = agent
        agent.start()
        run.step("session index --create", ["session", "index", "--create"], url)
        agent.stop()
    finally:
        DatabaseSessionService.prepare_tables = prepare  # type: ignore[method-assign]
    after_list = adk_cpu(url, "list", app)
    after_get = adk_cpu(url, "get", scale.BIG_APP, scale.BIG_USER, scale.BIG_ID)
    return [
        f"ADK list_sessions({app}) CPU without / with ADK's events index: {before_list[0]:.3f} / {after_list[0]:.3f} s"
        f" ({before_list[0] / after_list[0]:.2f}x; wall {before_list[1]:.3f} / {after_list[1]:.3f} s)",
        f"ADK get_session(big) CPU without / with: {before_get[0]:.3f} / {after_get[0]:.3f} s "
        f"({before_get[0] / after_get[0]:.2f}x; wall {before_get[1]:.3f} / {after_get[1]:.3f} s)",
    ]


def list_run(name: str, url: str, work: Path, n: int) -> list[str]:
    """ADK's list_sessions of one app of `n` sessions: without ADK's events index, with it, with a sort index."""
    path = work / f"list-{name}.jsonl"
    rng = scale.random.Random(7)
    with path.open("w", encoding="utf-8") as out:
        for k in range(n):
            start = scale.NOW - rng.random() * 300 * 86400
            out.write(scale._session_line(rng, "big_app", f"user{k % 2000:04d}", f"s{k:07d}", 2, start))
    t0 = time.perf_counter()
    _, _, _, code, err = scale.vmem(["session", "import", str(path)], url)
    print(f"import of {n:,} sessions: exit {code} {err} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if name == "postgresql":
        asyncio.run(scale._pg_analyze(url))
    drop_adk_index(url)
    without = adk_cpu(url, "list", "big_app")
    scale.vmem(["session", "index", "--create"], url)
    with_adk = adk_cpu(url, "list", "big_app")
    table = "`{db}`.sessions" if name == "mysql" else "sessions"
    sql(url, f"CREATE INDEX bench_sessions_sort ON {table} (app_name, update_time, user_id, id)")
    if name == "postgresql":
        asyncio.run(scale._pg_analyze(url))
    sort = adk_cpu(url, "list", "big_app")
    line = (
        f"{name}: ADK list_sessions of {n:,} sessions, CPU without ADK's events index {without[0]:.2f} s, "
        f"with it {with_adk[0]:.2f} s ({without[0] / with_adk[0]:.2f}x), with an index on the sort order too "
        f"{sort[0]:.2f} s ({without[0] / sort[0]:.2f}x); wall {without[1]:.2f} / {with_adk[1]:.2f} / {sort[1]:.2f} s"
    )
    print(line, flush=True)
    return [line]


def make(name: str, work: Path) -> str | None:
    db = f"vmem_ret_{uuid.uuid4().hex[:8]}"
    if name == "postgresql":
        if not scale._reachable(5432):
            return None
        asyncio.run(scale._pg_admin(f'CREATE DATABASE "{db}"'))
        return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"
    if name == "mysql":
        if not scale._reachable(3306):
            return None
        scale._mysql_admin(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        return f"mysql+aiomysql://root@127.0.0.1:3306/{db}?charset=utf8mb4"
    return f"sqlite+aiosqlite:///{work / (db + '.db')}"


def drop(name: str, url: str) -> None:
    if name == "postgresql":
        asyncio.run(scale._pg_admin(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    elif name == "mysql":
        scale._mysql_admin(f"DROP DATABASE IF EXISTS `{url.rsplit('/', 1)[1].split('?')[0]}`")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="events in the file (about)")
    parser.add_argument("--big", type=int, default=20_000, help="events of the one big session")
    parser.add_argument("--old", type=int, default=1_000, help="sessions last updated 400 days ago")
    parser.add_argument("--list-sessions", type=int, default=50_000, help="sessions of the one app listed")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--only", default="retention,list", help="retention, list or both")
    opts = parser.parse_args()
    from as_installed import compile_vmem

    compile_vmem()
    work = Path(tempfile.mkdtemp(prefix="vmem-retention-"))
    source = work / "sessions.jsonl"
    sessions, events = scale.build_file(source, opts.events, opts.big, opts.old)
    print(f"file: {sessions:,} sessions, {events:,} events; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    summary: list[str] = []
    try:
        for name in opts.backends.split(","):
            if "retention" in opts.only:
                url = make(name, work)
                if url is None:
                    print(f"{name}: not reachable, skipped")
                    continue
                try:
                    summary += [f"### {name}", *retention_run(name, url, source, work, sessions, opts.old)]
                finally:
                    drop(name, url)
            if "list" in opts.only:
                url = make(name, work)
                if url is None:
                    continue
                try:
                    summary += list_run(name, url, work, opts.list_sessions)
                finally:
                    drop(name, url)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n" + "\n".join(summary))


if __name__ == "__main__":
    main()
