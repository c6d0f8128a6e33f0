"""`vmem ltm sync --follow` beside an agent writing (#44): lag, CPU against `ltm save --from-store`,
peak memory, and the agent's append latency.

For each session database (a sqlite file; PostgreSQL at 127.0.0.1:5432, a fresh database), an
agent process (tests/sync_agent.py: the real google-adk DatabaseSessionService, one
append_event per event) writes RATE new sessions a second for SECONDS seconds, each one turn of
10 events (a user message and the agent's nine), while `vmem ltm sync --follow` runs in its own
process with its default settings, into the local store with the hash embedder. Then:

- lag: for each memory (the user message of a turn, under the default policy), from the time the
  agent's append_event returned (the commit) to the memory's saved-at (provenance; the local
  store answers a search from the moment its save returns), p50 / p99 / max;
- CPU: the sync process's user+system time per session synced, beside `vmem ltm save
  --from-store --app A` of the same sessions into a fresh store (ratio); the sync's figure holds
  its polling while the agent writes, which the one-shot replay does not have;
- peak RSS of the sync process (ru_maxrss), and of the replay;
- the agent's append_event latency p50 / p99 / max (what a sync costs the agent).

Run: PYTHONPATH=$PWD .venv/bin/python bench/ltm_sync.py [--rate 20] [--seconds 300] [--dbs sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VMEM = str(Path(sys.executable).with_name("vmem"))
AGENT = str(ROOT / "tests" / "sync_agent.py")
APP = "benchapp"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _wait(proc: subprocess.Popen[bytes]) -> tuple[int, float, int]:
    """(exit status, CPU seconds, peak RSS in KiB) of a child, from wait4's rusage."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def _database(kind: str, work: Path) -> tuple[str, Any]:
    if kind == "sqlite":
        return f"sqlite+aiosqlite:///{work / 'sessions.db'}", lambda: None
    import asyncpg

    name = f"vmem_bench_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=5432, user="postgres", database="postgres")
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}", lambda: asyncio.run(
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    )


def _saved_at(env: dict[str, str]) -> dict[str, float]:
    """Memory text -> saved-at, from the store the sync filled."""
    os.environ.update(env)
    from veadk_mem.config import load_settings
    from veadk_mem.ltm.facade import LongTermMemory

    async def go() -> dict[str, float]:
        out: dict[str, float] = {}
        async with LongTermMemory.from_settings(load_settings().settings) as ltm:
            backend = ltm.backend_for(APP)
            for user in (f"user{i}" for i in range(USERS)):
                for record in await backend.list_memories(user):
                    if record.source is not None and record.source.saved_at is not None:
                        out[record.text] = record.source.saved_at
        return out

    return asyncio.run(go())


USERS = 20


def run_one(kind: str, rate: float, seconds: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"vmem-sync-{kind}-"))
    url, drop = _database(kind, work)
    sessions = int(rate * seconds)
    base = {
        **os.environ,
        "MODEL_EMBEDDING_PROVIDER": "hash",
        "XDG_DATA_HOME": str(work / "data"),
        "LONG_TERM_MEMORY_LOCAL_PATH": str(work / "sync-ltm.db"),
    }
    try:
        # the app exists before the sync starts (an unknown app is only waited for)
        subprocess.run(
            [sys.executable, AGENT, url, "--app", APP, "--sessions", "1", "--prefix", "seed", "--turns", "1"],
            check=True,
        )
        sync = subprocess.Popen(
            [VMEM, "--json", "ltm", "sync", "--follow", "--app", APP, "--db-url", url],
            stdout=open(work / "sync.out", "w"),  # noqa: SIM115
            stderr=open(work / "sync.err", "w"),  # noqa: SIM115
            env=base,
        )
        log = work / "agent.jsonl"
        started = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                AGENT,
                url,
                "--app",
                APP,
                "--users",
                str(USERS),
                "--sessions",
                str(sessions),
                "--turns",
                "1",
                "--rate",
                str(rate),
                "--log",
                str(log),
            ],
            check=True,
        )
        wrote = time.monotonic() - started
        events = [json.loads(line) for line in log.read_text().splitlines()]
        wanted = {
            json.dumps({"parts": [{"text": e["text"]}], "role": "user"}): e["committed"]
            for e in events
            if e["role"] == "user" and e["text"]
        }
        deadline = time.monotonic() + 600
        saved: dict[str, float] = {}
        while time.monotonic() < deadline:
            saved = _saved_at(base)
            if all(t in saved for t in wanted):
                break
            time.sleep(2)
        sync.send_signal(signal.SIGTERM)
        code, sync_cpu, sync_rss = _wait(sync)
        assert code == 0, (work / "sync.err").read_text()[-2000:]
        missing = [t for t in wanted if t not in saved]
        lags = [saved[t] - c for t, c in wanted.items() if t in saved]
        appends = [e["append_s"] for e in events]
        # the reference: one replay of the same sessions into a fresh store
        ref_env = {
            **base,
            "XDG_DATA_HOME": str(work / "ref-data"),
            "LONG_TERM_MEMORY_LOCAL_PATH": str(work / "ref-ltm.db"),
        }
        ref = subprocess.Popen(
            [VMEM, "--json", "ltm", "save", "--from-store", "--app", APP, "--db-url", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=ref_env,
        )
        ref_code, ref_cpu, ref_rss = _wait(ref)
        assert ref_code == 0
        synced = sessions + 1
        return {
            "db": kind,
            "sessions": synced,
            "events": len(events) + 10,
            "agent_seconds": round(wrote, 1),
            "agent_rate": round(sessions / wrote, 1),
            "missing": len(missing),
            "lag_p50": round(_pct(lags, 0.50), 2),
            "lag_p99": round(_pct(lags, 0.99), 2),
            "lag_max": round(max(lags), 2) if lags else None,
            "sync_cpu_ms_per_session": round(1000 * sync_cpu / synced, 2),
            "replay_cpu_ms_per_session": round(1000 * ref_cpu / synced, 2),
            "cpu_ratio": round(sync_cpu / ref_cpu, 2) if ref_cpu else None,
            "sync_peak_rss_mb": round(sync_rss / 1024, 1),
            "replay_peak_rss_mb": round(ref_rss / 1024, 1),
            "append_ms_p50": round(1000 * statistics.median(appends), 2),
            "append_ms_p99": round(1000 * _pct(appends, 0.99), 2),
            "append_ms_max": round(1000 * max(appends), 2),
        }
    finally:
        drop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=20.0, help="new sessions a second")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--dbs", default="sqlite,postgresql")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"# rate {args.rate}/s for {args.seconds:.0f} s, load {load:.1f}, "
        + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    )
    for kind in args.dbs.split(","):
        print(json.dumps(run_one(kind, args.rate, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
