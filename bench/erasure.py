"""Erasure beside a plain session delete: 1,000 sessions saved by the policy, 100 erased (#42 item 3).

    .venv/bin/python bench/erasure.py                       # local and Redis (127.0.0.1:6379, db 12)
    .venv/bin/python bench/erasure.py --sessions 200 --erase 20 --backends local

A sqlite session database gets N sessions (4 user turns and 4 replies each, 10 sessions a
user) by `vmem session import`; the default policy saves their memories into each backend
(the hash embedder: the model is not what is measured). The database is copied; on one copy
`session delete`'s flow deletes the first M sessions, on the other `session delete
--with-memories`'s (`ops.erasure.erase`: recompute the strings, match, delete memories,
delete sessions, verify). It prints wall and CPU time of each in the same run, their ratio,
the memories deleted and those left (must be 0), and the load. Redis is the machine's plain
Redis 7 (no search module: vmem's scan fallback), db 12, its keys removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

APP = "bench_erasure"
TURNS = 4
PER_USER = 10


def session_lines(n: int) -> list[str]:
    """N ADK sessions as import lines: TURNS user texts (distinct) and replies each."""
    lines = []
    for i in range(n):
        events = []
        for t in range(TURNS):
            ts = 1_790_000_000.0 + i * 100 + t * 2
            said = {"role": "user", "parts": [{"text": f"session {i} fact {t}: I like item {i * TURNS + t}"}]}
            events.append(
                {"id": f"e{i}-{t}", "invocationId": f"i{t}", "author": "user", "timestamp": ts, "content": said}
            )
            reply = {"role": "model", "parts": [{"text": f"noted {t}"}]}
            events.append(
                {"id": f"r{i}-{t}", "invocationId": f"i{t}", "author": "agent", "timestamp": ts + 1, "content": reply}
            )
        body = {"id": f"s{i:05d}", "appName": APP, "userId": f"u{i // PER_USER:04d}", "state": {}, "events": events}
        body["lastUpdateTime"] = events[-1]["timestamp"]
        lines.append(json.dumps(body))
    return lines


def settings_for(backend: str, ltm_path: Path, index: str) -> Any:
    from veadk_mem.config import load_settings

    env = {"LONG_TERM_MEMORY_BACKEND": backend, "MODEL_EMBEDDING_PROVIDER": "hash", "LONG_TERM_MEMORY_INDEX": index}
    env["LONG_TERM_MEMORY_LOCAL_PATH"] = str(ltm_path)
    env["DATABASE_REDIS_URL"] = "redis://127.0.0.1:6379/12"
    return load_settings(environ=env).settings


async def build(db: str, lines_path: Path, settings: Any) -> int:
    """Import the sessions, save their memories by the configured (default) policy; memories saved."""
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.sessions.importer import import_file
    from veadk_mem.sessions.store import SessionFilter, SessionStore

    async with SessionStore(db, create=True) as store:
        await import_file(store, lines_path)
    saved = 0
    async with LongTermMemory.from_settings(settings) as ltm, SessionStore(db) as store:
        policy = ltm.resolve_policy(None)
        async for session in store.iter_sessions(SessionFilter(app=APP)):
            saved += (await ltm.add_session_to_memory(session, policy)).saved
    return saved


def chosen_keys(n: int) -> list[Any]:
    from veadk_mem.sessions.store import SessionKey

    return [SessionKey(APP, f"u{i // PER_USER:04d}", f"s{i:05d}") for i in range(n)]


async def delete_only(db: str, keys: list[Any]) -> int:
    from veadk_mem.sessions.delete_flow import delete_flow
    from veadk_mem.sessions.store import SessionStore

    async with SessionStore(db) as store:
        return len((await delete_flow(store, keys=keys)).sessions)


async def with_memories(db: str, keys: list[Any], settings: Any) -> Any:
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.ops.erasure import erase
    from veadk_mem.sessions.store import SessionStore

    async with LongTermMemory.from_settings(settings) as ltm, SessionStore(db) as store:
        return await erase(store, ltm, keys=keys)


def timed(coro: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = asyncio.run(coro)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def clean_redis(index: str) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=12)
    for key in client.scan_iter(f"*{index}*"):
        client.delete(key)
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--erase", type=int, default=100)
    parser.add_argument("--backends", default="local,redis")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vmem-bench-erasure-"))
    lines = work / "sessions.jsonl"
    lines.write_text("\n".join(session_lines(args.sessions)) + "\n")
    print(f"{args.sessions:,} sessions ({TURNS} user turns each), erase {args.erase:,}; load {os.getloadavg()[0]:.2f}")
    try:
        for backend in args.backends.split(","):
            index = f"bench{uuid.uuid4().hex[:8]}"
            settings = settings_for(backend, work / f"{backend}-ltm.db", index)
            base = work / f"{backend}.db"
            saved, wall, _ = timed(build(f"sqlite+aiosqlite:///{base}", lines, settings))
            print(f"{backend}: {saved:,} memories saved by the default policy in {wall:.1f} s")
            plain, erased = work / f"{backend}-plain.db", work / f"{backend}-erased.db"
            shutil.copy(base, plain)
            shutil.copy(base, erased)
            keys = chosen_keys(args.erase)
            n, w1, c1 = timed(delete_only(f"sqlite+aiosqlite:///{plain}", keys))
            report, w2, c2 = timed(with_memories(f"sqlite+aiosqlite:///{erased}", keys, settings))
            left = len(report.verification.left) if report.verification else "?"
            print(f"  session delete            {n:>5,} sessions   wall {w1:6.2f} s  cpu {c1:6.2f} s")
            print(
                f"  delete --with-memories    {report.deleted_sessions:>5,} sessions"
                f"   wall {w2:6.2f} s  cpu {c2:6.2f} s"
                f"  ({report.deleted_memories:,} memories deleted, {left} left)"
            )
            print(f"  ratio with/without: wall {w2 / w1:.1f}x, cpu {c2 / c1:.1f}x; load {os.getloadavg()[0]:.2f}")
            if backend == "redis":
                clean_redis(index)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
