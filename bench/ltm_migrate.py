"""Long-term memory export / import rates and the export's memory, one run.

1. Export of N memories (default 100,000) of a local store with --vectors to a file:
   memories/s and the process's peak RSS above its start (target: flat, under 100 MB).
2. Import of that file into a new local store with the vectors reused: memories/s.
3. With --redis-url (a Redis with RediSearch, e.g. the test server of tests/redis_stack.py), the
   same import into the redis backend.
4. Embedding calls when the target's model differs (the hash embedder at another
   dimension): texts per call, never one call per memory.

Run: .venv/bin/python bench/ltm_migrate.py [--memories 100000] [--redis-url redis://127.0.0.1:PORT]
Each step runs in its own process so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DIM = 384
HERE = Path(__file__).resolve()


def rss_mb() -> float:
    """Current resident set size in MB (Linux)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build(path: Path, n: int) -> None:
    """A local store of n memories of 20 users in one index, written straight into sqlite."""
    import asyncio

    import numpy as np

    from veadk_mem.embedding.hash import HashEmbedder
    from veadk_mem.ltm.backends.local import LocalBackend
    from veadk_mem.ltm.base import MemoryRecord, content_hash

    backend = LocalBackend("bench_app", embedder_factory=lambda _m: HashEmbedder(DIM), local_path=str(path))
    asyncio.run(backend.save("u0", [MemoryRecord(text="seed", user_id="u0")]))  # creates the index row
    rng = np.random.default_rng(0)
    conn = sqlite3.connect(path)
    conn.execute("BEGIN")
    for start in range(0, n, 10_000):
        vectors = rng.standard_normal((min(10_000, n - start), DIM), dtype=np.float32)
        rows = []
        for offset, vector in enumerate(vectors):
            i = start + offset
            text = json.dumps({"role": "user", "parts": [{"text": f"memory {i}: I like topic {i % 977} a lot"}]})
            rows.append(
                (f"m{i}", "bench_app", f"u{i % 20}", "bench_app", f"s{i // 10}", f"e{i}", "user", text,
                 content_hash(text), f"hash-v1-{DIM}", DIM, 1, 1.7e9 + i, vector.tobytes())
            )  # fmt: skip
        conn.executemany(
            "INSERT OR IGNORE INTO memories (id, index_name, user_id, app_name, session_id, event_id, author, "
            "text, content_hash, model, dim, chunks, created_at, vector) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
    conn.execute("COMMIT")
    conn.close()


def child_export(store: str, out: str) -> dict[str, Any]:
    import asyncio

    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.ltm.transfer import ExportScope, atomic_output, dumps, export_lines

    settings = VmemSettings()
    settings.long_term_memory.local_path = store
    settings.model.embedding.provider = "hash"
    ltm = LongTermMemory.from_settings(settings)
    ltm.backend_for(index="bench_app").embedder  # noqa: B018  (load before the clock)
    start_rss = rss_mb()

    async def go() -> int:
        count = 0
        with atomic_output(out) as handle:
            async for line in export_lines(ltm, ExportScope(all_users=True), vectors=True):
                handle.write(dumps(line) + "\n")
                count += 1
        return count - 1

    started = time.perf_counter()
    count = asyncio.run(go())
    took = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"memories": count, "seconds": took, "per_s": count / took, "rss_above_start_mb": peak - start_rss}


def child_import(file: str, backend: str, target: str, dim: int) -> dict[str, Any]:
    import asyncio

    from veadk_mem.config import VmemSettings
    from veadk_mem.embedding.hash import HashEmbedder
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.ltm.transfer import import_records, open_export

    class Counting(HashEmbedder):
        calls = 0
        texts = 0

        def embed_batch(self, texts: list[str]) -> Any:
            Counting.calls += 1
            Counting.texts += len(texts)
            return super().embed_batch(texts)

    settings = VmemSettings()
    settings.long_term_memory.backend = backend  # type: ignore[assignment]
    if backend == "local":
        settings.long_term_memory.local_path = target
    else:
        from pydantic import SecretStr

        settings.database.redis.url = SecretStr(target)
    ltm = LongTermMemory.from_settings(settings, embedder=Counting(dim))
    started = time.perf_counter()
    export = open_export(file)
    checked = time.perf_counter() - started

    async def go() -> Any:
        try:
            return await import_records(ltm, export.records())
        finally:
            await ltm.close()

    summary = asyncio.run(go())
    took = time.perf_counter() - started
    return {
        "saved": summary.saved,
        "reused": summary.reused_vectors,
        "reembedded": summary.reembedded,
        "failed": summary.failed,
        "seconds": took,
        "check_seconds": checked,
        "per_s": summary.read / took,
        "embed_calls": Counting.calls,
        "embedded": Counting.texts,
    }


def run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(HERE), "--child", *args], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--reembed", type=int, default=10_000, help="memories in the re-embedding step")
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        result = child_export(*rest) if kind == "export" else child_import(rest[0], rest[1], rest[2], int(rest[3]))
        print(json.dumps(result))
        return
    tmp = Path(tempfile.mkdtemp(prefix="vmem-bench-migrate-"))
    try:
        store, file = tmp / "src.db", tmp / "export.jsonl"
        build(store, args.memories)
        exp = run_child("export", str(store), str(file))
        size = file.stat().st_size / 2**20
        print(
            f"export {exp['memories']:,} memories with vectors: {exp['per_s']:,.0f} memories/s "
            f"({exp['seconds']:.1f} s, {size:.0f} MB file), peak RSS {exp['rss_above_start_mb']:.0f} MB above start",
            flush=True,
        )
        imp = run_child("import", str(file), "local", str(tmp / "dst.db"), str(DIM))
        print(
            f"import local -> local, vectors reused: {imp['per_s']:,.0f} memories/s ({imp['seconds']:.1f} s, "
            f"of which {imp['check_seconds']:.1f} s checking the file; {imp['reused']:,} reused, "
            f"{imp['embed_calls']} embedding calls)",
            flush=True,
        )
        if args.redis_url:
            red = run_child("import", str(file), "redis", args.redis_url, str(DIM))
            print(
                f"import local -> redis, vectors reused: {red['per_s']:,.0f} memories/s ({red['seconds']:.1f} s; "
                f"{red['reused']:,} reused, {red['failed']} failed)",
                flush=True,
            )
        small = tmp / "small.jsonl"
        with file.open() as src, small.open("w") as dst:
            for i, line in enumerate(src):
                if i > args.reembed:
                    break
                dst.write(line)
        emb = run_child("import", str(small), "local", str(tmp / "other.db"), "64")
        print(
            f"import into another model (hash 64-d): {emb['reembedded']:,} re-embedded in {emb['embed_calls']} "
            f"embedding calls ({emb['embedded'] / max(emb['embed_calls'], 1):.0f} texts per call), "
            f"{emb['per_s']:,.0f} memories/s",
            flush=True,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
