"""A local HTTP server speaking the part of the Mem0 platform API that mem0ai's clients call.

Used by the mem0 contract tests and `bench/ltm_hosted_mem0.py`: the real `MemoryClient`
(mem0ai 2.x, as vmem uses it, and 1.0.x, as VeADK 1.1.19 uses it) talks to it over HTTP.
It keeps what is added, answers searches from it (word overlap, best first), lists,
deletes, checks `Authorization: Token <key>` and the body shapes each endpoint takes
(2.x scopes search and list through `filters`; a top-level `user_id` there is a 400), and
can be told to fail: `fail(status, times, path)` answers the next requests to `path`
with that status, `malformed(path)` with a body that is not JSON.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ORG_ID, PROJECT_ID, USER_EMAIL = "org-test", "proj-test", "operator@example.com"
_WORDS = re.compile(r"\w+")
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORDS.findall(text)}


@dataclass
class Fault:
    """A scripted failure: answer `times` requests to `path` (prefix) with `status` or a bad body."""

    status: int
    times: int
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Mem0State:
    """What the fake platform holds and what it was asked."""

    api_key: str
    memories: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    rewrite: Callable[[str], str] | None = None
    created: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def store(self, user_id: str, text: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
        with self.lock:
            self.created += 1
            when = (_EPOCH + timedelta(seconds=self.created)).isoformat().replace("+00:00", "Z")
            memory = {
                "id": str(uuid.uuid4()),
                "memory": text,
                "user_id": user_id,
                "agent_id": None,
                "app_id": None,
                "run_id": None,
                "hash": hashlib.md5(text.encode()).hexdigest(),
                "metadata": metadata,
                "categories": [],
                "created_at": when,
                "updated_at": when,
            }
            self.memories[memory["id"]] = memory
            return memory

    def of_user(self, user_id: str) -> list[dict[str, Any]]:
        return [m for m in self.memories.values() if m["user_id"] == user_id]

    def search(self, user_id: str, query: str, top_k: int) -> list[dict[str, Any]]:
        wanted = _words(query)
        scored = []
        for memory in self.of_user(user_id):
            have = _words(memory["memory"])
            score = len(wanted & have) / len(wanted | have) if wanted | have else 0.0
            if score > 0:
                scored.append({**memory, "score": round(score, 4)})
        scored.sort(key=lambda m: -m["score"])
        return scored[:top_k]

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == method and p == path)


class _Reject(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _need(condition: bool, detail: str) -> None:
    if not condition:
        raise _Reject(400, detail)


def _user_filter(body: dict[str, Any]) -> str:
    """2.x scopes by filters: {"user_id": U}, possibly inside AND/OR."""
    filters = body.get("filters")
    _need(isinstance(filters, dict), "filters is required")
    _need("user_id" not in body, "user_id must be passed inside filters")
    if "user_id" in filters:
        return str(filters["user_id"])
    for clause in filters.get("AND", []) + filters.get("OR", []):
        if isinstance(clause, dict) and "user_id" in clause:
            return str(clause["user_id"])
    raise _Reject(400, "filters must name a user_id")


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    _need(isinstance(messages, list) and bool(messages), "messages must be a non-empty list")
    for message in messages:
        _need(
            isinstance(message, dict) and message.get("role") in ("user", "assistant", "system"),
            "each message needs a role",
        )
        _need(isinstance(message.get("content"), str), "each message content must be a string")
    return list(messages)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stalls

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, payload: Any = None, *, raw: bytes | None = None, headers: Any = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with state.lock:
            state.requests.append((method, url.path, body if body is not None else query))
            fault = next((f for f in state.faults if url.path.startswith(f.path) and f.times > 0), None)
            if fault is not None:
                fault.times -= 1
        if fault is not None:
            self._send(fault.status, raw=fault.body, headers=fault.headers)
            return
        if self.headers.get("Authorization") != f"Token {state.api_key}":
            self._send(401, {"detail": "Invalid API key"})
            return
        try:
            status, payload = self._route(method, url.path, body if isinstance(body, dict) else {}, query)
        except _Reject as exc:
            status, payload = exc.status, {"detail": exc.detail}
        self._send(status, payload)

    def _route(self, method: str, path: str, body: dict[str, Any], query: dict[str, str]) -> tuple[int, Any]:
        state = self.server.state
        if method == "GET" and path == "/v1/ping/":
            return 200, {"status": "ok", "org_id": ORG_ID, "project_id": PROJECT_ID, "user_email": USER_EMAIL}
        if method == "POST" and path == "/v3/memories/add/":  # mem0ai 2.x
            return 200, self._add(body, v1=False)
        if method == "POST" and path == "/v1/memories/":  # mem0ai 1.0.x (VeADK 1.1.19)
            return 200, self._add(body, v1=True)
        if method == "POST" and path == "/v3/memories/search/":
            user = _user_filter(body)
            _need(isinstance(body.get("query"), str), "query is required")
            return 200, {"results": state.search(user, body["query"], int(body.get("top_k") or 10))}
        if method == "POST" and path == "/v2/memories/search/":  # 1.0.x: top-level user_id
            _need(isinstance(body.get("user_id"), str), "user_id is required")
            return 200, state.search(body["user_id"], str(body.get("query", "")), int(body.get("top_k") or 10))
        if method == "POST" and path == "/v3/memories/":
            return 200, self._page(_user_filter(body), query)
        if method == "DELETE" and path == "/v1/memories/":
            user = query.get("user_id")
            _need(bool(user), "delete_all needs a filter")
            with state.lock:
                for memory in state.of_user(str(user)):
                    del state.memories[memory["id"]]
            return 200, {"message": "Memories deleted successfully!"}
        if method == "DELETE" and path.startswith("/v1/memories/"):
            memory_id = path.removeprefix("/v1/memories/").strip("/")
            with state.lock:
                if state.memories.pop(memory_id, None) is None:
                    raise _Reject(404, "Memory not found")
            return 200, {"message": "Memory deleted successfully!"}
        if method == "DELETE" and path == "/v1/batch/":
            items = body.get("memories")
            _need(isinstance(items, list) and 0 < len(items) <= 1000, "memories must hold 1 to 1000 items")
            with state.lock:
                gone = sum(1 for item in items if state.memories.pop(str(item.get("memory_id")), None))
            return 200, {"message": f"Successfully deleted {gone} memories"}
        raise _Reject(404, f"no route {method} {path}")

    def _add(self, body: dict[str, Any], *, v1: bool) -> Any:
        state = self.server.state
        messages = _messages(body)
        user = body.get("user_id") or (body.get("filters") or {}).get("user_id")
        _need(isinstance(user, str) and bool(user), "user_id is required")
        metadata = body.get("metadata")
        _need(metadata is None or isinstance(metadata, dict), "metadata must be an object")
        results = []
        for message in messages:
            text = message["content"]
            if body.get("infer") is not False and state.rewrite is not None:
                text = state.rewrite(text)
            memory = state.store(str(user), text, metadata)
            results.append({"id": memory["id"], "memory": memory["memory"], "event": "ADD"})
        if v1 and body.get("async_mode"):
            queued = "Memory processing has been queued"
            return [{"message": queued, "status": "PENDING", "event_id": str(uuid.uuid4())}]
        return {"results": results}

    def _page(self, user: str, query: dict[str, str]) -> dict[str, Any]:
        memories = self.server.state.of_user(user)
        page, size = int(query.get("page", 1)), int(query.get("page_size", 100))
        chunk = memories[(page - 1) * size : page * size]
        more = page * size < len(memories)
        base = f"http://{self.headers.get('Host')}/v3/memories/"
        return {
            "count": len(memories),
            "next": f"{base}?page={page + 1}&page_size={size}" if more else None,
            "previous": f"{base}?page={page - 1}&page_size={size}" if page > 1 else None,
            "results": chunk,
        }

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:  # a client hanging up is fine
        return

    def __init__(self, state: Mem0State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class Mem0Server:
    """The fake platform on a free port, in a thread: `with Mem0Server("key") as server: server.url`."""

    def __init__(self, api_key: str = "m0-test-key") -> None:
        self.state = Mem0State(api_key=api_key)
        self._server = _Server(self.state)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Mem0Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, status: int, times: int = 1, path: str = "/", *, headers: dict[str, str] | None = None) -> None:
        """Answer the next `times` requests under `path` with `status`."""
        body = json.dumps({"detail": f"scripted failure {status}"}).encode()
        self.state.faults.append(Fault(status, times, path, body, dict(headers or {})))

    def malformed(self, path: str, times: int = 1) -> None:
        """Answer the next requests under `path` with 200 and a body that is not JSON."""
        self.state.faults.append(Fault(200, times, path, b"<html>upstream proxy error</html>"))

    def requests(self, method: str | None = None, path: str | None = None) -> list[tuple[str, str, Any]]:
        """What was asked, optionally only of one method and path."""
        return [r for r in self.state.requests if (method is None or r[0] == method) and (path is None or r[1] == path)]
