"""A local HTTP(S) server answering what opensearch-py sends, for contract tests and bench/.

OpenSearch cannot run here. This speaks the documented REST API for what the opensearch
backend and llama-index's OpensearchVectorClient use: `GET /`, index create / get /
exists / mapping, `_bulk`, `_refresh`, `_search` (`match_all`, `terms`/`term`, `knn`
and `match`, with `size`/`from`), `_count` and `_delete_by_query`, and 404 / 400 errors in
OpenSearch's error shape. A `match` scores by how often the query's terms occur (words;
Han characters one by one, as the standard analyzer splits them), not by BM25: enough to
check the request and what a client does with the ranking, not OpenSearch's scores.
It computes the k-NN answer itself, exactly, scoring with the
space type the mapping names (`l2`: 1 / (1 + d^2); `cosinesimil`: (1 + cos) / 2), as
OpenSearch's faiss / lucene engines do. Optional basic auth and TLS (a self-signed
certificate made with the openssl command). Every request is logged.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import math
import re
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

VERSION = "2.19.1"
ROOT = {
    "name": "contract",
    "cluster_name": "vmem",
    "version": {"number": VERSION, "distribution": "opensearch"},
    "tagline": "The OpenSearch Project: https://opensearch.org/",
}


@dataclass
class Cluster:
    """The server's state: indices (settings, mappings, documents) and a request log."""

    indices: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    auth: tuple[str, str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    fail_bulk_after: int | None = None  # answer 503 to every `_bulk` after this many

    def docs(self, name: str) -> dict[str, dict[str, Any]]:
        return self.indices[name]["docs"]


def _get(source: dict[str, Any], dotted: str) -> Any:
    node: Any = source
    for part in dotted.removesuffix(".keyword").split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _matches(query: dict[str, Any], source: dict[str, Any]) -> bool:
    if not query or "match_all" in query:
        return True
    if "terms" in query:
        ((path, values),) = query["terms"].items()
        return _get(source, path) in values
    if "term" in query:
        ((path, value),) = query["term"].items()
        value = value.get("value") if isinstance(value, dict) else value
        return bool(_get(source, path) == value)
    if "bool" in query:
        clauses = query["bool"].get("filter", []) + query["bool"].get("must", [])
        clauses = clauses if isinstance(clauses, list) else [clauses]
        return all(_matches(c, source) for c in clauses)
    raise ValueError(f"query not supported by the contract server: {list(query)}")


def _score(space: str, a: list[float], b: list[float]) -> float:
    if space == "cosinesimil":
        na = math.sqrt(sum(x * x for x in a)) or 1.0
        nb = math.sqrt(sum(x * x for x in b)) or 1.0
        return (1 + sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)) / 2
    if space == "innerproduct":
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return 1 / (1 - dot) if dot < 0 else dot + 1
    return 1 / (1 + sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


def _handler(cluster: Cluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in one write, as a real server sends them: two small writes
        # on a kept-alive connection meet the client's delayed ACK, 40 ms a request (VeADK's
        # path sends 3 requests a memory, so 1,000 memories took over 2 minutes of waiting).
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _error(self, status: int, kind: str, reason: str, index: str = "") -> None:
            error = {"type": kind, "reason": reason, "index": index, "root_cause": [{"type": kind, "reason": reason}]}
            self._send(status, {"error": error, "status": status})

        def _body(self) -> bytes:
            # Acknowledge the headers now: a client sending its body in a second segment
            # would otherwise wait for the delayed ACK.
            quickack = getattr(socket, "TCP_QUICKACK", None)
            if quickack is not None:
                self.connection.setsockopt(socket.IPPROTO_TCP, quickack, 1)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _authorised(self) -> bool:
            if cluster.auth is None:
                return True
            expected = base64.b64encode(f"{cluster.auth[0]}:{cluster.auth[1]}".encode()).decode()
            if self.headers.get("Authorization") == f"Basic {expected}":
                return True
            self._send(401, {"error": "Unauthorized", "status": 401})
            return False

        def _route(self) -> None:
            url = urlsplit(self.path)
            parts = [p for p in url.path.split("/") if p]
            params = {k: v[-1] for k, v in parse_qs(url.query).items()}
            raw = self._body()
            with cluster.lock:
                cluster.requests.append((self.command, url.path))
                if not self._authorised():
                    return
                self._dispatch(parts, params, raw)

        def _dispatch(self, parts: list[str], params: dict[str, str], raw: bytes) -> None:
            method = self.command
            if not parts:
                self._send(200, ROOT)
                return
            if parts[-1] == "_bulk":
                done = sum(1 for r in cluster.requests if r[1].endswith("/_bulk")) - 1
                if cluster.fail_bulk_after is not None and done >= cluster.fail_bulk_after:
                    self._error(503, "cluster_block_exception", "blocked by: [SERVICE_UNAVAILABLE/2/no master]")
                    return
                self._bulk(raw, parts[0] if len(parts) == 2 else None)
                return
            name, action = parts[0], (parts[1] if len(parts) > 1 else "")
            names = [n for n in cluster.indices if fnmatch.fnmatchcase(n, name)] if "*" in name else [name]
            if method == "PUT" and not action:
                if name in cluster.indices:
                    self._error(400, "resource_already_exists_exception", f"index [{name}] already exists", name)
                    return
                body = json.loads(raw or b"{}")
                cluster.indices[name] = {"settings": body.get("settings", {}), "mappings": body.get("mappings", {}),
                                         "docs": {}}  # fmt: skip
                self._send(200, {"acknowledged": True, "shards_acknowledged": True, "index": name})
                return
            missing = [n for n in names if n not in cluster.indices]
            if "*" not in name and missing:
                if method == "HEAD":
                    self._send(404)
                else:
                    self._error(404, "index_not_found_exception", f"no such index [{name}]", name)
                return
            if method == "HEAD":
                self._send(200)
            elif method == "GET" and not action:
                self._send(200, {n: {"aliases": {}, "mappings": cluster.indices[n]["mappings"],
                                     "settings": cluster.indices[n]["settings"]} for n in names})  # fmt: skip
            elif action == "_mapping":
                self._send(200, {n: {"mappings": cluster.indices[n]["mappings"]} for n in names})
            elif action == "_refresh":
                self._send(200, {"_shards": {"total": 1, "successful": 1, "failed": 0}})
            elif action == "_count":
                self._send(200, {"count": len(cluster.docs(name)), "_shards": {"total": 1}})
            elif action == "_search":
                self._search(name, json.loads(raw or b"{}"))
            elif action == "_delete_by_query":
                query = json.loads(raw or b"{}").get("query", {})
                gone = [i for i, d in cluster.docs(name).items() if _matches(query, d)]
                for doc_id in gone:
                    del cluster.docs(name)[doc_id]
                self._send(200, {"deleted": len(gone), "total": len(gone), "failures": []})
            elif method == "DELETE" and not action:
                del cluster.indices[name]
                self._send(200, {"acknowledged": True})
            else:
                self._error(400, "illegal_argument_exception", f"{method} /{'/'.join(parts)} not supported here")

        def _bulk(self, raw: bytes, default_index: str | None) -> None:
            lines = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
            items = []
            i = 0
            while i < len(lines):
                ((op, meta),) = lines[i].items()
                name = meta.get("_index", default_index)
                doc_id = meta.get("_id")
                if op in ("index", "create"):
                    source = lines[i + 1]
                    i += 2
                    if name not in cluster.indices:  # auto-create with a dynamic mapping, as OpenSearch does
                        cluster.indices[name] = {"settings": {}, "mappings": {}, "docs": {}}
                    dim = _dim(cluster.indices[name]["mappings"])
                    vector = source.get("embedding")
                    if dim is not None and (not isinstance(vector, list) or len(vector) != dim):
                        reason = f"Vector dimension mismatch. Expected: {dim}, Given: {len(vector or [])}"
                        error = {"type": "mapper_parsing_exception", "reason": reason}
                        items.append({op: {"_index": name, "_id": doc_id, "status": 400, "error": error}})
                        continue
                    created = doc_id not in cluster.docs(name)
                    cluster.docs(name)[doc_id] = source
                    items.append({op: {"_index": name, "_id": doc_id, "status": 201 if created else 200,
                                       "result": "created" if created else "updated"}})  # fmt: skip
                elif op == "delete":
                    i += 1
                    found = cluster.docs(name).pop(doc_id, None) is not None
                    items.append({op: {"_index": name, "_id": doc_id, "status": 200 if found else 404}})
                else:
                    self._error(400, "illegal_argument_exception", f"bulk op {op} not supported here")
                    return
            errors = any("error" in next(iter(item.values())) for item in items)
            self._send(200, {"took": 1, "errors": errors, "items": items})

        def _search(self, name: str, body: dict[str, Any]) -> None:
            docs = cluster.docs(name)
            query = body.get("query", {"match_all": {}})
            size, start = int(body.get("size", 10)), int(body.get("from", 0))
            if "knn" in query:
                ((field_name, spec),) = query["knn"].items()
                space = (_field(cluster.indices[name]["mappings"], field_name).get("method") or {}).get(
                    "space_type", "l2"
                )
                candidates = [(i, d) for i, d in docs.items() if _matches(spec.get("filter", {}), d)]
                scored = [(_score(space, spec["vector"], d[field_name]), i, d) for i, d in candidates]
                scored.sort(key=lambda t: -t[0])
                scored = scored[: int(spec.get("k", size))]
            elif "match" in query:
                ((field_name, spec),) = query["match"].items()
                terms = _analyze(spec["query"] if isinstance(spec, dict) else spec)
                scored = [
                    (float(sum(_analyze(str(d.get(field_name, ""))).count(t) for t in terms)), i, d)
                    for i, d in docs.items()
                ]
                scored = sorted((t for t in scored if t[0] > 0), key=lambda t: -t[0])
            else:
                scored = [(1.0, i, d) for i, d in docs.items() if _matches(query, d)]
            excludes = (body.get("_source") or {}).get("excludes") or (body.get("_source") or {}).get("exclude") or []
            hits = [
                {"_index": name, "_id": i, "_score": s, "_source": {k: v for k, v in d.items() if k not in excludes}}
                for s, i, d in scored[start : start + size]
            ]
            total = {"value": len(scored), "relation": "eq"}
            self._send(200, {"took": 1, "timed_out": False, "hits": {"total": total, "hits": hits}})

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _route

    return Handler


def _analyze(text: str) -> list[str]:
    """The standard analyzer, roughly: lowercase words, and each Han character a token of its own."""
    return re.findall(r"[\u4e00-\u9fff]|[^\W_\u4e00-\u9fff]+", text.lower())


def _field(mappings: dict[str, Any], name: str) -> dict[str, Any]:
    return dict((mappings.get("properties") or {}).get(name) or {})


def _dim(mappings: dict[str, Any]) -> int | None:
    field_map = _field(mappings, "embedding")
    return int(field_map["dimension"]) if field_map.get("type") == "knn_vector" else None


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost, made with the openssl command."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:  # a client hanging up is fine
        return


@dataclass
class Server:
    """A running contract server; `cluster` holds what it stored and the requests it saw."""

    port: int
    cluster: Cluster
    httpd: ThreadingHTTPServer

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start(*, tls: tuple[Path, Path] | None = None, auth: tuple[str, str] | None = None) -> Server:
    """Serve on a free port of 127.0.0.1 in a thread, over TLS when given (cert, key)."""
    cluster = Cluster(auth=auth)
    httpd = _Quiet(("127.0.0.1", 0), _handler(cluster))
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return Server(int(httpd.server_address[1]), cluster, httpd)
