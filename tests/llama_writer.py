"""Run by llama-index in its own venv (.venv-llama): VeADK's reference writer and reader.

VeADK 1.1.19 keeps long-term memory in Redis and OpenSearch through llama-index's
`RedisVectorStore` and `OpensearchVectorClient`. Their pins (redisvl's redis-py 5.3,
numpy 1.26) clash with what a user of vmem gets, so they run here, in a venv of their
own, driven by the tests (tests/llama_venv.py) as a subprocess. Nothing here imports vmem.

Protocol, one JSON object per line. The test writes a request on stdin:
  {"store": "redis", "url": ..., "name": INDEX_NAME, "dim": D, "op": "save", "texts": [...]}
  {"store": "opensearch", "port": P, "auth": [user, password], "ssl": bool, "cert_path": str,
   "name": INDEX_NAME, "dim": D, "op": "search", "query": ..., "top_k": K}
Whenever llama-index wants vectors this writes `{"embed": [text, ...]}` on stdout and reads
`{"vectors": [[...], ...]}` back from stdin: the test's embedder computes them, so both
sides use one embedder. It answers `{"result": ...}` (null for a save, the retrieved
texts for a search) or `{"error": traceback}`, then reads the next request, until stdin ends.

bench/ltm_backends.py times VeADK's path with two more ops, on the same store arguments:
  "table": NPZ   an .npz of `texts` and `vectors` rows: those texts embed from it, not the pipe
  "op": "insert", "texts": [...]   one node per `insert_nodes`, vector from the table (what
                 VeADK's save_memory does after its splitter); result: seconds taken here
  "op": "retrieve", "queries": [...], "top_k": K   `as_retriever(...).retrieve` per query;
                 result: [[seconds, hits], ...], timed here so the pipe is not counted
The index (and its store client) is kept between requests of one process.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

# llama-index and its dependencies may print: the protocol keeps the real stdout to itself.
PROTOCOL_OUT = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
sys.stdout = sys.stderr


def send(message: dict[str, Any]) -> None:
    PROTOCOL_OUT.write(json.dumps(message) + "\n")
    PROTOCOL_OUT.flush()


class Closed(Exception):
    """The test closed the pipe: no more requests."""


def receive() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        raise Closed
    return json.loads(line)  # type: ignore[no-any-return]


# Vectors given up front by an .npz ("table"), looked up before asking over the pipe.
TABLE: dict[str, Any] = {}  # text -> its numpy row, made a list only when used
LOADED: set[str] = set()


def load_table(path: str) -> None:
    import numpy as np

    if path not in LOADED:
        with np.load(path) as data:
            TABLE.update(zip(data["texts"].tolist(), data["vectors"], strict=True))
        LOADED.add(path)


def embed(texts: list[str]) -> list[list[float]]:
    """Vectors from the table, else from the test's embedder over the pipe."""
    if all(text in TABLE for text in texts):
        return [TABLE[text].tolist() for text in texts]
    send({"embed": texts})
    return receive()["vectors"]  # type: ignore[no-any-return]


def embed_model() -> Any:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class PipeEmbedding(BaseEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            return embed([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return embed(texts)

        def _get_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0]

    return PipeEmbedding()


def redis_store(request: dict[str, Any]) -> Any:
    """VeADK's `_create_vector_index` (redis_backend.py): its IndexSchema for `veadk-ltm/{index}/{user}`."""
    from llama_index.vector_stores.redis import RedisVectorStore
    from redis import Redis
    from redisvl.schema import IndexSchema

    name = request["name"]
    schema = IndexSchema.from_dict(
        {
            "index": {"name": name, "prefix": name, "key_separator": "_"},
            "fields": [
                {"name": "id", "type": "tag", "attrs": {"sortable": False}},
                {"name": "doc_id", "type": "tag", "attrs": {"sortable": False}},
                {"name": "text", "type": "text", "attrs": {"weight": 1.0}},
                {
                    "name": "vector",
                    "type": "vector",
                    "attrs": {"dims": request["dim"], "algorithm": "flat", "distance_metric": "cosine"},
                },
            ],
        }
    )
    return RedisVectorStore(schema=schema, redis_client=Redis.from_url(request["url"]))


def opensearch_store(request: dict[str, Any]) -> Any:
    """VeADK's opensearch_backend.py: an OpensearchVectorClient with exactly its arguments."""
    from llama_index.vector_stores.opensearch import OpensearchVectorClient, OpensearchVectorStore

    cert_path = request.get("cert_path") or ""
    client = OpensearchVectorClient(
        endpoint="127.0.0.1",
        port=request["port"],
        http_auth=tuple(request["auth"]),
        use_ssl=bool(request.get("ssl")),
        verify_certs=bool(cert_path),
        ca_certs=cert_path,
        dim=request["dim"],
        index=request["name"],
    )
    return OpensearchVectorStore(client=client)


INDEXES: dict[str, Any] = {}


def vector_index(request: dict[str, Any]) -> Any:
    """The request's store as a `VectorStoreIndex`, made once per store and index name."""
    from llama_index.core import VectorStoreIndex

    key = json.dumps([request["store"], request.get("url"), request.get("port"), request["name"]])
    if key not in INDEXES:
        store = redis_store(request) if request["store"] == "redis" else opensearch_store(request)
        INDEXES[key] = VectorStoreIndex.from_vector_store(vector_store=store, embed_model=embed_model())
    return INDEXES[key]


def insert(index: Any, texts: list[str]) -> float:
    """One node per memory with its vector set, one `insert_nodes` each; the seconds it took."""
    from llama_index.core.schema import Document, NodeRelationship, TextNode

    nodes = []
    for text in texts:
        node = TextNode(text=text, embedding=TABLE[text].tolist())
        node.relationships[NodeRelationship.SOURCE] = Document(text=text).as_related_node_info()
        nodes.append(node)
    started = time.perf_counter()
    for node in nodes:
        index.insert_nodes([node])
    return time.perf_counter() - started


def retrieve(index: Any, queries: list[str], top_k: int) -> list[tuple[float, int]]:
    """VeADK's search, `as_retriever(similarity_top_k=K).retrieve`, timed per query."""
    retriever = index.as_retriever(similarity_top_k=top_k)
    timings = []
    for query in queries:
        started = time.perf_counter()
        hits = retriever.retrieve(query)
        timings.append((time.perf_counter() - started, len(hits)))
    return timings


def serve(request: dict[str, Any]) -> Any:
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter

    if request.get("table"):
        load_table(request["table"])
    index = vector_index(request)
    if request["op"] == "insert":
        return insert(index, request["texts"])
    if request["op"] == "retrieve":
        return retrieve(index, request["queries"], request["top_k"])
    if request["op"] == "save":
        for text in request["texts"]:  # as VeADK's add: split, then insert the nodes
            nodes = SentenceSplitter(chunk_size=512, chunk_overlap=50).get_nodes_from_documents([Document(text=text)])
            index.insert_nodes(nodes)
        return None
    if request["op"] == "search":
        retriever = index.as_retriever(similarity_top_k=request["top_k"])
        return [node.text for node in retriever.retrieve(request["query"])]
    raise ValueError(f"unknown op {request['op']!r}")


def main() -> None:
    while True:
        try:
            request = receive()
        except Closed:
            return
        try:
            send({"result": serve(request)})
        except Closed:
            raise SystemExit("the test closed the pipe mid-request") from None
        except BaseException:
            send({"error": traceback.format_exc()})
            raise SystemExit(1) from None


if __name__ == "__main__":
    main()
