"""Long-term memory save and search, this tree beside an earlier revision, in one run (ratios).

For each backend that runs here (local sqlite, Redis at 127.0.0.1:6379 without the search
module, and the local servers of opensearch, mem0 and viking from tests/), a fresh process
per measurement saves N memories in batches of 500 through the facade (hash embedder, 64-d)
and then runs Q searches; it reports the CPU time (the process's, so an in-process server
counts on both sides alike) and the wall time of each phase. The earlier revision is
`git archive`d into a temporary directory and measured from there; the two sides alternate
round by round and the table gives the medians and new/old. Made for #40 (one failure
path: a tenacity attempt around every store call): nothing should be more than 10% slower.

Run: PYTHONPATH=$PWD .venv/bin/python bench/ltm_before_after.py [--before 5fdd7a4] [--rounds 5]
     [--count 2000] [--queries 50] [--backends local,redis,opensearch,mem0,viking]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("save_cpu", "save_wall", "search_cpu", "search_wall")


def _environment(backend: str, stack: list[Any]) -> dict[str, str]:
    """The settings' environment for one backend, starting its local server when it has one."""
    if backend == "local":
        return {"LONG_TERM_MEMORY_LOCAL_PATH": str(Path(tempfile.mkdtemp()) / "ltm.db")}
    if backend == "redis":
        return {"LONG_TERM_MEMORY_BACKEND": "redis", "DATABASE_REDIS_URL": "redis://127.0.0.1:6379/0"}
    if backend == "opensearch":
        import opensearch_server

        server = opensearch_server.start()
        stack.append(server.stop)
        return {
            "LONG_TERM_MEMORY_BACKEND": "opensearch",
            "DATABASE_OPENSEARCH_HOST": "127.0.0.1",
            "DATABASE_OPENSEARCH_PORT": str(server.port),
            "DATABASE_OPENSEARCH_USE_SSL": "false",
        }
    if backend == "mem0":
        from mem0_server import Mem0Server

        platform = Mem0Server("bench-key").__enter__()
        stack.append(lambda: platform.__exit__(None, None, None))
        return {
            "LONG_TERM_MEMORY_BACKEND": "mem0",
            "DATABASE_MEM0_API_KEY": "bench-key",
            "DATABASE_MEM0_BASE_URL": platform.url,
            "DATABASE_MEM0_INFER": "false",
        }
    if backend == "viking":
        from hosted_servers import AK, SK, VikingMemoryServer

        viking = VikingMemoryServer().start()
        stack.append(viking.stop)
        return {
            "LONG_TERM_MEMORY_BACKEND": "viking",
            "DATABASE_VIKINGMEM_BASE_URL": viking.url,
            "VOLCENGINE_ACCESS_KEY": AK,
            "VOLCENGINE_SECRET_KEY": SK,
        }
    raise SystemExit(f"unknown backend {backend!r}")


def worker(tree: str, backend: str, count: int, queries: int) -> None:
    """One measurement in this process, against the veadk_mem of `tree`; prints one JSON line."""
    import asyncio

    sys.path[:0] = [tree, str(ROOT / "tests")]
    import veadk_mem

    assert veadk_mem.__file__ and veadk_mem.__file__.startswith(tree), veadk_mem.__file__
    from veadk_mem.config import load_settings
    from veadk_mem.embedding.hash import HashEmbedder
    from veadk_mem.ltm.base import MemoryRecord
    from veadk_mem.ltm.facade import LongTermMemory

    stack: list[Any] = []
    os.environ.update(_environment(backend, stack))
    index, user = f"bench{uuid.uuid4().hex[:8]}", "bench-user"
    records = [
        MemoryRecord(
            text=json.dumps({"role": "user", "parts": [{"text": f"memory {i} about city {i * 7919 % 10007}"}]}),
            user_id=user,
            app_name="bench",
            session_id=f"s{i // 20}",
            event_id=f"e{i}",
            author="user",
        )
        for i in range(count)
    ]

    async def measure() -> dict[str, float]:
        ltm = LongTermMemory.from_settings(load_settings().settings, embedder=HashEmbedder(dim=64))
        ltm.index = index
        c0, w0 = time.process_time(), time.perf_counter()
        for start in range(0, count, 500):
            await ltm.save_records(user, records[start : start + 500], index)
        c1, w1 = time.process_time(), time.perf_counter()
        for i in range(queries):
            await ltm.search_memory(app_name=None, user_id=user, query=f"city {i}", top_k=5)
        c2, w2 = time.process_time(), time.perf_counter()
        await ltm.close()
        return {"save_cpu": c1 - c0, "save_wall": w1 - w0, "search_cpu": c2 - c1, "search_wall": w2 - w1}

    figures = asyncio.run(measure())
    if backend == "redis":
        import redis

        client = redis.Redis(host="127.0.0.1", port=6379)
        for key in client.scan_iter(f"veadk-ltm/{index}/*", count=1000):
            client.delete(key)
    for stop in stack:
        stop()
    print(json.dumps(figures), flush=True)
    os._exit(0)  # the servers' threads need not wind down


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="5fdd7a4", help="the revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--backends", default="local,redis,opensearch,mem0,viking")
    parser.add_argument("--worker", nargs=2, metavar=("TREE", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.count, args.queries)
        return
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory(prefix="vmem-before-") as before:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "veadk_mem"], capture_output=True)
        if archive.returncode:
            raise SystemExit(f"git archive {args.before}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", before], input=archive.stdout, check=True)
        trees = {"old": before, "new": str(ROOT)}
        runs: dict[tuple[str, str], list[dict[str, float]]] = {(t, b): [] for t in trees for b in backends}
        for round_ in range(args.rounds):
            for backend in backends:
                for side in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                    command = [sys.executable, __file__, "--worker", trees[side], backend]
                    command += ["--count", str(args.count), "--queries", str(args.queries)]
                    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=before)
                    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                    if not lines:
                        raise SystemExit(f"{side} {backend} failed: {done.stderr.strip()[-400:]}")
                    runs[(side, backend)].append(json.loads(lines[-1]))
    rounds = f"medians of {args.rounds} rounds, {args.before} beside this tree"
    print(f"{args.count} memories saved, {args.queries} searches; {rounds}")
    print(f"{'backend':<11} {'figure':<12} {'before s':>9} {'after s':>9} {'after/before':>13}")
    for backend in backends:
        for metric in METRICS:
            old = statistics.median(r[metric] for r in runs[("old", backend)])
            new = statistics.median(r[metric] for r in runs[("new", backend)])
            print(f"{backend:<11} {metric:<12} {old:9.3f} {new:9.3f} {new / old:13.2f}")


if __name__ == "__main__":
    main()
