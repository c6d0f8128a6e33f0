"""A local HTTP server speaking the part of the OpenViking API that openviking-sdk calls.

Used by the openviking contract tests and the benchmark. It follows OpenViking 0.5.2's
envelopes (`{"status": "ok", "result": ...}`, errors `{"status": "error", "error":
{"code", "message"}}` with the HTTP status the server maps each code to) and its rules
as seen on a real server: an API key belongs to one user; memories extracted at commit
land under `viking://user/{key's user}/peers/{peer}/memories/...` for messages carrying
`peer_id`; `find` in another user's tree, or as another peer, is "Access denied";
commits are asynchronous (a task to poll); scores are about (1 + similarity) / 2, so an
unrelated memory still scores about 0.5. Extraction here keeps each user message as a
memory (the real server asks an LLM); `fail` and `malformed` script failures.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_WORDS = re.compile(r"\w+")
_PEER_MEMORIES = re.compile(r"^viking://(?:user/(?P<user>[^/]+)|~)/peers/(?P<peer>[^/]+)/memories/?$")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORDS.findall(text)}


class Rejected(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Fault:
    status: int
    times: int
    path: str
    body: bytes


@dataclass
class OvState:
    """What the fake server holds and what it was asked."""

    keys: dict[str, str]  # api key -> user id
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    memories: dict[str, dict[str, Any]] = field(default_factory=dict)  # uri -> memory
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any, dict[str, str]]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    task_polls: int = 1  # get_task answers "running" this many times before "completed"
    task_error: str | None = None  # extraction tasks fail with this error
    duplicate_hits: bool = False  # find returns each memory twice (as the real server can, per level)
    clock: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stalls

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, payload: Any = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        with state.lock:
            state.requests.append((method, url.path, body or query, headers))
            fault = next((f for f in state.faults if url.path.startswith(f.path) and f.times > 0), None)
            if fault is not None:
                fault.times -= 1
        if fault is not None:
            self._send(fault.status, raw=fault.body)
            return
        if url.path == "/health":
            self._send(200, {"status": "ok", "healthy": True})
            return
        try:
            user = state.keys.get(headers.get("x-api-key", ""))
            if user is None:
                raise Rejected(401, "UNAUTHENTICATED", "Invalid API key")
            result = self._route(method, unquote(url.path), body, query, user, headers.get("x-openviking-actor-peer"))
        except Rejected as exc:
            self._send(exc.status, {"status": "error", "error": {"code": exc.code, "message": exc.message}})
            return
        self._send(200, {"status": "ok", "result": result})

    def _route(
        self, method: str, path: str, body: dict[str, Any], query: dict[str, str], user: str, actor: str | None
    ) -> Any:
        state = self.server.state
        if method == "POST" and path == "/api/v1/sessions":
            sid = body.get("session_id") or str(uuid.uuid4())
            unknown = set(body) - {"session_id", "memory_policy", "auto_commit_policy", "memory_extraction_config"}
            if unknown:
                raise Rejected(422, "INVALID_ARGUMENT", f"unknown fields {sorted(unknown)}")
            with state.lock:
                if sid in state.sessions:
                    raise Rejected(409, "ALREADY_EXISTS", f"Session {sid} already exists")
                state.sessions[sid] = self._new_session(sid, user, body.get("memory_policy"))
            return {"session_id": sid, "uri": f"viking://session/{sid}", "user": {"user_id": user}}
        match = re.fullmatch(r"/api/v1/sessions/([^/]+)(/.*)?", path)
        if match:
            return self._session(method, match.group(1), match.group(2) or "", body, user)
        task = re.fullmatch(r"/api/v1/tasks/([^/]+)", path)
        if method == "GET" and task:
            return self._task(task.group(1))
        if method == "POST" and path == "/api/v1/search/find":
            return self._find(body, user, actor)
        if method == "GET" and path == "/api/v1/fs/ls":
            peer = self._peer_of(query.get("uri", ""), user, actor)
            prefix = f"viking://user/{user}/peers/{peer}/memories/"
            return [
                {
                    "uri": uri,
                    "name": uri.rsplit("/", 1)[-1],
                    "isDir": False,
                    "size": len(m["abstract"]),
                    "modTime": m["modTime"],
                    "abstract": m["abstract"],
                }
                for uri, m in state.memories.items()
                if uri.startswith(prefix)
            ]
        if method == "DELETE" and path == "/api/v1/fs":
            uri = query.get("uri", "")
            self._peer_of(uri.rsplit("/memories/", 1)[0] + "/memories", user, actor)
            with state.lock:
                if state.memories.pop(uri, None) is None:
                    raise Rejected(404, "NOT_FOUND", f"{uri} not found")
            return {"uri": uri}
        raise Rejected(404, "NOT_FOUND", f"no route {method} {path}")

    def _new_session(self, sid: str, user: str, policy: Any) -> dict[str, Any]:
        return {
            "session_id": sid,
            "user": user,
            "messages": [],
            "total_message_count": 0,
            "commit_count": 0,
            "memory_policy": policy,
        }

    def _session(self, method: str, sid: str, rest: str, body: dict[str, Any], user: str) -> Any:
        state = self.server.state
        with state.lock:
            session = state.sessions.get(sid)
            if session is not None and session["user"] != user:
                raise Rejected(403, "PERMISSION_DENIED", f"Access denied for viking://session/{sid}")
            if method == "GET" and rest == "":
                if session is None:
                    raise Rejected(404, "NOT_FOUND", f"Session {sid} not found")
                return {k: session[k] for k in ("session_id", "total_message_count", "commit_count")} | {
                    "message_count": len(session["messages"])
                }
            if method == "POST" and rest in ("/messages", "/messages/batch"):
                messages = body.get("messages") if rest.endswith("batch") else [body]
                if not isinstance(messages, list) or not messages:
                    raise Rejected(422, "INVALID_ARGUMENT", "messages must be a non-empty list")
                for message in messages:
                    if message.get("role") not in ("user", "assistant", "system"):
                        raise Rejected(422, "INVALID_ARGUMENT", "role must be user, assistant or system")
                    if not isinstance(message.get("content"), str):
                        raise Rejected(422, "INVALID_ARGUMENT", "content must be a string")
                if session is None:  # auto-created on first add
                    session = state.sessions[sid] = self._new_session(sid, user, None)
                session["messages"].extend(messages)
                session["total_message_count"] += len(messages)
                return {"session_id": sid, "message_count": len(session["messages"])}
            if method == "POST" and rest == "/commit":
                if session is None:
                    raise Rejected(404, "NOT_FOUND", f"Session {sid} not found")
                for message in session["messages"]:
                    if message["role"] == "user" and message.get("peer_id"):
                        state.clock += 1
                        uri = f"viking://user/{user}/peers/{message['peer_id']}/memories/events/mem_{uuid.uuid4().hex[:8]}.md"
                        state.memories[uri] = {
                            "abstract": message["content"],
                            "modTime": f"2026-01-01T00:00:{state.clock % 60:02d}Z",
                        }
                session["messages"] = []
                session["commit_count"] += 1
                task_id = str(uuid.uuid4())
                state.tasks[task_id] = {
                    "task_id": task_id,
                    "task_type": "session_commit",
                    "status": "running",
                    "polls": 0,
                    "error": None,
                }
                return {"session_id": sid, "status": "accepted", "task_id": task_id, "archived": True}
        raise Rejected(404, "NOT_FOUND", f"no route {method} {rest}")

    def _task(self, task_id: str) -> Any:
        state = self.server.state
        with state.lock:
            task = state.tasks.get(task_id)
            if task is None:
                raise Rejected(404, "NOT_FOUND", "Task not found or expired")
            task["polls"] += 1
            if task["status"] == "running" and task["polls"] > state.task_polls:
                task["status"] = "failed" if state.task_error else "completed"
                task["error"] = state.task_error
            return {k: v for k, v in task.items() if k != "polls"}

    def _peer_of(self, target: str, user: str, actor: str | None) -> str:
        match = _PEER_MEMORIES.match(target)
        if match is None:
            raise Rejected(400, "INVALID_URI", f"invalid target uri {target}")
        if (match.group("user") or user) != user or (actor is not None and match.group("peer") != actor):
            raise Rejected(403, "PERMISSION_DENIED", f"Access denied for {target}")
        return match.group("peer")

    def _find(self, body: dict[str, Any], user: str, actor: str | None) -> Any:
        state = self.server.state
        peer = self._peer_of(str(body.get("target_uri", "")), user, actor)
        wanted = _words(str(body.get("query", "")))
        prefix = f"viking://user/{user}/peers/{peer}/memories/"
        hits = []
        for uri, memory in state.memories.items():
            if not uri.startswith(prefix):
                continue
            have = _words(memory["abstract"])
            similarity = len(wanted & have) / len(wanted | have) if wanted | have else 0.0
            hit = {
                "uri": uri,
                "context_type": "memory",
                "level": 2,
                "abstract": memory["abstract"],
                "overview": None,
                "category": "events",
                "score": round(0.5 + similarity / 2, 4),
                "match_reason": "",
            }
            hits.append(hit)
            if state.duplicate_hits:
                hits.append({**hit, "level": 1, "score": round(hit["score"] - 0.1, 4)})
        hits.sort(key=lambda h: -h["score"])
        hits = hits[: int(body.get("limit") or 10) * (2 if state.duplicate_hits else 1)]
        return {"memories": hits, "resources": [], "skills": [], "total": len(hits)}

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

    def __init__(self, state: OvState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class OpenvikingServer:
    """The fake server on a free port: `with OpenvikingServer({"key": "alice"}) as s: s.url`."""

    def __init__(self, keys: dict[str, str]) -> None:
        self.state = OvState(keys=dict(keys))
        self._server = _Server(self.state)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> OpenvikingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, status: int, times: int = 1, path: str = "/") -> None:
        """Answer the next `times` requests under `path` with `status` (a plain-text body, as a proxy would)."""
        self.state.faults.append(Fault(status, times, path, f"upstream error {status}".encode()))

    def malformed(self, path: str, times: int = 1) -> None:
        """Answer the next requests under `path` with 200 and a body that is not JSON."""
        self.state.faults.append(Fault(200, times, path, b"<html>proxy</html>"))

    def requests(
        self, method: str | None = None, path: str | None = None
    ) -> list[tuple[str, str, Any, dict[str, str]]]:
        return [r for r in self.state.requests if (method is None or r[0] == method) and (path is None or r[1] == path)]
