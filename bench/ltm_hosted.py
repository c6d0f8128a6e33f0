"""Hosted long-term memory (viking, tos_context) against local servers: vmem next to VeADK, one run.

For each backend, against the local servers of the contract tests (tests/hosted_servers.py,
speaking VikingDB memory and TOS ContextBucket through the real SDKs):
1. HTTP requests to save one 20-event session (20 user text events, all kept by the
   default policy) in a fresh process, after a warm-up session created the collection
   or bucket; and to search once;
2. wall time of saving 100 such sessions: `vmem ltm save sessions.jsonl` (one process),
   and VeADK's `LongTermMemory(backend=...).add_session_to_memory` for each session (one
   process, import time included as for vmem), and the save loop alone (imports done).
VeADK runs with --veadk-python, a throwaway virtualenv holding veadk-python==1.1.19 and
tos 2.9.4b1, never vmem's own:
    python3 -m venv /tmp/veadk-ref && /tmp/veadk-ref/bin/pip install veadk-python==1.1.19
    /tmp/veadk-ref/bin/pip install --pre tos==2.9.4b1

Run: .venv/bin/python bench/ltm_hosted.py [--veadk-python /tmp/veadk-ref/bin/python] [--sessions 100]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hosted_servers import ACCOUNT, AK, SK, TosContextServer, VikingMemoryServer  # noqa: E402

APP, USER, EVENTS = "bench_app", "bench-user", 20
BUCKET = "bench-memory"
TOPICS = ["trains", "peanuts", "Lisbon", "window seats", "green tea", "jazz", "Hangzhou", "bicycles"]

VEADK_CHILD = r"""
import asyncio, json, sys, time
started = time.perf_counter()
from google.adk.sessions import Session
from veadk.memory.long_term_memory import LongTermMemory

backend, mode, path = sys.argv[1:4]
sessions = [Session.model_validate(json.loads(line)) for line in open(path) if line.strip()]

async def main():
    ltm = LongTermMemory(backend=backend, app_name=sys.argv[4])
    loop = time.perf_counter()
    if mode == "search":
        found = await ltm.search_memory(app_name=sys.argv[4], user_id=sessions[0].user_id, query="trains peanuts")
        count = len(found.memories)
    else:
        for session in sessions:
            await ltm.add_session_to_memory(session)
        count = len(sessions)
    return time.perf_counter() - loop, count

loop_seconds, count = asyncio.run(main())
print(json.dumps({"loop": loop_seconds, "count": count}))
"""


VMEM_CHILD = r"""
import asyncio, json, sys, time
from veadk_mem.config import load_settings
from veadk_mem.events import read_sessions
from veadk_mem.ltm.facade import LongTermMemory

sessions = list(read_sessions(sys.argv[1]))

async def main():
    ltm = LongTermMemory.from_settings(load_settings().settings)
    policy = ltm.resolve_policy()
    backend = ltm.backend_for(sessions[0].app_name)
    getattr(backend, "client", getattr(backend, "memory_client", None))()  # SDK imported before timing
    loop = time.perf_counter()
    for session in sessions:
        await ltm.add_session_to_memory(session, policy)
    took = time.perf_counter() - loop
    await ltm.close()
    return took

print(json.dumps({"loop": asyncio.run(main()), "count": len(sessions)}))
"""


def session(n: int) -> dict[str, Any]:
    """One session of EVENTS user text events."""
    return {
        "id": f"bench-session-{n:04d}",
        "appName": APP,
        "userId": USER,
        "state": {},
        "lastUpdateTime": 1764489600.0 + n,
        "events": [
            {
                "id": f"e{n}-{k}",
                "invocationId": f"i{n}-{k}",
                "author": "user",
                "timestamp": 1764489600.0 + n + k / 100,
                "content": {
                    "role": "user",
                    "parts": [{"text": f"Session {n} note {k}: I like {TOPICS[(n + k) % len(TOPICS)]}."}],
                },
            }
            for k in range(EVENTS)
        ],
    }


def write_jsonl(path: Path, sessions: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return path


def environment(work: Path, backend: str, server: Any) -> dict[str, str]:
    """A clean environment pointing vmem (and VeADK: same variable names) at the local server."""
    keep = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        HOME=str(work / "home"),
        XDG_CONFIG_HOME=str(work / "home" / ".config"),
        XDG_DATA_HOME=str(work / "home" / ".local" / "share"),
        NO_COLOR="1",
        VOLCENGINE_ACCESS_KEY=AK,
        VOLCENGINE_SECRET_KEY=SK,
        LONG_TERM_MEMORY_BACKEND=backend,
        LOGGING_LEVEL="ERROR",
    )
    if backend == "viking":
        env["DATABASE_VIKINGMEM_BASE_URL"] = server.url
    else:
        env.update(
            DATABASE_TOS_CONTEXT_ACCOUNT_ID=ACCOUNT,
            DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT="http://tos-control.test",
            DATABASE_TOS_CONTEXT_BUCKET_NAME=BUCKET,
            HTTP_PROXY=server.url,
            http_proxy=server.url,
        )
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took, done.stdout


def by_path(server: Any) -> str:
    counts = collections.Counter(r.path for r in server.requests)
    return ", ".join(f"{path} {n}" for path, n in counts.items())


def vmem_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "veadk_mem", *args]


def veadk_cmd(python: str, child: Path, backend: str, mode: str, path: Path) -> list[str]:
    return [python, str(child), backend, mode, str(path), APP]


def measure(backend: str, work: Path, files: dict[str, Path], veadk_python: str | None) -> list[dict[str, Any]]:
    """Requests for one session and one search, and the wall time of all sessions, for vmem and VeADK."""
    server_cls = VikingMemoryServer if backend == "viking" else TosContextServer
    child = work / "veadk_child.py"
    child.write_text(VEADK_CHILD)
    vmem_child = work / "vmem_child.py"
    vmem_child.write_text(VMEM_CHILD)
    tools: list[tuple[str, Any]] = [("vmem", None)]
    if veadk_python:
        tools.append(("VeADK 1.1.19", veadk_python))
    rows = []
    for tool, python in tools:

        def cmd(mode: str, path: Path, python: Any = python) -> list[str]:
            if python is None:
                if mode == "search":
                    return vmem_cmd("ltm", "search", "trains peanuts", "--user", USER, "--app", APP)
                return vmem_cmd("ltm", "save", str(path))
            return veadk_cmd(python, child, backend, mode, path)

        server = server_cls().start()
        try:
            env = environment(work, backend, server)
            run(cmd("save", files["warmup"]), env, work)
            server.requests.clear()
            run(cmd("save", files["one"]), env, work)
            save_requests, save_detail = len(server.requests), by_path(server)
            server.requests.clear()
            run(cmd("search", files["one"]), env, work)
            search_requests, search_detail = len(server.requests), by_path(server)
        finally:
            server.stop()
        server = server_cls().start()
        try:
            env = environment(work, backend, server)
            wall, out = run(cmd("save", files["many"]), env, work)
            many_requests = len(server.requests)
        finally:
            server.stop()
        server = server_cls().start()  # the save loop alone, imports done, on a fresh server
        try:
            env = environment(work, backend, server)
            if python is None:
                _, out = run([sys.executable, str(vmem_child), str(files["many"])], env, work)
            else:
                _, out = run(cmd("save", files["many"]), env, work)
            loop = json.loads(out.strip().splitlines()[-1])["loop"]
        finally:
            server.stop()
        rows.append(
            {
                "backend": backend,
                "tool": tool,
                "save_requests": save_requests,
                "save_detail": save_detail,
                "search_requests": search_requests,
                "search_detail": search_detail,
                "many_wall": wall,
                "many_loop": loop,
                "many_requests": many_requests,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--veadk-python", help="Python of a venv with veadk-python==1.1.19 and tos 2.9.4b1")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--backends", default="viking,tos_context")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "home").mkdir()
        files = {
            "warmup": write_jsonl(work / "warmup.jsonl", [session(9999)]),
            "one": write_jsonl(work / "one.jsonl", [session(0)]),
            "many": write_jsonl(work / "many.jsonl", [session(n) for n in range(1, args.sessions + 1)]),
        }
        rows: list[dict[str, Any]] = []
        for backend in args.backends.split(","):
            rows.extend(measure(backend, work, files, args.veadk_python))
    print(f"hosted long-term memory, local servers, {EVENTS}-event sessions, {args.sessions} sessions for wall time")
    header = f"{'backend':<12} {'tool':<13} {'save 1 session':>15} {'search':>7} {'save N: requests':>17} {'wall s':>7}"
    print(header + f" {'loop s':>7}")
    for r in rows:
        loop = f"{r['many_loop']:.2f}"
        print(
            f"{r['backend']:<12} {r['tool']:<13} {r['save_requests']:>15} {r['search_requests']:>7} "
            f"{r['many_requests']:>17} {r['many_wall']:>7.2f} {loop:>7}"
        )
    print("\nrequests by path")
    for r in rows:
        print(f"  {r['backend']} {r['tool']}: save [{r['save_detail']}]  search [{r['search_detail']}]")


if __name__ == "__main__":
    main()
