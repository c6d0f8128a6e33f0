"""The `openviking` backend: long-term memory on an OpenViking server, through openviking-sdk.

VeADK 1.1.19's mapping (`openviking_backend.py`), so a replay meets what the agent made:
the session's user id is the OpenViking peer; `DATABASE_OPENVIKING_USER_ID` names the
OpenViking user that owns the memories (`default` when unset, with a warning); each saved
session becomes one OpenViking session named as VeADK names it (app, OpenViking user, peer
and session id, each sanitised and suffixed with a hash), its user and assistant messages
sent with the peer id, then committed so the server extracts memories. Search is `find`
in `viking://user/{user}/peers/{peer}/memories` as that peer, deduplicated by uri keeping
the best score.

What vmem adds: the messages go in one batch request, not one per event; the extraction
tasks are polled (bounded, all together at the end of the run) so `ltm save` ends when the
memories exist; a replay sends only
the messages the OpenViking session does not hold yet; list and delete through the
server's file API; "Access denied" is an error naming DATABASE_OPENVIKING_USER_ID, never
an empty search; 429 and 5xx are retried, then reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from veadk_mem import failure as fail
from veadk_mem.errors import BadInput, NotFound, StoreError, StoreUnreachable, VmemError, missing_extra
from veadk_mem.ltm.base import BackendHealth, Capability, LongTermMemoryBackend, MemoryRecord
from veadk_mem.ltm.convert import epoch_of, records_of_payload

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings

URL_ENV, KEY_ENV = "DATABASE_OPENVIKING_URL", "DATABASE_OPENVIKING_API_KEY"
USER_ENV, POLICY_ENV = "DATABASE_OPENVIKING_USER_ID", "DATABASE_OPENVIKING_MEMORY_POLICY"
DEFAULT_USER = "default"
TIMEOUT = 30.0
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9_.@-]+$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.@-]+")
_user_warned = False


def _safe_segment(value: str, what: str) -> str:
    """A user or peer id usable as one segment of a viking:// path, as VeADK requires."""
    value = value.strip()
    if not value or value in (".", "..") or not _SAFE_SEGMENT.match(value):
        raise BadInput(
            f"{what} {value!r} cannot be an OpenViking path segment: use letters, digits, '.', '_', '@', '-'"
        )
    return value


def _id_part(value: str, fallback: str) -> str:
    raw = value.strip()
    normalized = _UNSAFE_CHARS.sub("_", raw).strip("._-")
    if not normalized or normalized in (".", ".."):
        normalized = fallback
    return f"{normalized[:48]}_{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:12]}"


def openviking_session_id(app_name: str, openviking_user: str, peer_id: str, session_id: str) -> str:
    """The OpenViking session VeADK makes for one saved session (`_openviking_session_id`)."""
    parts = [
        _id_part(app_name, "app"),
        _id_part(openviking_user, "user"),
        _id_part(peer_id, "peer"),
        _id_part(session_id, "session"),
    ]
    return "__".join(["veadk", *parts])


def message_of(memory: str) -> tuple[str, str]:
    """(role, text) of a saved memory string, as VeADK sends it: user, system, else assistant."""
    try:
        event = json.loads(memory)
    except json.JSONDecodeError:
        return "user", memory
    if not isinstance(event, dict):
        return "user", memory
    role = event.get("role")
    role = role if role in ("user", "system") else "assistant"
    texts = [str(p["text"]) for p in event.get("parts") or [] if isinstance(p, dict) and p.get("text")]
    return role, "\n".join(texts) or memory


def parse_memory_policy(raw: str) -> dict[str, Any] | None:
    """The memory_policy setting (a JSON object string), or None to keep the server's default."""
    if not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{POLICY_ENV} ([database.openviking] memory_policy): invalid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise BadInput(f"{POLICY_ENV} ([database.openviking] memory_policy): expected a JSON object")
    return value


def _sdk() -> Any:
    try:
        import openviking_sdk
    except ImportError:
        raise missing_extra("openviking-sdk", "openviking") from None
    return openviking_sdk


class OpenvikingBackend(LongTermMemoryBackend):
    """Memories an OpenViking server extracted from the sessions it was given, per peer."""

    name: ClassVar[str] = "openviking"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.LIST, Capability.DELETE, Capability.INDEXES})
    poll_interval: ClassVar[float] = 1.0
    poll_timeout: ClassVar[float] = 120.0  # seconds to wait for one extraction task

    def __init__(self, index: str, *, settings: VmemSettings | None = None, **_: Any) -> None:
        from veadk_mem.config import VmemSettings

        config = (settings or VmemSettings()).database.openviking
        self.index = index
        self.url = config.url.strip().rstrip("/")
        self._api_key = config.api_key.get_secret_value().strip()
        self.user_given = bool(config.user_id.strip())
        self.openviking_user = _safe_segment(config.user_id, USER_ENV) if self.user_given else DEFAULT_USER
        self.memory_policy = parse_memory_policy(config.memory_policy)
        self.requests = 0  # HTTP requests sent, retries included (for the benchmark)
        self._last_status: int | None = None
        self._last_headers: dict[str, str] = {}
        self._clients: dict[str | None, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[str, str] = {}  # extraction task id -> session id, waited for at close
        self._lost = False  # the server went away during a save: close does not wait for it

    @property
    def target(self) -> str:
        """The OpenViking server."""
        return self.url or "(no URL)"

    @property
    def ledger_store(self) -> str:
        """'': the ledger's entries for OpenViking predate `target` and are kept under no store name."""
        return ""

    def precheck_index_naming(self) -> None:
        """VeADK refuses an empty index (it names the app in the OpenViking session id)."""
        if not self.index.strip():
            raise BadInput("the openviking backend needs a non-empty index or app name")

    # --- connection and errors ---------------------------------------------------------

    async def _client(self, actor_peer: str | None = None) -> Any:
        """One initialised SDK client per actor peer (searches run as the peer, as in VeADK).

        Clients belong to the event loop they were made in: a caller that runs two loops in
        turn (select, then delete) gets new ones in the second.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._clients, self._loop = {}, loop
        if actor_peer in self._clients:
            return self._clients[actor_peer]
        if not self.url:
            raise BadInput(f"no OpenViking URL: set {URL_ENV} (or [database.openviking] url)")
        if not self._api_key:
            raise BadInput(f"no OpenViking API key: set {KEY_ENV} (or [database.openviking] api_key)")
        self._say_default_user()
        sdk = _sdk()

        async def on_request(request: Any) -> None:
            self.requests += 1

        async def on_response(response: Any) -> None:
            self._last_status = response.status_code
            self._last_headers = dict(response.headers)

        client = sdk.AsyncHTTPClient(
            url=self.url,
            api_key=self._api_key,
            actor_peer_id=actor_peer,
            timeout=TIMEOUT,
            event_hooks={"request": [on_request], "response": [on_response]},
        )
        await client.initialize()
        self._clients[actor_peer] = client
        return client

    async def _call(self, what: str, actor_peer: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        """One SDK call under the retry policy, its failure in one line."""
        client = await self._client(actor_peer)

        async def send() -> Any:
            self._last_status = None
            return await getattr(client, method)(*args, **kwargs)

        return await fail.call(self.service(), what, send, classify=self._classify, delays=self.retry_delays)

    def service(self) -> fail.Service:
        """How this server's failures are told (`veadk_mem.failure.report`)."""
        return fail.Service(
            where=f"OpenViking at {self.url}",
            credentials="the API key",
            auth_hint=self._auth_hint,
            url_hint=f"check {URL_ENV}",
            throttle_hint="wait and run again: a replay sends only what the server does not hold",
        )

    def _auth_hint(self, failure: fail.Failure, what: str) -> str:
        """A 401 is the key; a 403 ("access denied") is the OpenViking user the key belongs to."""
        if failure.status == 401 or failure.code == "UNAUTHENTICATED":
            return f"check {KEY_ENV}"
        return (
            f"check {USER_ENV}: it must name the OpenViking user the API key belongs to (now {self.openviking_user!r})"
        )

    def _classify(self, exc: Exception) -> fail.Failure:
        """What an SDK call's exception says, with the status of the last answer (the SDK's errors carry none)."""
        import httpx

        status = self._last_status
        detail = fail.one_line(exc, secrets=(self._api_key,))
        if isinstance(exc, httpx.HTTPError) and status is None:
            return fail.Failure(fail.connection_kind(exc), detail or type(exc).__name__)
        code = str(getattr(exc, "code", ""))
        retry = fail.retry_after(self._last_headers)
        if "access denied" in detail.lower() or code == "PERMISSION_DENIED" or status == 403:
            return fail.Failure(fail.AUTH, detail, status=status)
        if code == "UNAUTHENTICATED" or status == 401:
            return fail.Failure(fail.AUTH, "", status=401, code=None)
        if code == "NOT_FOUND" or status == 404:
            return fail.Failure(fail.MISSING, detail, status=status)
        if status is None:
            return fail.Failure(fail.REFUSED, detail)
        return fail.Failure(fail.kind_of_status(status), detail, status=status, retry_after=retry)

    def _malformed(self, what: str, got: Any) -> VmemError:
        return fail.report(self.service(), fail.Failure(fail.MALFORMED, f"unexpected {got!r:.80}"), what)

    def _say_default_user(self) -> None:
        global _user_warned
        if not self.user_given and not _user_warned and self.warn is not None:
            _user_warned = True
            self.warn(f"{USER_ENV} is not set: memories are read and written under OpenViking user 'default'")

    def _target(self, peer: str) -> str:
        return f"viking://user/{self.openviking_user}/peers/{peer}/memories"

    # --- save --------------------------------------------------------------------------

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """Per session: create (or meet) its OpenViking session, send the new messages, commit, wait."""
        peer = _safe_segment(user_id, "user id")
        sessions: dict[tuple[str, str], list[MemoryRecord]] = {}
        for record in memories:
            key = (record.app_name or self.index, record.session_id or str(uuid.uuid4()))
            sessions.setdefault(key, []).append(record)
        ids: list[str] = []
        for (app_name, session_id), records in sessions.items():
            name = openviking_session_id(app_name, self.openviking_user, peer, session_id)
            try:
                added = await self._save_session(name, session_id, peer, records)
            except VmemError as exc:  # the sessions committed before are stored: say how many
                self._lost = self._lost or isinstance(exc, StoreUnreachable)
                raise fail.partial_write(exc, ids, len(memories)) from None
            ids.extend(added)
            if progress is not None and added:
                progress(len(added))
        return ids

    async def _save_session(self, name: str, session_id: str, peer: str, records: list[MemoryRecord]) -> list[str]:
        """Send the messages of one session the server does not hold yet and commit them: their ids."""
        held = await self._held_messages(name)
        fresh = records[held:]
        if not fresh:
            return []
        messages = []
        for record in fresh:
            role, text = message_of(record.text)
            messages.append({"role": role, "content": text, "peer_id": peer})
        await self._call("saving", None, "batch_add_messages", name, messages)
        reply = await self._call("committing", None, "commit_session", name, keep_recent_count=0)
        if not isinstance(reply, dict) or not reply.get("task_id"):
            raise self._malformed("committing", reply)
        self._pending[str(reply["task_id"])] = session_id
        return [f"{name}#{held + i}" for i in range(len(fresh))]

    async def _held_messages(self, name: str) -> int:
        """How many messages the OpenViking session already holds (0 and created when new)."""
        try:
            meta = await self._call("saving", None, "get_session", name)
        except NotFound:
            options = {"memory_policy": self.memory_policy} if self.memory_policy is not None else None
            await self._call("saving", None, "create_session", name, options=options)
            return 0
        if not isinstance(meta, dict):
            raise self._malformed("saving", meta)
        total = meta.get("total_message_count")
        return int(total) if isinstance(total, int) else 0

    async def wait_for_extraction(self) -> None:
        """Poll the extraction tasks of the sessions committed so far until they end (bounded).

        Extraction takes the server seconds per session (an LLM call): the tasks run side by
        side while vmem commits the next sessions, and are waited for once, at the end.
        """
        pending, self._pending = dict(self._pending), {}
        if not pending:
            return
        if self.notice is not None:
            self.notice(f"openviking: waiting for the server to extract memories from {len(pending)} session(s)")
        deadline = time.monotonic() + self.poll_timeout
        failures: list[str] = []
        while pending:
            for task_id, session_id in list(pending.items()):
                task = await self._call("waiting for extraction", None, "get_task", task_id)
                if task is not None and (not isinstance(task, dict) or "status" not in task):
                    raise self._malformed("waiting for extraction", task)
                task = task or {"status": "completed"}  # None: expired, so it ended
                status = task["status"]
                if status in ("failed", "cancelled"):
                    failures.append(
                        f"session {session_id}: {fail.one_line(task.get('error') or status, secrets=(self._api_key,))}"
                    )
                if status in ("completed", "failed", "cancelled"):
                    del pending[task_id]
            if not pending:
                break
            if time.monotonic() >= deadline:
                if self.warn is not None:
                    self.warn(
                        f"openviking: {len(pending)} session(s) still extracting after {self.poll_timeout:.0f} s; "
                        "their memories appear when the server finishes"
                    )
                break
            await asyncio.sleep(self.poll_interval)
        if failures:
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise StoreError(f"OpenViking could not extract memories from {failures[0]}{more}")

    # --- read --------------------------------------------------------------------------

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """`find` in the peer's memories as that peer; one hit per uri, the best score kept."""
        peer = _safe_segment(user_id, "user id")
        reply = await self._call(
            "searching",
            peer,
            "find",
            query=query,
            target_uri=self._target(peer),
            limit=top_k,
            options={"context_type": "memory"},
        )
        if not isinstance(reply, dict) or not isinstance(reply.get("memories"), list):
            raise self._malformed("searching", reply)
        best: dict[str, dict[str, Any]] = {}
        loose: list[dict[str, Any]] = []
        for item in reply["memories"]:
            if not isinstance(item, dict):
                raise self._malformed("searching", item)
            uri = str(item.get("uri") or "")
            if not uri:
                loose.append(item)
            elif uri not in best or _score(item) > _score(best[uri]):
                best[uri] = item
        hits = sorted([*best.values(), *loose], key=_score, reverse=True)
        found = [
            {**hit, "id": hit.get("uri"), "text": hit.get("abstract") or hit.get("overview") or ""} for hit in hits
        ]
        return [record for hit in found for record in records_of_payload(hit, user_id)]

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The memory files under the peer, newest first (the server's file listing)."""
        peer = _safe_segment(user_id, "user id")
        try:
            entries = await self._call("listing", peer, "ls", self._target(peer), recursive=True, include_abstract=True)
        except NotFound:
            return []
        if not isinstance(entries, list):
            raise self._malformed("listing", entries)
        records = []
        for entry in entries:
            if not isinstance(entry, dict) or not entry.get("uri"):
                raise self._malformed("listing", entry)
            if entry.get("isDir"):
                continue
            records.append(
                MemoryRecord(
                    text=str(entry.get("abstract") or entry.get("name") or entry["uri"]),
                    user_id=user_id,
                    id=str(entry["uri"]),
                    created_at=epoch_of(entry.get("modTime")),
                )
            )
        records.sort(key=lambda r: r.created_at or 0.0, reverse=True)
        return records[:limit] if limit else records

    async def known_indexes(self, user_id: str) -> list[str]:
        """Memories live per OpenViking user and peer, not per index: one pool, reached from any."""
        return [self.index]

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Remove these memory files of the peer (never a file outside its memories)."""
        peer = _safe_segment(user_id, "user id")
        mine = {r.id for r in await self.list_memories(user_id)}
        gone = 0
        for uri in dict.fromkeys(ids):
            if uri in mine:
                await self._call("deleting", peer, "rm", uri)
                gone += 1
        return gone

    # --- doctor ------------------------------------------------------------------------

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """URL and key present (never shown), server reachable, key and user id accepted."""
        report = BackendHealth(target=self.target)
        client = await self._client(None)  # raises naming the missing variable
        if not await client.health():
            raise StoreError(f"cannot reach OpenViking at {self.url} (GET /health failed)", hint=f"check {URL_ENV}")
        report.notes.append(f"API key: set ({KEY_ENV})")
        report.notes.append(
            f"OpenViking user: {self.openviking_user}" + ("" if self.user_given else f" ({USER_ENV} not set)")
        )
        peer = user_id or "vmem-doctor"
        with contextlib.suppress(NotFound):  # a read as a peer of the user: key and user id must match
            await self._call(
                "checking the user",
                peer,
                "find",
                query="health",
                target_uri=self._target(peer),
                limit=1,
                options={"context_type": "memory"},
            )
        if user_id:
            report.memories = len(await self.list_memories(user_id))
        return report

    async def close(self) -> None:
        """Wait for the extraction tasks still running, then close the HTTP connections."""
        try:
            if self._loop is asyncio.get_running_loop() and not self._lost:
                await self.wait_for_extraction()
        finally:
            if self._loop is asyncio.get_running_loop():
                for client in self._clients.values():
                    await client.close()
            self._clients.clear()


def _score(item: dict[str, Any]) -> float:
    try:
        return float(item.get("score") or 0.0)
    except (TypeError, ValueError):
        return 0.0
