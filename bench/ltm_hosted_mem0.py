"""Hosted long-term memory (mem0, openviking): HTTP requests and save wall time, next to VeADK.

Against the local servers the contract tests use (`tests/mem0_server.py`,
`tests/openviking_server.py`), per backend, one run, side by side:

1. HTTP requests to save one 20-event session (10 user and 10 assistant text events,
   the default policy) and to search once, counted at the server: vmem's backend and
   VeADK 1.1.19's (`LongTermMemory.add_session_to_memory` / `search_memory`).
2. Wall time of `vmem ltm save` for 100 such sessions (one process, imports included)
   next to VeADK saving the same 100 sessions in one process (imports included).

The servers answer at once and the openviking server's extraction task ends at the first
poll, so the times are client cost: SDK import, request building, round trips on loopback.

Run: .venv/bin/python bench/ltm_hosted_mem0.py --veadk-python /tmp/veadk-ref/bin/python
(a venv with veadk-python==1.1.19, mem0ai==1.0.11 and openviking-sdk; without it only
vmem's side is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from mem0_server import Mem0Server  # noqa: E402
from openviking_server import OpenvikingServer  # noqa: E402

APP, USER = "bench_app", "bench-user"
MEM0_KEY, OV_KEY, OV_USER = "m0-bench-key", "ov-bench-key", "bench-owner"

VEADK_SCRIPT = """
import asyncio, json, sys, time
started = time.perf_counter()
from google.adk.sessions import Session
from veadk.memory.long_term_memory import LongTermMemory

mode, backend, path = sys.argv[1:4]
ltm = LongTermMemory(backend=backend, app_name="bench_app")

async def main():
    if mode == "search":
        await ltm.search_memory(app_name="bench_app", user_id="bench-user", query="fact 3 of session 0")
        return
    for line in open(path):
        await ltm.add_session_to_memory(Session.model_validate(json.loads(line)))

asyncio.run(main())
print(json.dumps({"seconds": time.perf_counter() - started}))
"""


def session(index: int, events: int = 20) -> dict[str, Any]:
    """A session of alternating user and assistant text events."""
    out = []
    for i in range(events):
        user = i % 2 == 0
        out.append(
            {
                "id": f"e-{index}-{i}",
                "invocationId": f"inv-{index}-{i // 2}",
                "author": "user" if user else "bench_agent",
                "timestamp": 1764403200.0 + index * 100 + i,
                "content": {
                    "role": "user" if user else "model",
                    "parts": [{"text": f"{'remember' if user else 'noted'} fact {i} of session {index}"}],
                },
            }
        )
    return {"id": f"s-{index}", "appName": APP, "userId": USER, "state": {}, "events": out, "lastUpdateTime": 0.0}


def write_sessions(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps(session(i)) + "\n" for i in range(count)))
    return path


def env_for(backend: str, url: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "LONG_TERM_MEMORY_", "VMEM_"))}
    env.update(HOME=str(home), MEM0_TELEMETRY="False", LONG_TERM_MEMORY_BACKEND=backend, NO_COLOR="1")
    if backend == "mem0":
        env.update(DATABASE_MEM0_API_KEY=MEM0_KEY, DATABASE_MEM0_BASE_URL=url)
    else:
        env.update(DATABASE_OPENVIKING_URL=url, DATABASE_OPENVIKING_API_KEY=OV_KEY, DATABASE_OPENVIKING_USER_ID=OV_USER)
    return env


def vmem(args: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "vmem"), *args], env=env, cwd=cwd, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"vmem {' '.join(args)} failed: {done.stderr.decode()[-400:]}")
    return time.perf_counter() - started


def veadk(python: str, mode: str, backend: str, path: Path, env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([python, "-c", VEADK_SCRIPT, mode, backend, str(path)], env=env, cwd=cwd, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"VeADK {mode} on {backend} failed: {done.stderr.decode()[-600:]}")
    return time.perf_counter() - started


def requests_of(server: Any) -> int:
    return len(server.state.requests)


def measure(backend: str, veadk_python: str | None, count: int, work: Path) -> list[dict[str, Any]]:
    one = write_sessions(work / "one.jsonl", 1)
    many = write_sessions(work / f"{count}.jsonl", count)
    rows = []
    sides = [("vmem", None)] + ([("VeADK 1.1.19", veadk_python)] if veadk_python else [])
    for side, python in sides:
        home = work / f"home-{backend}-{side[:4]}"
        home.mkdir(exist_ok=True)
        server: Any = Mem0Server(MEM0_KEY) if backend == "mem0" else OpenvikingServer({OV_KEY: OV_USER})
        if backend == "openviking":
            server.state.task_polls = 0
        with server:
            env = env_for(backend, server.url, home)
            before = requests_of(server)
            if python is None:
                vmem(["ltm", "save", str(one)], env, work)
            else:
                veadk(python, "save", backend, one, env, work)
            save_requests = requests_of(server) - before
            before = requests_of(server)
            if python is None:
                vmem(["ltm", "search", "fact 3 of session 0", "-u", USER], env, work)
            else:
                veadk(python, "search", backend, one, env, work)
            search_requests = requests_of(server) - before
        with Mem0Server(MEM0_KEY) if backend == "mem0" else OpenvikingServer({OV_KEY: OV_USER}) as fresh:
            if backend == "openviking":
                fresh.state.task_polls = 0  # type: ignore[attr-defined]
            env = env_for(backend, fresh.url, home)
            if python is None:
                seconds = vmem(["ltm", "save", str(many)], env, work)
            else:
                seconds = veadk(python, "save", backend, many, env, work)
            stored = len(fresh.state.memories)
            total_requests = requests_of(fresh)
        rows.append(
            {
                "backend": backend,
                "client": side,
                "save_20_events": save_requests,
                "search": search_requests,
                f"save_{count}_sessions_s": round(seconds, 2),
                f"requests_{count}_sessions": total_requests,
                "memories_stored": stored,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--veadk-python", help="python of a venv with veadk-python 1.1.19, mem0ai 1.0.11")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--backends", default="mem0,openviking")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vmem-bench-hosted-") as tmp:
        rows: list[dict[str, Any]] = []
        for backend in args.backends.split(","):
            rows.extend(measure(backend, args.veadk_python, args.sessions, Path(tmp)))
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))


if __name__ == "__main__":
    main()
