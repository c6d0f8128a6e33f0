"""vmem's session commands on a large database while an ADK agent keeps writing (issue #22).

    .venv/bin/python bench/sessions_scale.py                                  # 1,000,000 events, 3 DBs
    .venv/bin/python bench/sessions_scale.py --events 100000 --big 20000 --backends postgresql
    .venv/bin/python bench/sessions_scale.py --backends sqlite --only list   # the import, then the lists only
    .venv/bin/python bench/sessions_scale.py --backends mysql --mariadb-buffer-pool 1024   # a pool that holds it
    .venv/bin/python bench/sessions_scale.py --repeat 3   # each read-only command 3 times: the median run

Builds an export file of about `--events` events (realistic shapes: user text, model text
with a state delta and usage metadata, tool calls and responses) in sessions of 4 to 36
events over 5 apps and 500 users, one session of `--big` events, and `--old` sessions last
updated long ago; then, per backend (a fresh database each), with an ADK agent appending
through google-adk's `DatabaseSessionService` the whole time (a thread of its own, an
event every 50 ms), runs each vmem command as its own process: import; list (first page,
--app, --user, --since, a deep --offset, and the first page with --compactions, the one
listing that reads events); get of the big session (--events 50 and --json);
export of one app; delete --older-than of the old sessions (the agent also resumes one of
them meanwhile: it must be kept); doctor. Prints wall time, CPU time (user+sys) and peak
RSS per command (from wait4), ADK's own list_sessions / get_session beside them (CPU and wall of the
call alone, import excluded, and ADK's CPU over vmem's whole-process CPU), and the
agent's append latency (p50, p99, max) and errors during each command. With `--repeat N`
each command that changes nothing (list, get, export, doctor) runs N times and its row is the
run of median CPU time, every wall time in brackets: this host's speed moves by up to half
from one run to the next, and one run of a 3-second command can land on either side of a target.
Nothing is lost: the agent's session is read back through ADK at the end and compared with
what it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

APPS = [f"app{i}" for i in range(5)]
COMMANDS = {"list", "get", "export", "delete", "doctor"}  # what runs after the import (--only)
BIG_APP, BIG_USER, BIG_ID = "app0", "heavy", "big"
AGENT_APP, AGENT_USER, AGENT_ID = "agent_app", "agent_user", "live"
NOW = time.time()
OLD_TIME = NOW - 400 * 86400  # the --old sessions: untouched for 400 days
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "the",
    "agent",
    "answers",
    "a",
    "question",
]


# --- the export file -----------------------------------------------------------------------


def _event(rng: random.Random, sid: str, i: int, ts: float) -> dict[str, Any]:
    """One event in ADK's camelCase JSON, shaped as an agent's turn writes them."""
    kind = i % 4
    text = " ".join(rng.choices(WORDS, k=rng.randint(8, 40)))
    base: dict[str, Any] = {"id": f"{sid}-{i:06d}", "invocationId": f"inv-{i // 4}", "timestamp": ts}
    if kind == 0:
        return base | {"author": "user", "content": {"role": "user", "parts": [{"text": text}]}}
    if kind == 1:
        call = {"id": f"call-{i}", "name": "search", "args": {"query": text[:40], "limit": 5}}
        return base | {"author": "assistant", "content": {"role": "model", "parts": [{"functionCall": call}]}}
    if kind == 2:
        resp = {"id": f"call-{i - 1}", "name": "search", "response": {"results": [text[:60], text[-60:]]}}
        return base | {"author": "assistant", "content": {"role": "user", "parts": [{"functionResponse": resp}]}}
    return base | {
        "author": "assistant",
        "content": {"role": "model", "parts": [{"text": text}]},
        "actions": {"stateDelta": {"turns": i, "last_topic": text[:20]}},
        "usageMetadata": {"promptTokenCount": 200 + i, "candidatesTokenCount": 40, "totalTokenCount": 240 + i},
        "turnComplete": True,
    }


def _session_line(rng: random.Random, app: str, user: str, sid: str, n: int, start: float) -> str:
    events = [_event(rng, sid, i, start + i * 2.0) for i in range(n)]
    last = events[-1]["timestamp"] if events else start
    data = {"id": sid, "appName": app, "userId": user, "state": {"topic": sid}, "events": events}
    data["lastUpdateTime"] = last
    return json.dumps(data, separators=(",", ":")) + "\n"


def build_file(path: Path, total: int, big: int, old: int) -> tuple[int, int]:
    """Write the export file; (sessions, events) written."""
    rng = random.Random(22)
    sessions = events = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(_session_line(rng, BIG_APP, BIG_USER, BIG_ID, big, NOW - 3 * 86400))
        sessions, events = 1, big
        k = 0
        while events < total:
            n = rng.randint(4, 36)
            is_old = k % 2 == 0 and k // 2 < old  # every other session, up to `old` of them
            start = OLD_TIME + k if is_old else NOW - 30 * 86400 + rng.random() * 29 * 86400
            if not is_old and k % 10 == 1:
                start = NOW - 3 * 86400 + rng.random() * 2 * 86400  # some updated this week
            app = APPS[k % len(APPS)]
            user = f"user{rng.randrange(500):03d}"
            out.write(_session_line(rng, app, user, f"s{k:07d}", n, start))
            sessions, events, k = sessions + 1, events + n, k + 1
    return sessions, events


# --- the agent -----------------------------------------------------------------------------


class Agent:
    """google-adk's DatabaseSessionService appending an event every `pause` seconds, in a thread."""

    def __init__(self, url: str, pause: float = 0.05) -> None:
        self.url, self.pause = url, pause
        self.samples: list[tuple[float, float]] = []  # (end time, latency)
        self.errors: list[tuple[float, str]] = []
        self.written: list[str] = []
        self.resume: tuple[str, str] | None = None  # (user, id) of an old session to append to once
        self.resumed: str | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(120)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def window(self, t0: float, t1: float) -> tuple[list[float], int]:
        lat = [lat for end, lat in self.samples if t0 <= end <= t1]
        return lat, sum(1 for t, _ in self.errors if t0 <= t <= t1)

    async def _run(self) -> None:
        from google.adk.events import Event
        from google.adk.sessions import DatabaseSessionService
        from google.genai import types

        service = DatabaseSessionService(self.url)
        session = await service.get_session(app_name=AGENT_APP, user_id=AGENT_USER, session_id=AGENT_ID)
        if session is None:
            session = await service.create_session(app_name=AGENT_APP, user_id=AGENT_USER, session_id=AGENT_ID)
        self._ready.set()
        n = 0
        while not self._stop.is_set():
            n += 1
            text = types.Content(role="user", parts=[types.Part(text=f"agent turn {n}")])
            event = Event(author="user", invocation_id=f"agent-{n}", content=text, timestamp=time.time())
            t0 = time.perf_counter()
            try:
                if self.resume is not None:
                    user, sid = self.resume
                    self.resume = None
                    old = await service.get_session(app_name=APPS[0], user_id=user, session_id=sid)
                    if old is not None:
                        await service.append_event(old, event)
                        self.resumed = f"{APPS[0]}/{user}/{sid}"
                else:
                    await service.append_event(session, event)
                    self.written.append(event.id)
            except Exception as exc:  # counted and shown; the run goes on
                self.errors.append((time.time(), f"{type(exc).__name__}: {exc}"[:200]))
                session = await service.get_session(app_name=AGENT_APP, user_id=AGENT_USER, session_id=AGENT_ID)
            self.samples.append((time.time(), time.perf_counter() - t0))
            await asyncio.sleep(self.pause)
        await service.close()


class Watch:
    """What else the agent's stalls may come from, sampled every 100 ms in a thread of its own.

    - lock waits: sessions waiting on a lock in the database, right now (PostgreSQL:
      pg_stat_activity's wait_event_type 'Lock'; MariaDB: INNODB_TRX in LOCK WAIT). sqlite has
      no such view: there the control below tells a stall the lock made from one the load made.
    - control: a small write transaction into a sqlite file of its own (same disk, same
      machine, no lock shared with anyone): its latency is what the load alone costs a write.
    """

    def __init__(self, url: str, work: Path) -> None:
        self.url = url
        self.locks: list[tuple[float, int]] = []  # (time, sessions waiting on a lock)
        self.control: list[tuple[float, float]] = []  # (end time, latency s)
        self._stop = threading.Event()
        self._path = work / "control.db"
        self._threads = [threading.Thread(target=self._control, daemon=True)]
        if not url.startswith("sqlite"):
            self._threads.append(threading.Thread(target=lambda: asyncio.run(self._locks()), daemon=True))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def window(self, t0: float, t1: float) -> tuple[int, list[float]]:
        waits = max((n for t, n in self.locks if t0 <= t <= t1), default=0)
        return waits, [lat for t, lat in self.control if t0 <= t <= t1]

    def waited(self, t0: float, t1: float) -> bool:
        """Whether a lock wait was seen between t0 and t1."""
        return any(n for t, n in self.locks if t0 <= t <= t1)

    def _control(self) -> None:
        import sqlite3

        conn = sqlite3.connect(self._path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER, v TEXT)")
        n = 0
        while not self._stop.wait(0.1):
            n += 1
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, ?)", (n, "x" * 200))
            conn.execute("COMMIT")
            self.control.append((time.time(), time.perf_counter() - t0))
        conn.close()

    async def _locks(self) -> None:
        if self.url.startswith("postgresql"):
            import asyncpg

            conn = await asyncpg.connect(self.url.replace("postgresql+asyncpg", "postgresql"))
            sql = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            try:
                while not self._stop.is_set():
                    self.locks.append((time.time(), int(await conn.fetchval(sql))))
                    await asyncio.sleep(0.1)
            finally:
                await conn.close()
        else:
            import pymysql

            conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
            try:
                with conn.cursor() as cur:
                    while not self._stop.is_set():
                        cur.execute("SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
                        row = cur.fetchone()
                        self.locks.append((time.time(), int(row[0]) if row else 0))
                        time.sleep(0.1)
            finally:
                conn.close()


# --- running commands ----------------------------------------------------------------------


# Peak RSS and CPU come from a small helper process: Linux carries the forking process's
# high-water RSS into a child's ru_maxrss across exec, so wait4 from this (large) process
# would report its own size for every command. CPU is RUSAGE_CHILDREN (vmem and any process
# it starts); peak RSS is that of the whole tree, vmem's process and its import reader child
# together, sampled every 20 ms (ru_maxrss alone is the largest single process).
_MEASURE = """
import os, resource, subprocess, sys, threading, time
def tree_kb(pid):
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(x) for x in f.read().split()]
        except (OSError, StopIteration):
            pass
    return total
proc = subprocess.Popen(sys.argv[2:], stdout=open(sys.argv[1], "wb"), stderr=subprocess.PIPE)
err = []
reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
reader.start()
peak = 0
while proc.poll() is None:
    peak = max(peak, tree_kb(proc.pid))
    time.sleep(0.02)
reader.join()
use = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.buffer.write(err[0])
print(proc.returncode, use.ru_utime + use.ru_stime, max(peak, use.ru_maxrss))
"""


def vmem(args: list[str], url: str, out: str = os.devnull) -> tuple[float, float, float, int, str]:
    """Run `vmem ARGS --db-url URL` as its own process: (wall s, cpu s, peak RSS MB, exit code, stderr tail)."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", _MEASURE, out, sys.executable, "-m", "veadk_mem", *args, "--db-url", url]
    done = subprocess.run(cmd, capture_output=True, env=env)
    wall = time.perf_counter() - t0
    code, cpu, rss = done.stdout.decode().split()
    err = done.stderr.decode(errors="replace").strip().splitlines()
    return wall, float(cpu), int(rss) / 1024, int(code), (err[-1] if err else "")


def adk_call(url: str, what: str, *args: str) -> tuple[float, float]:
    """(CPU s, wall s) of ADK's own list_sessions / get_session in a fresh process, its import excluded:
    CPU beside vmem's CPU is the comparison the host's load moves least (vmem's includes its start-up)."""
    script = f"""
import asyncio, sys, time
from google.adk.sessions import DatabaseSessionService
async def main():
    svc = DatabaseSessionService({url!r})
    await svc.list_sessions(app_name="warm-up", user_id="nobody")
    t0, c0 = time.perf_counter(), time.process_time()
    if {what!r} == "list":
        await svc.list_sessions(app_name=sys.argv[1], user_id=sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        await svc.get_session(app_name=sys.argv[1], user_id=sys.argv[2], session_id=sys.argv[3])
    print(time.process_time() - c0, time.perf_counter() - t0)
    await svc.close()
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        return float("nan"), float("nan")
    cpu, wall = out.stdout.strip().splitlines()[-1].split()
    return float(cpu), float(wall)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _runs(args: list[str], url: str, times: int) -> tuple[float, float, float, int, str, str]:
    """`vmem` run `times` times: the run of median CPU time (wall, cpu, its exit code and stderr),
    the largest peak RSS of them all, and every wall time ("2.51-2.62") to print beside it."""
    done = [vmem(args, url) for _ in range(times)]
    failed = [r for r in done if r[3] != 0]
    wall, cpu, _, code, err = failed[0] if failed else sorted(done, key=lambda r: r[1])[len(done) // 2]
    spread = f"{min(r[0] for r in done):.2f}-{max(r[0] for r in done):.2f}" if times > 1 else ""
    return wall, cpu, max(r[2] for r in done), code, err, spread


def run_backend(
    name: str,
    url: str,
    source: Path,
    events: int,
    old: int,
    big: int,
    sessions: int,
    only: set[str] = COMMANDS,
    repeat: int = 1,
) -> list[str]:
    agent = Agent(url)
    rows: list[str] = []

    def step(
        label: str,
        args: list[str],
        per_events: int | Callable[[], int] = 0,
        adk: tuple[float, float] | None = None,
        once: bool = False,
    ) -> None:
        """Run one command (`repeat` times unless `once`: import and delete change the data)."""
        load0 = os.getloadavg()[0]
        t0 = time.time()
        wall, cpu, rss, code, err, spread = _runs(args, url, 1 if once else repeat)
        t1 = time.time()
        lat, errors = agent.window(t0, t1)
        waits, control = watch.window(t0, t1)
        load = max(load0, os.getloadavg()[0])
        if callable(per_events):  # counted in what the command wrote, once it has run
            per_events = per_events() if code == 0 else 0
        rate = f"{per_events / wall:,.0f} ev/s" if per_events else ""
        # ADK's CPU (wall) and how many times vmem's whole process it is, CPU to CPU
        adk_text = f"{adk[0]:.2f} ({adk[1]:.2f}) {adk[0] / cpu:.1f}x" if adk is not None and cpu else ""
        slow_spans = [(end - x, end) for end, x in agent.samples if t0 <= end <= t1 and x >= 0.5]
        slow = f"{len(slow_spans)}"
        if not url.startswith("sqlite"):  # how many of them saw a session of theirs wait on a lock
            slow += f" ({sum(1 for a, b in slow_spans if watch.waited(a, b))} in a lock wait)"
        rows.append(
            f"| {label} | {wall:.2f}{f' ({spread})' if spread else ''} | {cpu:.2f} | {rss:.0f} | {rate} | {adk_text} | "
            f"{_pct(lat, 0.5) * 1000:.0f} / {_pct(lat, 0.99) * 1000:.0f} / {max(lat, default=float('nan')) * 1000:.0f}"
            f" | {errors} | {slow} | {waits if not url.startswith('sqlite') else '-'} | "
            f"{_pct(control, 0.99) * 1000:.0f} / {max(control, default=float('nan')) * 1000:.0f} | "
            f"{load:.1f} | {code} |"
        )
        print(rows[-1], flush=True)
        if code != 0:
            print(f"    exit {code}: {err}", flush=True)

    # the tables exist before the agent starts: vmem's import makes an empty database ADK's v1
    print(f"\n## {name}: {events:,} events, one session of {big:,}\n", flush=True)
    header = (
        "| command | wall s | cpu s | peak RSS MB | rate | ADK cpu (wall) s, x | agent append p50 / p99 / max ms | "
        "agent errors | appends >= 0.5 s | lock waiters (max) | control write p99 / max ms | load | exit |"
        "\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    print(header, flush=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=source.parent))  # removed with the run's directory
    seed = tmp / "seed.jsonl"
    seed.write_text(_session_line(random.Random(1), AGENT_APP, AGENT_USER, "seed", 1, NOW - 86400))
    vmem(["session", "import", str(seed)], url)  # creates ADK's tables for the agent
    agent.start()
    watch = Watch(url, tmp)
    watch.start()
    step("import", ["session", "import", str(source)], events, once=True)
    if url.startswith("postgresql"):
        asyncio.run(_pg_analyze(url))
    elif url.startswith("mysql"):  # as a database that has been in use: its statistics settled
        name = url.rsplit("/", 1)[1].split("?")[0]
        _mysql_admin(f"ANALYZE TABLE `{name}`.`sessions`, `{name}`.`events`")
        # MariaDB caches pages in its buffer pool only (O_DIRECT, no OS cache): a read of the big
        # session is disk-bound when the pool cannot hold it, so the figures name both sizes
        pool = int(_mysql_admin("SELECT @@innodb_buffer_pool_size"))
        size = _mysql_admin(
            "SELECT SUM(data_length + index_length) FROM information_schema.TABLES "
            f"WHERE table_schema = '{name}' AND table_name = 'events'"
        )
        mib = f"{pool / 2**20:,.0f} MiB; events table {int(size) / 2**20:,.0f} MiB"
        print(f"(innodb_buffer_pool_size {mib})", flush=True)
    if "list" in only:
        step("list (first page)", ["session", "list", "--json"], adk=adk_call(url, "list", APPS[1]))
        # the one listing that reads events: the first page holds the big session
        step("list --compactions", ["session", "list", "--compactions", "--json"])
        step("list --app", ["session", "list", "--app", APPS[1], "--json"], adk=adk_call(url, "list", APPS[1]))
        step(
            "list --user",
            ["session", "list", "--user", "user007", "--json"],
            adk=adk_call(url, "list", APPS[1], "user007"),
        )
        step("list --since 7d", ["session", "list", "--since", "7d", "--json"])
        deep = sessions * 4 // 5  # a page four fifths of the way down the list
        step(f"list --offset {deep:,}", ["session", "list", "--offset", str(deep), "--json"])
    if "get" in only:
        step("get big --events 50", ["session", "get", BIG_APP, BIG_USER, BIG_ID, "--events", "50", "--json"])
        step(
            "get big --json",
            ["session", "get", BIG_APP, BIG_USER, BIG_ID, "--json"],
            big,
            adk=adk_call(url, "get", BIG_APP, BIG_USER, BIG_ID),
        )
    if "export" in only:
        # the big session is in app0, so export app1; the rate is of the events in the file
        out = tmp / "app1.jsonl"
        export = ["session", "export", "--app", APPS[1], "-o", str(out)]
        step(f"export --app {APPS[1]}", export, lambda: _exported_events(out))
        # the app holding the big session: peak RSS must not follow the session's size (issue 39 item 4)
        out_big = tmp / "app0.jsonl"
        export = ["session", "export", "--app", BIG_APP, "-o", str(out_big)]
        step(f"export --app {BIG_APP} (big)", export, lambda: _exported_events(out_big))
    if "delete" in only:
        first_old = _first_old_user(source)
        agent.resume = first_old  # the agent resumes an old session while the delete runs
        step(
            f"delete --older-than 365d ({old:,})",
            ["session", "delete", "--older-than", "365d", "--yes", "--json"],
            once=True,
        )
    if "doctor" in only:
        step("doctor", ["doctor"])
    agent.stop()
    watch.stop()
    lost = asyncio.run(_lost(url, agent.written))
    print(
        f"\nagent: {len(agent.samples):,} appends, {len(agent.errors)} errors"
        f"{' (' + agent.errors[0][1] + ')' if agent.errors else ''}; events lost: {lost}; "
        f"resumed during delete: {agent.resumed or 'none'} "
        f"(kept: {asyncio.run(_exists(url, agent.resumed)) if agent.resumed else '-'})",
        flush=True,
    )
    return rows


def _exported_events(path: Path) -> int:
    """The events of every session line in an export file."""
    with path.open(encoding="utf-8") as handle:
        return sum(len(data.get("events", ())) for data in map(json.loads, handle) if "kind" not in data)


def _first_old_user(source: Path) -> tuple[str, str] | None:
    """(user, id) of an old session of app0 near the end of the delete's order."""
    found = None
    with source.open(encoding="utf-8") as handle:
        handle.readline()  # the big session
        for line in handle:
            data = json.loads(line)
            if data["lastUpdateTime"] < OLD_TIME + 10**6 and data["appName"] == APPS[0]:
                found = (data["userId"], data["id"])
    return found


async def _lost(url: str, written: list[str]) -> int:
    from google.adk.sessions import DatabaseSessionService

    svc = DatabaseSessionService(url)
    try:
        s = await svc.get_session(app_name=AGENT_APP, user_id=AGENT_USER, session_id=AGENT_ID)
        stored = {e.id for e in (s.events if s else [])}
        return sum(1 for i in written if i not in stored)
    finally:
        await svc.close()


async def _exists(url: str, key: str | None) -> bool:
    from google.adk.sessions import DatabaseSessionService

    if key is None:
        return False
    app, user, sid = key.split("/")
    svc = DatabaseSessionService(url)
    try:
        return await svc.get_session(app_name=app, user_id=user, session_id=sid) is not None
    finally:
        await svc.close()


# --- databases -----------------------------------------------------------------------------


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(host="127.0.0.1", port=5432, user="postgres", database="postgres")
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _pg_analyze(url: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def _mysql_admin(sql: str) -> Any:
    """Run one statement on MariaDB as root, committed; the first value of its first row, if any."""
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
        conn.commit()
        return row[0] if row else None
    finally:
        conn.close()


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _speed(source: Path) -> str:
    """How fast this machine runs vmem's kind of work now: decoding and encoding 10,000 of the
    file's session lines, the best of three.

    A shared host's speed varies by 2-3 times from one hour to the next; figures taken hours
    apart compare only beside this line (a bare counting loop, which fits in a core's cache,
    showed no such change on a day when every command took 2.5 times as long).
    """
    lines: list[str] = []
    with source.open(encoding="utf-8") as handle:
        for line in handle:
            if len(line) < 100_000:  # the session lines of ordinary size, not the big one
                lines.append(line)
            if len(lines) == 10_000:
                break
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for line in lines:
            json.dumps(json.loads(line))
        best = min(best, time.perf_counter() - t0)
    return f"speed: 10,000 session lines decoded and encoded in {best:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the file (about)")
    parser.add_argument("--big", type=int, default=200_000, help="events of the one big session")
    parser.add_argument("--old", type=int, default=20_000, help="sessions last updated 400 days ago (deleted)")
    parser.add_argument("--backends", default="postgresql,mysql,sqlite")
    parser.add_argument(
        "--only", default=",".join(sorted(COMMANDS)), help="after the import, only these: list,get,export,delete,doctor"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each read-only command N times and print the run of median wall time, every wall time beside it",
    )
    parser.add_argument(
        "--mariadb-buffer-pool",
        type=int,
        default=0,
        metavar="MIB",
        help="set MariaDB's innodb_buffer_pool_size for the run (restored after); 0: as the server has it",
    )
    opts = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from as_installed import compile_vmem

    compile_vmem()  # vmem's bytecode, as a pip install leaves it (this machine sets PYTHONDONTWRITEBYTECODE)
    if opts.repeat < 1:
        parser.error("--repeat: N must be 1 or more")
    only = {c for c in opts.only.split(",") if c}
    if only - COMMANDS:
        parser.error(f"--only: unknown {', '.join(sorted(only - COMMANDS))}")
    work = Path(tempfile.mkdtemp(prefix="vmem-scale-"))
    source = work / "sessions.jsonl"
    t0 = time.perf_counter()
    sessions, events = build_file(source, opts.events, opts.big, opts.old)
    size = source.stat().st_size / 1e6
    print(f"file: {sessions:,} sessions, {events:,} events, {size:,.0f} MB ({time.perf_counter() - t0:.0f} s)")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {_speed(source)}")
    try:
        _run_backends(opts, work, source, sessions, events, only)
    finally:  # the file, a sqlite database and each backend's exports: a gigabyte a run
        shutil.rmtree(work, ignore_errors=True)


def _run_backends(
    opts: argparse.Namespace, work: Path, source: Path, sessions: int, events: int, only: set[str]
) -> None:
    pool_before = 0  # MariaDB's own innodb_buffer_pool_size, put back after the run
    for name in opts.backends.split(","):
        db = f"vmem_scale_{uuid.uuid4().hex[:8]}"
        if name == "postgresql":
            if not _reachable(5432):
                print("PostgreSQL not reachable: skipped")
                continue
            asyncio.run(_pg_admin(f'CREATE DATABASE "{db}"'))
            url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"
        elif name == "mysql":
            if not _reachable(3306):
                print("MariaDB not reachable: skipped")
                continue
            _mysql_admin(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            if opts.mariadb_buffer_pool:
                pool_before = int(_mysql_admin("SELECT @@innodb_buffer_pool_size"))
                _mysql_admin(f"SET GLOBAL innodb_buffer_pool_size = {opts.mariadb_buffer_pool * 2**20}")
            url = f"mysql+aiomysql://root@127.0.0.1:3306/{db}?charset=utf8mb4"
        else:
            url = f"sqlite+aiosqlite:///{work / (db + '.db')}"
        try:
            run_backend(name, url, source, events, opts.old, opts.big, sessions, only, opts.repeat)
        finally:
            if name == "postgresql":
                asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
            elif name == "mysql":
                _mysql_admin(f"DROP DATABASE IF EXISTS `{db}`")
                if opts.mariadb_buffer_pool:
                    _mysql_admin(f"SET GLOBAL innodb_buffer_pool_size = {pool_before}")


if __name__ == "__main__":
    main()
