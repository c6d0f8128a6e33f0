"""Local HTTP servers speaking the protocols of VikingDB memory and TOS ContextBucket.

The real SDK clients (vikingdb-python-sdk, tos>=2.9.4b1) talk to these in the contract
tests and in bench/ltm_hosted.py. Each server keeps what is saved, answers searches from
it, checks that every request is signed (header present and well formed; the signature
itself is not recomputed), records every request, and can be told to fail the next calls
of a path with a status and body (`fail`), for the 401/429/5xx/malformed tests.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

AK, SK, API_KEY, STS = "AKLTtestaccesskey", "c2VjcmV0LXNlY3JldC1rZXk=", "vm-api-key-123", "sts-token-xyz"
ACCOUNT = "2100001234"

VIKING_SIG = re.compile(
    r"HMAC-SHA256 Credential=(?P<ak>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/air/request, "
    r"SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}"
)
TOS_SIG = re.compile(
    r"TOS4-HMAC-SHA256 Credential=(?P<ak>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/tos/request, "
    r"SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}"
)
ISO_DATE = re.compile(r"\d{8}T\d{6}Z")


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    query: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Scripted:
    status: int
    body: bytes
    headers: dict[str, str]
    times: int


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:  # a client hanging up is fine
        return


class BaseServer:
    """A threaded HTTP server on a free loopback port, with a request log and scripted failures."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.failures: dict[str, list[Scripted]] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in one write, as a real server sends them: two small
            # writes on a kept-alive connection meet the client's delayed ACK (40 ms each).
            wbufsize = 1 << 16
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                # Acknowledge the headers now: a client that sends its body in a second
                # segment without TCP_NODELAY (the tos SDK through a proxy) would otherwise
                # wait for the delayed ACK, 40 ms a request.
                quickack = getattr(socket, "TCP_QUICKACK", None)
                if quickack is not None:
                    self.connection.setsockopt(socket.IPPROTO_TCP, quickack, 1)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                url = urlsplit(self.path)
                seen = Seen(self.command, url.path, dict(self.headers.items()), body, parse_qs(url.query))
                status, payload, headers = server.dispatch(seen)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self.httpd = _Quiet(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def start(self) -> BaseServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, path: str, status: int, body: Any = None, *, times: int = 1, headers: Any = None) -> None:
        """Answer the next `times` requests to `path` with this status and body (bytes sent as they are)."""
        raw = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
        self.failures.setdefault(path, []).append(Scripted(status, raw, dict(headers or {}), times))

    def calls(self, path: str | None = None) -> list[Seen]:
        return [r for r in self.requests if path is None or r.path == path]

    def dispatch(self, seen: Seen) -> tuple[int, bytes, dict[str, str]]:
        with self.lock:
            self.requests.append(seen)
            queue = self.failures.get(seen.path)
            if queue:
                scripted = queue[0]
                scripted.times -= 1
                if scripted.times <= 0:
                    queue.pop(0)
                return scripted.status, scripted.body, {"Content-Type": "application/json", **scripted.headers}
            try:
                status, reply = self.handle(seen)
            except Exception as exc:  # a bug in the test server: answer 500 so the test shows it
                status, reply = 500, {"code": 1000028, "message": f"test server bug: {exc!r}"}
        return status, json.dumps(reply, ensure_ascii=False).encode(), {"Content-Type": "application/json"}

    def handle(self, seen: Seen) -> tuple[int, Any]:
        raise NotImplementedError


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _score(query: str, text: str) -> float:
    q = _words(query)
    return len(q & _words(text)) / len(q) if q else 0.0


class VikingMemoryServer(BaseServer):
    """VikingDB memory (service `air`): collections, session/add, search, event and profile delete."""

    def __init__(self, *, api_key: str = API_KEY, ak: str = AK) -> None:
        super().__init__()
        self.api_key, self.ak = api_key, ak
        self.collections: dict[tuple[str, str], dict[str, Any]] = {}
        self.memories: dict[str, dict[str, Any]] = {}

    def reply(self, data: Any = None, *, code: int = 0, message: str = "success", status: int = 200) -> Any:
        return status, {"code": code, "message": message, "request_id": "req-1", "data": data}

    def auth_error(self, seen: Seen, *, management: bool) -> str | None:
        auth = seen.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            if management:
                return "collection management needs AK/SK"
            return None if auth[len("Bearer ") :] == self.api_key else "invalid api key"
        match = VIKING_SIG.fullmatch(auth)
        if not match:
            return "request not signed"
        if not ISO_DATE.fullmatch(seen.headers.get("X-Date", "")):
            return "X-Date missing"
        if not re.fullmatch(r"[0-9a-f]{64}", seen.headers.get("X-Content-Sha256", "")):
            return "X-Content-Sha256 missing"
        if match["ak"] != self.ak:
            return "unknown access key"
        return None

    def handle(self, seen: Seen) -> tuple[int, Any]:
        path = seen.path
        if path == "/api/memory/ping":
            return self.reply({})
        problem = self.auth_error(seen, management=path.startswith("/api/memory/collection/"))
        if problem:
            return self.reply(None, code=1000001, message=problem, status=401)
        body = seen.body if isinstance(seen.body, dict) else {}
        if path == "/api/memory/collection/info":
            key = (body.get("ProjectName", "default"), body.get("CollectionName", ""))
            if key not in self.collections:
                return self.reply(None, code=1000005, message="collection not exist", status=404)
            return self.reply({"CollectionName": key[1], "ProjectName": key[0], **self.collections[key]})
        if path == "/api/memory/collection/create":
            key = (body.get("ProjectName", "default"), body.get("CollectionName", ""))
            if key in self.collections:
                return self.reply(None, code=1000004, message="collection exists", status=400)
            self.collections[key] = {"BuiltinEventTypes": body.get("BuiltinEventTypes", []), "request": body}
            return self.reply({"CollectionName": key[1]})
        key = (body.get("project_name", "default"), body.get("collection_name", ""))
        if key not in self.collections:
            return self.reply(None, code=1000005, message="collection not exist", status=404)
        if path == "/api/memory/session/add":
            return self.add_session(key, body)
        if path == "/api/memory/search":
            return self.search(key, body)
        if path in ("/api/memory/event/delete", "/api/memory/profile/delete"):
            memory_id = body.get("event_id") or body.get("profile_id")
            if self.memories.pop(memory_id, None) is None:
                return self.reply(None, code=1000011, message="data not found", status=404)
            return self.reply({})
        return self.reply(None, code=1000003, message=f"no such api {path}", status=404)

    def add_session(self, key: tuple[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        meta = body.get("metadata") or {}
        user, session = meta.get("default_user_id"), body.get("session_id")
        messages = body.get("messages")
        if not user or not session or not isinstance(messages, list) or not isinstance(meta.get("time"), int):
            return self.reply(None, code=1000003, message="bad request", status=400)
        if any(m.get("role") not in ("user", "assistant", "system") for m in messages):
            return self.reply(None, code=1000003, message="bad role", status=400)
        types = self.collections[key]["BuiltinEventTypes"]
        for n, message in enumerate(messages):
            if message["role"] != "user" or "sys_event_v1" not in types:
                continue
            memory_id = "evt-" + hashlib.sha1(f"{key}{session}{n}".encode()).hexdigest()[:12]
            self.memories[memory_id] = {
                "key": key,
                "id": memory_id,
                "memory_type": "sys_event_v1",
                "memory_category": 0,
                "user_id": user,
                "assistant_id": meta.get("default_assistant_id"),
                "session_id": session,
                "time": meta["time"],
                "memory_info": {"summary": message["content"]},
            }
        if "sys_profile_v1" in types:
            profile_id = "prof-" + hashlib.sha1(f"{key}{user}".encode()).hexdigest()[:12]
            texts = [
                m["memory_info"]["summary"]
                for m in self.memories.values()
                if m["user_id"] == user and m["memory_type"] == "sys_event_v1"
            ]
            self.memories[profile_id] = {
                "key": key,
                "id": profile_id,
                "memory_type": "sys_profile_v1",
                "memory_category": 1,
                "user_id": user,
                "assistant_id": meta.get("default_assistant_id"),
                "session_id": session,
                "time": meta["time"],
                "memory_info": {"user_profile": "The user said: " + "; ".join(texts)},
            }
        return self.reply({"session_id": session})

    def search(self, key: tuple[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        flt = body.get("filter") or {}
        users = flt.get("user_id")
        users = users if isinstance(users, list) else [users]
        types = flt.get("memory_type")
        category = flt.get("memory_category")
        query = body.get("query")
        limit = int(body.get("limit") or 10)
        found = []
        for memory in self.memories.values():
            if memory["key"] != key or memory["user_id"] not in users:
                continue
            if types is not None and memory["memory_type"] not in types:
                continue
            if category is not None and memory["memory_category"] != category:
                continue
            item = {k: v for k, v in memory.items() if k != "key"}
            text = json.dumps(memory["memory_info"], ensure_ascii=False)
            item["score"] = round(_score(query, text), 4) if query else 1.0
            found.append(item)
        found.sort(key=lambda m: (m["score"], m["time"]), reverse=True)
        return self.reply({"result_list": found[:limit], "count": len(found[:limit])})


class TosContextServer(BaseServer):
    """TOS ContextBucket's control plane, reached as an HTTP proxy (the SDK sends to `{account}.{host}`)."""

    def __init__(self, *, ak: str = AK, account: str = ACCOUNT) -> None:
        super().__init__()
        self.ak, self.account = ak, account
        self.buckets: dict[str, int] = {}
        self.sets: dict[tuple[str, str], dict[str, Any]] = {}
        self.memories: dict[str, dict[str, Any]] = {}

    def error(self, status: int, code: str, message: str) -> tuple[int, Any]:
        return status, {"Code": code, "Message": message, "RequestId": "req-1", "HostId": "host"}

    def auth_error(self, seen: Seen) -> str | None:
        match = TOS_SIG.fullmatch(seen.headers.get("Authorization", ""))
        if not match:
            return "request not signed"
        if not ISO_DATE.fullmatch(seen.headers.get("x-tos-date", "")):
            return "x-tos-date missing"
        if seen.headers.get("x-tos-account-id") != self.account:
            return "x-tos-account-id missing"
        if not seen.headers.get("Host", "").startswith(self.account + "."):
            return "host is not {account}.{control endpoint}"
        if match["ak"] != self.ak:
            return "unknown access key"
        return None

    def handle(self, seen: Seen) -> tuple[int, Any]:
        problem = self.auth_error(seen)
        if problem:
            return self.error(403, "SignatureDoesNotMatch", problem)
        body = seen.body if isinstance(seen.body, dict) else {}
        path = seen.path
        if path == "/GetContextBucket":
            name = body.get("ContextBucketName", "")
            if name not in self.buckets:
                return self.error(404, "NoSuchContextBucket", "the context bucket does not exist")
            return 200, {"ContextBucketName": name, "CreationTime": self.buckets[name]}
        if path == "/CreateContextBucket":
            name = body.get("ContextBucketName", "")
            if name in self.buckets:
                return self.error(409, "ContextBucketAlreadyExists", "exists")
            self.buckets[name] = int(time.time())
            return 200, {}
        bucket = body.get("context_bucket_name") or ""
        if path in ("/GetContextSet", "/CreateContextSet") and bucket not in self.buckets:
            return self.error(404, "NoSuchContextBucket", "the context bucket does not exist")
        key = (bucket, body.get("context_set_name", ""))
        if path == "/GetContextSet":
            if key not in self.sets:
                return self.error(404, "NoSuchContextSet", "the context set does not exist")
            return 200, {"context_set_id": f"cs-{key[1]}", "rule": self.sets[key]}
        if path == "/CreateContextSet":
            if key in self.sets:
                return self.error(409, "ContextSetAlreadyExists", "exists")
            self.sets[key] = {"enable": body.get("enable"), "scenes": body.get("scenes") or []}
            return 200, {}
        if path.startswith("/v1/memories"):
            return self.memory_api(seen, body)
        return self.error(404, "NotFound", f"no such api {path}")

    def _set_of(self, user_id: str) -> tuple[str, str] | None:
        bucket, _, rest = user_id.partition("/")
        key = (bucket, rest)
        return key if key in self.sets and "memory" in self.sets[key]["scenes"] else None

    def memory_api(self, seen: Seen, body: dict[str, Any]) -> tuple[int, Any]:
        user_id = body.get("user_id") or (seen.query.get("user_id") or [""])[0]
        if self._set_of(user_id) is None:
            return self.error(404, "NoSuchContextSet", "no memory context set for this user_id")
        if seen.path == "/v1/memories" and seen.method == "GET":
            mine = [m for m in self.memories.values() if m["user_id"] == user_id]
            return 200, {"results": mine}
        if seen.path == "/v1/memories" and seen.method == "POST":
            texts = [m.get("content", "") for m in body.get("messages") or []]
            if body.get("content") is not None:
                texts.append(body["content"])
            if not texts or not all(isinstance(t, str) and t for t in texts):
                return self.error(400, "InvalidArgument", "messages or content required")
            results = []
            for text in texts:
                digest = hashlib.md5(f"{user_id}{text}".encode()).hexdigest()
                memory_id = "mem-" + digest[:12]
                event = "NONE" if memory_id in self.memories else "ADD"
                self.memories[memory_id] = {
                    "id": memory_id,
                    "memory": text,
                    "hash": digest,
                    "user_id": user_id,
                    "metadata": body.get("metadata"),
                    "created_at": "2026-11-30T08:00:00Z",
                    "updated_at": None,
                }
                results.append({"id": memory_id, "event": event, "memory": text})
            return 200, {"results": results}
        if seen.path == "/v1/memories/search":
            query = body.get("query") or ""
            found = []
            for memory in self.memories.values():
                if memory["user_id"] != user_id:
                    continue
                score = _score(query, memory["memory"])
                if score > 0:
                    found.append({**memory, "score": round(score, 4)})
            found.sort(key=lambda m: m["score"], reverse=True)
            return 200, {"results": found[: int(body.get("limit") or 10)]}
        return self.error(404, "NotFound", "no such api")


@contextmanager
def running(server: BaseServer) -> Iterator[Any]:
    """Start a server for the duration of a with block."""
    server.start()
    try:
        yield server
    finally:
        server.stop()
