"""The `mem0` backend: long-term memory on the Mem0 platform through mem0ai's `MemoryClient` (2.x).

VeADK 1.1.19's mapping (`mem0_backend.py`), so what an agent stored is what an operator
sees: one `add` per memory string, as a user message, scoped by `user_id` alone (no
agent, app or run id), the platform's inference left on so it may rewrite or merge the
text. Search and list scope to the user through the `filters` mem0ai 2.x requires (its
`search(user_id=...)`, VeADK's call form, raises). Mem0 does not isolate by index: every
app's memories of a user are one pool, which is said once on stderr when an index is named.

What vmem adds: the memory string's content hash and its provenance (app, user, session,
event ids, author, event time, policy, saved-at, vmem version) in the memory's metadata,
so a replay stays idempotent although the platform rewrites text; list, delete by id and
`forget` through the user delete; retries of 429 and 5xx; and errors that name the variable to check, never the key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from veadk_mem import failure as fail
from veadk_mem.errors import BadInput, NotSupported, VmemError, missing_extra
from veadk_mem.ltm.base import BackendHealth, Capability, LongTermMemoryBackend, MemoryRecord, content_hash
from veadk_mem.ltm.convert import epoch_of
from veadk_mem.ltm.provenance import KEYS as PROVENANCE_KEYS
from veadk_mem.ltm.provenance import from_fields

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.backends.hosted_http import CountingTransport

DEFAULT_HOST = "https://api.mem0.ai"
KEY_ENV, URL_ENV = "DATABASE_MEM0_API_KEY", "DATABASE_MEM0_BASE_URL"
DEFAULT_INDEX = "default_app"
METADATA_KEYS = ("content_hash", "app_name", "session_id", "event_id", "author", *PROVENANCE_KEYS)
TIMEOUT = 60.0
_index_warned = False


def import_memory_client() -> Any:
    """mem0ai's `MemoryClient`, without the rest of the package.

    `import mem0` runs `mem0/__init__.py`, which imports the self-hosted `Memory` and with
    it qdrant-client and grpc: about ten seconds before the first request on a small
    machine, for a class the platform client never uses. When nothing has imported `mem0`
    yet, a bare package module stands in for it so only `mem0.client` loads. Telemetry to
    PostHog is off unless MEM0_TELEMETRY says otherwise, and mem0's own error logging is
    silenced: vmem reports each failure once, in one line.
    """
    import importlib.util

    os.environ.setdefault("MEM0_TELEMETRY", "False")
    logging.getLogger("mem0").addHandler(logging.NullHandler())
    try:
        if "mem0" not in sys.modules:
            spec = importlib.util.find_spec("mem0")
            if spec is None or spec.submodule_search_locations is None:
                raise missing_extra("mem0ai", "mem0")
            import types
            from importlib.metadata import version

            package = types.ModuleType("mem0")
            package.__path__ = list(spec.submodule_search_locations)
            package.__version__ = version("mem0ai")  # type: ignore[attr-defined]
            sys.modules["mem0"] = package
        with warnings.catch_warnings():  # mem0.client resets the DeprecationWarning filter
            from mem0.client.main import MemoryClient
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("mem0", "mem0ai"):
            raise missing_extra("mem0ai", "mem0") from None
        raise NotSupported(
            f"mem0ai is installed but cannot be imported: {exc}", hint="pip install 'veadk-mem[mem0]'"
        ) from None
    return MemoryClient


class Mem0Backend(LongTermMemoryBackend):
    """Memories of a user on the Mem0 platform; the index is not sent (Mem0 has none)."""

    name: ClassVar[str] = "mem0"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.LIST, Capability.DELETE, Capability.HASHES, Capability.INDEXES, Capability.EDIT}
    )
    page_size: ClassVar[int] = 100
    batch_limit: ClassVar[int] = 1000  # memories per DELETE /v1/batch/
    concurrency: ClassVar[int] = 4  # adds in flight at once

    def __init__(self, index: str, *, settings: VmemSettings | None = None, infer: bool | None = None, **_: Any):
        from veadk_mem.config import VmemSettings

        config = (settings or VmemSettings()).database.mem0
        self.index = index
        self.host = (config.base_url.strip() or DEFAULT_HOST).rstrip("/")
        self.infer = config.infer if infer is None else infer
        self._api_key = config.api_key.get_secret_value().strip()
        self._iam = bool(config.api_key_id.strip() or config.project_id.strip())
        self._client: Any = None
        self._transport: CountingTransport | None = None
        self._connecting = threading.Lock()
        self._known: dict[str, set[str]] = {}  # user -> content hashes seen in the store

    def can(self, capability: Capability) -> bool:
        """EDIT only with inference off: with it on, the platform rewrites what `ltm edit` sends."""
        if capability is Capability.EDIT and self.infer:
            return False
        return super().can(capability)

    @property
    def target(self) -> str:
        """The Mem0 API host."""
        return self.host

    def precheck_index_naming(self) -> None:
        """Any index will do: Mem0 never sees it (VeADK checks nothing either)."""

    @property
    def requests(self) -> int:
        """HTTP requests sent so far, retries included (for the benchmark)."""
        return self._transport.requests if self._transport is not None else 0

    # --- connection and errors ---------------------------------------------------------

    def _connect(self) -> Any:
        """The MemoryClient, made on first use (its constructor pings the platform)."""
        with self._connecting:
            if self._client is not None:
                return self._client
            if not self._api_key:
                if self._iam:
                    raise NotSupported(
                        "vmem cannot fetch a Mem0 API key through Volcengine IAM "
                        "(DATABASE_MEM0_API_KEY_ID / DATABASE_MEM0_PROJECT_ID)",
                        hint=f"set {KEY_ENV} to the key itself",
                    )
                raise BadInput(f"no Mem0 API key: set {KEY_ENV} (or [database.mem0] api_key)")
            import httpx

            from veadk_mem.ltm.backends.hosted_http import CountingTransport

            memory_client = import_memory_client()
            self._transport = CountingTransport()
            http = httpx.Client(transport=self._transport, timeout=TIMEOUT)
            service = self.service()
            try:  # the constructor pings the platform: retried as any call
                self._client = fail.call_sync(
                    lambda: memory_client(api_key=self._api_key, host=self.host, client=http),
                    classify=self._classify,
                    report=lambda failure, retries: fail.report(service, failure, "connecting", retries),
                    delays=self.retry_delays,
                )
            except BaseException:
                http.close()
                raise
            return self._client

    async def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """One MemoryClient call in a worker thread, under the retry policy, its failure in one line."""
        client = await asyncio.to_thread(self._connect)
        send = getattr(client, method)
        return await fail.call(
            self.service(),
            what,
            lambda: asyncio.to_thread(send, *args, **kwargs),
            classify=self._classify,
            delays=self.retry_delays,
        )

    def service(self) -> fail.Service:
        """How the platform's failures are told (`veadk_mem.failure.report`)."""
        return fail.Service(
            where=f"Mem0 at {self.host}",
            credentials="the API key",
            auth_hint=f"check {KEY_ENV}",
            url_hint=f"check {URL_ENV}",
            throttle_hint="wait and run again: a replay skips what was already saved",
        )

    def _classify(self, exc: Exception) -> fail.Failure:
        """What a MemoryClient call's exception says: the status the transport saw decides the kind."""
        import httpx

        secrets = (self._api_key,)
        if isinstance(exc, json.JSONDecodeError):
            return fail.Failure(fail.MALFORMED, "the reply is not JSON")
        debug = getattr(exc, "debug_info", None)
        status = debug.get("status_code") if isinstance(debug, dict) else None
        if status is None and isinstance(exc, ValueError) and self._transport is not None:
            status = self._transport.last_status  # the constructor's ping only says "Error: <detail>"
        if status is None or (isinstance(debug, dict) and debug.get("error_type")):
            if isinstance(exc, httpx.HTTPError) or type(exc).__name__ == "NetworkError":
                reason = fail.one_line(getattr(exc, "message", None) or exc, secrets=secrets)
                return fail.Failure(fail.connection_kind(f"{reason} {exc.__cause__ or ''}"), reason)
            return fail.Failure(fail.SERVER, f"{type(exc).__name__}: {fail.one_line(exc, secrets=secrets)}")
        detail = fail.one_line(str(getattr(exc, "message", None) or exc).removeprefix("Error: "), secrets=secrets)
        asked = fail.retry_after(self._transport.last_headers) if self._transport is not None else None
        return fail.Failure(fail.kind_of_status(status), detail, status=status, retry_after=asked)

    def _malformed(self, what: str, got: Any) -> VmemError:
        return fail.report(self.service(), fail.Failure(fail.MALFORMED, f"unexpected {type(got).__name__}"), what)

    def _say_index_is_ignored(self) -> None:
        global _index_warned
        if self.index != DEFAULT_INDEX and not _index_warned and self.warn is not None:
            _index_warned = True
            self.warn(
                f"mem0 does not isolate memories by index: {self.index!r} is not sent, and a user's "
                "memories are shared by every app using this Mem0 project"
            )

    # --- records -----------------------------------------------------------------------

    def _record(self, item: Any, user_id: str, what: str) -> MemoryRecord:
        if not isinstance(item, dict) or not isinstance(item.get("memory"), str) or item.get("id") is None:
            raise self._malformed(what, item)
        meta: dict[str, Any] = item["metadata"] if isinstance(item.get("metadata"), dict) else {}
        text = item["memory"]
        extra: dict[str, Any] = {"categories": item.get("categories") or None}
        score = item.get("score")
        return MemoryRecord(
            text=text,
            user_id=str(item.get("user_id") or user_id),
            app_name=str(meta.get("app_name") or ""),
            session_id=str(meta.get("session_id") or ""),
            event_id=str(meta.get("event_id") or ""),
            author=str(meta.get("author") or ""),
            content_hash=str(meta.get("content_hash") or content_hash(text)),
            id=str(item["id"]),
            created_at=epoch_of(item.get("created_at")),
            score=float(score) if isinstance(score, (int, float)) else None,
            metadata={k: v for k, v in extra.items() if v},
            source=from_fields(meta),
        )

    def _results(self, reply: Any, what: str) -> list[Any]:
        items = reply.get("results") if isinstance(reply, dict) else reply
        if not isinstance(items, list):
            raise self._malformed(what, reply)
        return items

    # --- save --------------------------------------------------------------------------

    async def existing_hashes(self, user_id: str, hashes: list[str]) -> set[str]:
        """Hashes the user's memories carry: ours from metadata, the text's own for VeADK's."""
        if user_id not in self._known:
            records = await self.list_memories(user_id)
            known = {r.content_hash for r in records} | {content_hash(r.text) for r in records}
            self._known[user_id] = known
        return self._known[user_id] & set(hashes)

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """One `add` per memory string, as VeADK does, a few in flight at once.

        After a failure no new add starts; those in flight finish, and the error says how
        many the platform acknowledged (PartialWrite).
        """
        self._say_index_is_ignored()
        gate = asyncio.Semaphore(self.concurrency)
        stored: dict[int, str] = {}
        errors: list[VmemError] = []

        async def add(record: MemoryRecord) -> str:
            metadata: dict[str, Any] = {
                "content_hash": record.content_hash,
                "app_name": record.app_name,
                "session_id": record.session_id,
                "event_id": record.event_id,
                "author": record.author,
                **(record.source.fields() if record.source is not None else {}),
            }
            options: dict[str, Any] = {"user_id": user_id, "metadata": {k: v for k, v in metadata.items() if v}}
            if not self.infer:
                options["infer"] = False
            async with gate:
                if errors:
                    return ""
                try:
                    reply = await self._call("saving", "add", [{"role": "user", "content": record.text}], **options)
                except VmemError as exc:
                    errors.append(exc)
                    return ""
            self._known.setdefault(user_id, set()).add(record.content_hash)
            if progress is not None:
                progress(1)
            return self._added_id(reply, record)

        async def one(n: int, record: MemoryRecord) -> None:
            added = await add(record)
            if added:
                stored[n] = added

        await asyncio.gather(*(one(n, r) for n, r in enumerate(memories)))
        ids = [stored[n] for n in sorted(stored)]
        if errors:
            raise fail.partial_write(errors[0], ids, len(memories))
        return ids

    def _added_id(self, reply: Any, record: MemoryRecord) -> str:
        """The id of what an add made: a memory id, the queued event's id, or the content hash."""
        if isinstance(reply, dict) and reply.get("event_id"):
            return str(reply["event_id"])
        items = reply.get("results") if isinstance(reply, dict) else reply
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and (item.get("id") or item.get("event_id")):
                    return str(item.get("id") or item.get("event_id"))
        elif not isinstance(reply, dict):
            raise self._malformed("saving", reply)
        return record.content_hash  # accepted, nothing extracted (inference may drop a message)

    # --- read --------------------------------------------------------------------------

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The platform's search, scoped to the user alone (VeADK's memories carry nothing else)."""
        self._say_index_is_ignored()
        reply = await self._call("searching", "search", query, filters={"user_id": user_id}, top_k=top_k)
        return [self._record(item, user_id, "searching") for item in self._results(reply, "searching")]

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """Every memory of the user, page by page, newest first."""
        self._say_index_is_ignored()
        records: list[MemoryRecord] = []
        page = 1
        while True:
            reply = await self._call(
                "listing", "get_all", filters={"user_id": user_id}, page=page, page_size=self.page_size
            )
            items = self._results(reply, "listing")
            records.extend(self._record(item, user_id, "listing") for item in items)
            if not items or not isinstance(reply, dict) or not reply.get("next"):
                break
            page += 1
        records.sort(key=lambda r: r.created_at or 0.0, reverse=True)
        return records[:limit] if limit else records

    async def known_indexes(self, user_id: str) -> list[str]:
        """Mem0 has no indexes: the user's memories are one pool, reached from any index."""
        return [self.index]

    # --- delete ------------------------------------------------------------------------

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Delete these memories of the user: the user delete when it is all of them, else by id."""
        mine = {r.id for r in await self.list_memories(user_id)}
        wanted = [i for i in dict.fromkeys(ids) if i in mine]  # never another user's memory
        if not wanted:
            return 0
        self._known.pop(user_id, None)
        if set(wanted) == mine:
            await self._call("deleting", "delete_all", user_id=user_id)
        elif len(wanted) == 1:
            await self._call("deleting", "delete", wanted[0])
        else:
            for start in range(0, len(wanted), self.batch_limit):
                chunk = wanted[start : start + self.batch_limit]
                await self._call("deleting", "batch_delete", [{"memory_id": i} for i in chunk])
        return len(wanted)

    # --- doctor ------------------------------------------------------------------------

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """Key present (never shown), platform reachable, key accepted; the user's memory count."""
        report = BackendHealth(target=self.target)
        client = await asyncio.to_thread(self._connect)  # raises naming the variable to check
        report.notes.append(f"API key: set ({KEY_ENV}), accepted")
        if client.org_id or client.project_id:
            report.notes.append(f"org {client.org_id}, project {client.project_id}")
        if self.index != DEFAULT_INDEX:
            report.notes.append(f"index {self.index!r} is not sent: Mem0 does not isolate by index")
        report.notes.append("inference: " + ("on (the platform may rewrite memories)" if self.infer else "off"))
        if user_id:
            report.memories = len(await self.list_memories(user_id))
        return report

    async def close(self) -> None:
        """Close the HTTP connections."""
        if self._client is not None:
            self._client.client.close()
            self._client = None
