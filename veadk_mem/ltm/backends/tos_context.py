"""The `tos_context` backend: TOS ContextBucket memory through the `tos` SDK, as VeADK maps it.

Bucket = `database.tos_context.bucket_name` or the index; one context set per user (the
user id), created with the `memory` scene; an existing set not enabled for memory is
refused. The service infers the memories (`infer`, VeADK's default on). VeADK sends one
`create_context_bucket_memory` per event; the API takes a list of messages, so vmem
sends one per save with VeADK's content mapping (the text of the first part, else the
whole event string) as each message's content.

ContextBucket calls exist only in the pre-release `tos>=2.9.4b1`: an older SDK is
detected and named. The SDK's own retries are off (`max_retry_count=0`): vmem retries
429, 5xx and lost connections itself, the same way for every hosted backend.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from veadk_mem import failure as fail
from veadk_mem.errors import BadInput, MissingSdk, NotFound, NotSupported, StoreError
from veadk_mem.failure import Failure, connection_reason
from veadk_mem.ltm.backends.hosted import (
    VolcengineBackend,
    cloud_provider,
    key_names,
    region_fallback,
    volcengine_credentials,
)
from veadk_mem.ltm.base import BackendHealth, Capability, MemoryRecord
from veadk_mem.ltm.convert import epoch_of

REQUIRED_METHODS = ("create_context_bucket_memory", "search_context_bucket_memory")
INSTALL_HINT = "install it with: pip install --pre 'veadk-mem[tos]' (or pip install --pre 'tos>=2.9.4b1')"
LOWER = set("abcdefghijklmnopqrstuvwxyz0123456789-")


def _content(text: str) -> str:
    """VeADK's content of one memory string: the text of its first part, else the string itself."""
    try:
        payload = json.loads(text)
        parts = payload.get("parts") or []
        first = parts[0].get("text") if parts else None
        return first or text
    except (AttributeError, IndexError, TypeError, ValueError):
        return text


def _role(text: str) -> str:
    try:
        payload = json.loads(text)
    except ValueError:
        return "user"
    return "user" if not isinstance(payload, dict) or payload.get("role") in (None, "user") else "assistant"


class TosContextBackend(VolcengineBackend):
    """Memories of one ContextBucket; each user is a context set enabled for memory."""

    name: ClassVar[str] = "tos_context"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.LIST})
    lacking: ClassVar[dict[Capability, tuple[str, str]]] = {
        Capability.DELETE: (
            "cannot delete memories: the TOS ContextBucket memory API has no call to delete a memory (tos SDK 2.9.4b1)",
            "delete the user's context set in the TOS console to remove all of their memories",
        )
    }

    def configure(self) -> None:
        """The service's settings, credentials and endpoint, read once."""
        config = self.settings.database.tos_context
        self.bucket = config.bucket_name or self.index
        if not config.account_id:
            raise BadInput("DATABASE_TOS_CONTEXT_ACCOUNT_ID is not set: the tos_context backend needs the account id")
        if not config.control_endpoint:
            raise BadInput(
                "DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT is not set: the tos_context backend needs the control endpoint"
            )
        self.account_id = config.account_id
        self.control_endpoint = config.control_endpoint.strip()
        byteplus = cloud_provider(self.env) == "byteplus"
        self.region = config.region or ("cn-beijing" if byteplus else region_fallback("", self.env))
        self.endpoint = config.endpoint or f"tos-{self.region}.volces.com"
        self.infer = config.infer
        # VeADK's TOS backend reads VOLCENGINE_* whatever the cloud provider.
        self._credentials = volcengine_credentials(self.settings, self.env, provider="volcengine")
        self._client: Any = None
        self._bucket_ready = False
        self._sets: set[str] = set()

    def precheck_index_naming(self) -> None:
        """A bucket name: 3-63 lowercase letters, digits and hyphens, no hyphen at either end."""
        name = self.bucket
        if not 3 <= len(name) <= 63 or not set(name) <= LOWER or name[0] == "-" or name[-1] == "-":
            raise BadInput(
                f"invalid TOS ContextBucket name {name!r}: use 3-63 lowercase letters, digits and hyphens, "
                "without a hyphen at either end",
                hint="set DATABASE_TOS_CONTEXT_BUCKET_NAME to use another bucket than the app name",
            )

    @property
    def target(self) -> str:
        return f"{self.control_endpoint} account {self.account_id} bucket {self.bucket}"

    # --- client and calls -------------------------------------------------------------

    def client(self) -> Any:
        """The TosClientV2 of the control plane (built on first use)."""
        if self._client is None:
            try:
                import tos
            except ImportError:
                raise MissingSdk("the tos SDK is not installed", hint=INSTALL_HINT) from None
            missing = [m for m in REQUIRED_METHODS if not hasattr(tos.TosClientV2, m)]
            if missing:
                version = getattr(getattr(tos, "__version__", None), "__version__", "unknown")
                raise NotSupported(
                    f"the installed tos SDK {version} has no ContextBucket calls ({', '.join(missing)})",
                    hint=INSTALL_HINT,
                )
            if self._credentials is None:
                ak, sk, _ = key_names("volcengine")
                raise BadInput(f"no TOS credentials: set {ak} and {sk}")
            creds = self._credentials
            self._client = tos.TosClientV2(
                creds.access_key,
                creds.secret_key,
                self.endpoint,
                self.region,
                security_token=creds.session_token or None,
                control_endpoint=self.control_endpoint,
                max_retry_count=0,
                dns_cache_time=0,
            )
        return self._client

    def _classify(self, exc: Exception) -> Failure | None:
        from tos.exceptions import TosClientError, TosServerError

        if isinstance(exc, TosServerError):
            status, detail = exc.status_code, str(exc.message or exc.code or "")
            return Failure(fail.kind_of_status(status), detail, status=status, code=exc.code or None)
        if isinstance(exc, TosClientError):
            if exc.message == "unable to do serialization":
                return Failure(fail.MALFORMED, "the reply is not JSON")
            if exc.cause is not None and "request" in type(exc.cause).__module__:
                return Failure(fail.connection_kind(str(exc.cause)), connection_reason(str(exc.cause)))
            return Failure(fail.REFUSED, str(exc.message))
        return None

    def service(self) -> fail.Service:
        """How this bucket's failures are told (`veadk_mem.failure.report`)."""
        return fail.Service(
            where=f"TOS ContextBucket at {self.control_endpoint}",
            auth_hint="check VOLCENGINE_ACCESS_KEY, VOLCENGINE_SECRET_KEY (and VOLCENGINE_SESSION_TOKEN for "
            "temporary keys) and DATABASE_TOS_CONTEXT_ACCOUNT_ID",
            url_hint="check DATABASE_TOS_CONTEXT_CONTROL_ENDPOINT and the network",
        )

    async def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return await fail.call(
            self.service(),
            f"calling {what}",
            lambda: asyncio.to_thread(fn),
            classify=self._classify,
            delays=self.retry_delays,
        )

    # --- bucket and context sets --------------------------------------------------------

    async def bucket_exists(self) -> bool:
        client = self.client()
        call = partial(client.get_context_bucket, account_id=self.account_id, context_bucket_name=self.bucket)
        try:
            await self._call("GetContextBucket", call)
        except NotFound:
            return False
        return True

    async def ensure_bucket(self) -> None:
        """Create the ContextBucket when it is missing (one that appeared meanwhile is fine)."""
        if self._bucket_ready:
            return
        if not await self.bucket_exists():
            client = self.client()
            call = partial(client.create_context_bucket, account_id=self.account_id, context_bucket_name=self.bucket)
            try:
                await self._call("CreateContextBucket", call)
            except StoreError as exc:
                if "HTTP 409" not in exc.message:
                    raise
        self._bucket_ready = True

    async def _context_set(self, user_id: str, *, create: bool) -> bool:
        """Whether the user's context set exists (created when asked); refuse one not enabled for memory."""
        if user_id in self._sets:
            return True
        client = self.client()
        get = partial(
            client.get_context_set,
            account_id=self.account_id,
            context_bucket_name=self.bucket,
            context_set_name=user_id,
        )
        try:
            found = await self._call("GetContextSet", get)
        except NotFound:
            if not create:
                return False
            make = partial(
                client.create_context_set,
                account_id=self.account_id,
                context_bucket_name=self.bucket,
                context_set_name=user_id,
                enable=True,
                scenes=["memory"],
            )
            try:
                await self._call("CreateContextSet", make)
            except StoreError as exc:
                if "HTTP 409" not in exc.message:
                    raise
                found = await self._call("GetContextSet", get)
                self._check_memory_set(user_id, found)
            self._sets.add(user_id)
            return True
        self._check_memory_set(user_id, found)
        self._sets.add(user_id)
        return True

    def _check_memory_set(self, user_id: str, found: Any) -> None:
        scenes = getattr(found, "scenes", None) or []
        if not getattr(found, "enable", False) or "memory" not in scenes:
            raise BadInput(
                f"context set {user_id!r} of TOS ContextBucket {self.bucket!r} is not enabled for memory "
                f"(enable={getattr(found, 'enable', None)}, scenes={scenes})",
                hint="use another bucket for memory: DATABASE_TOS_CONTEXT_BUCKET_NAME",
            )

    # --- the contract -------------------------------------------------------------------

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """All these memories in one create_context_bucket_memory call (messages, infer as configured)."""
        if not memories:
            return []
        await self.ensure_bucket()
        await self._context_set(user_id, create=True)
        client = self.client()
        call = partial(
            client.create_context_bucket_memory,
            account_id=self.account_id,
            context_bucket_name=self.bucket,
            context_set_name=user_id,
            messages=[{"role": _role(r.text), "content": _content(r.text)} for r in memories],
            infer=self.infer,
        )
        output = await self._call("POST /v1/memories", call)
        ids = [str(r.id) for r in getattr(output, "results", None) or [] if getattr(r, "id", None)]
        if len(ids) != len(memories):  # the service merged or split what it inferred
            ids = [f"{user_id}/{n}" for n in range(len(memories))]
        return ids

    def _records(self, user_id: str, items: Any) -> list[MemoryRecord]:
        records: list[MemoryRecord] = []
        for item in items or []:
            text = getattr(item, "memory", None)
            if not isinstance(text, str) or not text:
                continue
            score = getattr(item, "score", None)
            records.append(
                MemoryRecord(
                    text=text,
                    user_id=user_id,
                    author="user",
                    id=str(getattr(item, "id", "") or ""),
                    created_at=epoch_of(getattr(item, "created_at", None)),
                    score=float(score) if isinstance(score, (int, float)) else None,
                    metadata={"context_set": user_id, "metadata": getattr(item, "metadata", None)},
                )
            )
        return records

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """search_context_bucket_memory in the user's context set (none yet: no memories)."""
        if not await self._context_set(user_id, create=False):
            return []
        client = self.client()
        call = partial(
            client.search_context_bucket_memory,
            account_id=self.account_id,
            context_bucket_name=self.bucket,
            context_set_name=user_id,
            query=query,
            limit=top_k,
        )
        output = await self._call("POST /v1/memories/search", call)
        return list(self._records(user_id, getattr(output, "results", None)))

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """list_context_bucket_memory of the user's context set, newest first."""
        if not await self._context_set(user_id, create=False):
            return []
        client = self.client()
        call = partial(
            client.list_context_bucket_memory,
            account_id=self.account_id,
            context_bucket_name=self.bucket,
            context_set_name=user_id,
        )
        output = await self._call("GET /v1/memories", call)
        records = self._records(user_id, getattr(output, "results", None))
        records.sort(key=lambda r: r.created_at or 0.0, reverse=True)
        return records[:limit] if limit else records

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """Credentials present (named, never shown), control endpoint answering, bucket existing."""
        report = BackendHealth(target=self.target)
        if self._credentials is None:
            report.problems.append("no credentials: set VOLCENGINE_ACCESS_KEY and VOLCENGINE_SECRET_KEY")
            report.exists = False
            return report
        report.notes.append(f"credentials: {self._credentials.source}")
        report.notes.append(f"infer: {'on' if self.infer else 'off'}")
        try:
            report.exists = await self.bucket_exists()
        except StoreError as exc:
            if exc.message.startswith("cannot reach"):
                raise
            report.problems.append(exc.message)
        if not report.exists and not report.problems:
            report.notes.append("bucket missing: the first save creates it")
        return report
