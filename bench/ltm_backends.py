"""Redis and OpenSearch long-term memory, vmem next to the llama-index path VeADK uses, one run.

1. Redis 8 + RediSearch (the test wheels, tests/redis_stack.py, on a free port): saving
   N memories (memories/s) through vmem's redis backend and through llama-index's
   `RedisVectorStore` with VeADK's schema, inserting one memory per `insert_nodes` call as
   VeADK's `save_memory` does; the same precomputed vectors for both (embedding excluded,
   the splitter excluded on VeADK's side), each into its own user index on the same server.
   Then search at N memories: the median of 20 queries, vmem's `search` vs VeADK's
   retriever (`as_retriever(similarity_top_k=5).retrieve`), query vectors precomputed,
   taken alternately (one of ours, one of theirs) after both saves.
2. OpenSearch contract server (tests/opensearch_server.py): HTTP requests per 1,000
   memories saved, vmem's backend vs VeADK's path through `OpensearchVectorClient`.

llama-index runs in its own venv (`.venv-llama/` at the repository root, or
$VMEM_LLAMA_VENV), driven through tests/llama_writer.py as a subprocess; its timings are
taken inside that process, so the pipe is not counted. The vectors reach it once, as an .npz.
Redis 8 + RediSearch comes from `.venv-redis8/` (or $VMEM_REDIS8_VENV). `.ci/test` makes both.

Run: PYTHONPATH=$PWD .venv/bin/python bench/ltm_backends.py [--count 10000] [--dim 2048]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "tests"))

import llama_venv  # noqa: E402
import opensearch_server  # noqa: E402
import redis_stack  # noqa: E402

from veadk_mem.config import load_settings  # noqa: E402
from veadk_mem.embedding.base import Embedder  # noqa: E402
from veadk_mem.ltm.base import MemoryRecord  # noqa: E402

INDEX, TOP_K, QUERIES = "bench", 5, 20


class Precomputed(Embedder):
    """Looks vectors up by text: both sides get exactly the same vectors, and no model runs."""

    def __init__(self, table: dict[str, np.ndarray[Any, Any]], dim: int) -> None:
        self.table, self.dim, self.name = table, dim, f"precomputed-{dim}"
        self.batch_size, self.max_chars = 1000, 1_000_000

    def embed_batch(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return np.stack([self.table[t] for t in texts])


def corpus(count: int, dim: int) -> tuple[list[str], list[str], dict[str, np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(7)
    template = '{{"role": "user", "parts": [{{"text": "memory number {i} about topic {t}"}}]}}'
    texts = [template.format(i=i, t=i % 97) for i in range(count)]
    queries = [f"query {i}" for i in range(QUERIES)]
    vectors = rng.standard_normal((count + QUERIES, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return texts, queries, dict(zip(texts + queries, vectors, strict=True))


def reference(table: dict[str, np.ndarray[Any, Any]], workdir: str) -> tuple[llama_venv.Writer, str]:
    """A llama_writer.py process in the llama-index venv, and the .npz of every vector it may need."""
    if reason := llama_venv.missing():
        raise SystemExit(f"bench/ltm_backends.py: {reason}")
    path = str(Path(workdir) / "vectors.npz")
    np.savez(path, texts=np.array(list(table)), vectors=np.stack(list(table.values())))
    return llama_venv.Writer(llama_venv.venv() / "bin" / "python"), path


def bench_redis(count: int, dim: int) -> None:
    from veadk_mem.ltm.backends.redis import RedisBackend

    texts, queries, table = corpus(count, dim)
    with tempfile.TemporaryDirectory(prefix="vmem-bench-") as workdir:
        writer, vectors = reference(table, workdir)
        server = redis_stack.start()
        try:
            settings = load_settings(environ={"DATABASE_REDIS_URL": server.url}).settings
            embedder = Precomputed(table, dim)
            backend = RedisBackend(INDEX, settings=settings, embedder_factory=lambda _m: embedder)
            records = [MemoryRecord(text=t, user_id="vmem") for t in texts]
            # VeADK's `_create_vector_index` for its user, `veadk-ltm/{index}/{user}`
            ref = {"store": "redis", "url": server.url, "name": f"veadk-ltm/{INDEX}/veadk", "dim": dim}
            ref_save_s = writer.request({**ref, "table": vectors, "op": "insert", "texts": texts})

            def ref_search(query: str) -> float:
                [(took, hits)] = writer.request({**ref, "op": "retrieve", "queries": [query], "top_k": TOP_K})
                assert hits == TOP_K, hits
                return float(took)

            async def ours() -> tuple[float, list[float], list[float]]:
                started = time.perf_counter()
                await backend.save("vmem", records)
                took = time.perf_counter() - started
                await backend.search("vmem", queries[0], TOP_K)  # warm-up, both
                ref_search(queries[0])
                times, ref_times = [], []
                for query in queries:  # alternating, so both see the same server and machine load
                    t0 = time.perf_counter()
                    hits = await backend.search("vmem", query, TOP_K)
                    times.append(time.perf_counter() - t0)
                    assert len(hits) == TOP_K
                    ref_times.append(ref_search(query))
                await backend.close()
                return took, times, ref_times

            save_s, search_times, ref_times = asyncio.run(ours())
        finally:
            writer.close()
            server.stop()
    ours_rate, ref_rate = count / save_s, count / ref_save_s
    ours_ms, ref_ms = statistics.median(search_times) * 1000, statistics.median(ref_times) * 1000
    print(f"Redis 8 + RediSearch, {count:,} memories of {dim}-d")
    print(f"  save:   vmem {ours_rate:,.0f} memories/s   llama-index (VeADK) {ref_rate:,.0f} memories/s   "
          f"{ours_rate / ref_rate:.1f}x")  # fmt: skip
    print(f"  search: vmem {ours_ms:.2f} ms   llama-index (VeADK) {ref_ms:.2f} ms   median of {QUERIES}, top {TOP_K}")


def bench_opensearch(dim: int) -> None:
    count = 1000
    texts, _queries, table = corpus(count, dim)
    with tempfile.TemporaryDirectory(prefix="vmem-bench-") as workdir:
        writer, vectors = reference(table, workdir)
        try:
            ours_requests, ours_bulk, ref_requests = count_opensearch(writer, vectors, texts, table, dim)
        finally:
            writer.close()
    print(f"OpenSearch contract server, {count:,} memories of {dim}-d saved")
    print(f"  HTTP requests: vmem {ours_requests} ({ours_bulk} _bulk)   llama-index (VeADK) {ref_requests}")


def count_opensearch(
    writer: llama_venv.Writer, vectors: str, texts: list[str], table: dict[str, np.ndarray[Any, Any]], dim: int
) -> tuple[int, int, int]:
    """HTTP requests for saving `texts`: vmem's (all, _bulk) and VeADK's through `OpensearchVectorClient`."""
    from veadk_mem.ltm.backends.opensearch import OpensearchBackend

    server = opensearch_server.start()
    try:
        env = {"DATABASE_OPENSEARCH_PORT": str(server.port), "DATABASE_OPENSEARCH_USE_SSL": "false"}
        settings = load_settings(environ=env).settings
        embedder = Precomputed(table, dim)
        backend = OpensearchBackend(INDEX, settings=settings, embedder_factory=lambda _m: embedder)

        async def ours() -> None:
            await backend.save("vmem", [MemoryRecord(text=t, user_id="vmem") for t in texts])
            await backend.close()

        before = len(server.cluster.requests)
        asyncio.run(ours())
        ours_requests = len(server.cluster.requests) - before
        ours_bulk = sum(1 for r in server.cluster.requests[before:] if r[1].endswith("_bulk"))
        # VeADK's opensearch_backend.py arguments; the client's index creation is not counted
        ref = {"store": "opensearch", "port": server.port, "auth": ["", ""], "ssl": False, "cert_path": "",
               "name": f"{INDEX}_veadk", "dim": dim}  # fmt: skip
        writer.request({**ref, "table": vectors, "op": "insert", "texts": []})
        before = len(server.cluster.requests)
        writer.request({**ref, "op": "insert", "texts": texts})
        ref_requests = len(server.cluster.requests) - before
    finally:
        server.stop()
    return ours_requests, ours_bulk, ref_requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=2048)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    bench_redis(args.count, args.dim)
    bench_opensearch(args.dim)


if __name__ == "__main__":
    main()
