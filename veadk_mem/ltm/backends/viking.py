"""The `viking` backend: VikingDB memory through `vikingdb-python-sdk`'s `VikingMem`, as VeADK maps it.

Collection = index, in project `database.viking.project`. A saved session is one
`add_session` call (messages role user/assistant with the text of the first part,
metadata `default_user_id`, `default_assistant_id`, `time` in ms) under the ADK session
id, so replaying a session lands on the same Viking session. The service extracts the
memories (events, profile) itself; search filters by user and memory types, and the
profile is `memory_info.user_profile` of the user's first memory_category 1 result.

Credentials as VeADK reads them: `DATABASE_VIKINGMEM_API_KEY` for memory operations,
else AK/SK (also what creating a missing collection needs). The SDK is imported on first
use; its calls are synchronous and run in a thread, retried on 429, 5xx and lost
connections.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from veadk_mem import failure as fail
from veadk_mem.errors import BadInput, NotFound, StoreError, VmemError, missing_extra
from veadk_mem.failure import Failure, connection_reason, one_line
from veadk_mem.ltm.backends.hosted import (
    Credentials,
    VolcengineBackend,
    cloud_provider,
    key_names,
    region_fallback,
    volcengine_credentials,
)
from veadk_mem.ltm.base import BackendHealth, Capability, MemoryRecord

DEFAULT_MEMORY_TYPES = ["sys_event_v1", "sys_profile_v1"]
BYTEPLUS_REGION = "cn-hongkong"
BYTEPLUS_HOST = f"api-knowledgebase.mlp.{BYTEPLUS_REGION}.bytepluses.com"
PROFILE_CATEGORY = 1
LIST_LIMIT = 5000  # what VeADK asks for when it reads the profile
INDEX_RULE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
API_KEY_ENV = "DATABASE_VIKINGMEM_API_KEY"
BASE_URL_ENV = "DATABASE_VIKINGMEM_BASE_URL"
# The service's error codes (vikingdb.memory.exceptions.EXCEPTION_MAP).
UNAUTHORIZED, COLLECTION_EXISTS, NO_COLLECTION, INTERNAL, THROTTLED = 1000001, 1000004, 1000005, 1000028, 1000029
CODE_KINDS: dict[object, str] = {
    UNAUTHORIZED: fail.AUTH,
    THROTTLED: fail.THROTTLED,
    NO_COLLECTION: fail.MISSING,
    INTERNAL: fail.SERVER,
}
TEXT_FIELDS = ("summary", "content", "user_profile", "text", "memory", "event", "description")


def _admin_client(base: Any) -> Any:
    """A VikingMem that also knows the collection endpoints VeADK's own client uses (info, create)."""
    from volcengine.ApiInfo import ApiInfo

    class VikingMemAdmin(base):
        def _build_api_info(self) -> dict[str, Any]:
            info = dict(super()._build_api_info())
            headers = {"Accept": "application/json", "Content-Type": "application/json"}
            info["GetCollection"] = ApiInfo("POST", "/api/memory/collection/info", {}, {}, dict(headers))
            info["CreateCollection"] = ApiInfo("POST", "/api/memory/collection/create", {}, {}, dict(headers))
            return info

    return VikingMemAdmin


def memory_text(memory_info: Any) -> str:
    """The readable text of one result's memory_info (summary, content, user_profile ...), else its JSON."""
    if isinstance(memory_info, str):
        return memory_info
    if isinstance(memory_info, dict):
        for key in TEXT_FIELDS:
            value = memory_info.get(key)
            if isinstance(value, str) and value:
                return value
        for value in memory_info.values():
            if isinstance(value, str) and value:
                return value
    return json.dumps(memory_info, ensure_ascii=False, sort_keys=True)


def _message(record: MemoryRecord) -> dict[str, str]:
    """VeADK's message for one memory string: role user or assistant, the text of the first part."""
    try:
        event = json.loads(record.text)
    except ValueError:
        return {"role": "user", "content": record.text}
    if not isinstance(event, dict):
        return {"role": "user", "content": record.text}
    role = "user" if event.get("role") == "user" else "assistant"
    parts = event.get("parts") or []
    first = parts[0] if parts and isinstance(parts[0], dict) else {}
    text = first.get("text")
    if not isinstance(text, str):
        from veadk_mem.ltm.convert import searchable_text

        text = searchable_text(record.text)  # a tool call or response: VeADK itself would fail here
    return {"role": role, "content": text}


class VikingBackend(VolcengineBackend):
    """Memories of one VikingDB memory collection, scoped to a user by the service's filters."""

    name: ClassVar[str] = "viking"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.LIST, Capability.DELETE, Capability.PROFILE})

    def configure(self) -> None:
        """The service's settings, credentials and endpoint, read once."""
        config = self.settings.database.viking
        self.provider = cloud_provider(self.env)
        self.project = config.project or "default"
        types = [t.strip() for t in config.memory_type.split(",") if t.strip()]
        self.memory_types = types or list(DEFAULT_MEMORY_TYPES)
        api_key = config.api_key.get_secret_value().strip()
        self._api_key = "" if api_key.lower() in {"none", "null"} else api_key
        if self.provider == "byteplus":
            self.region, host = BYTEPLUS_REGION, BYTEPLUS_HOST
        else:
            self.region = region_fallback(config.region, self.env)
            host = f"api-knowledgebase.mlp.{self.region}.volces.com"
        self.host, self.scheme = host, "https"
        base_url = config.base_url.strip()
        if base_url:
            scheme, sep, rest = base_url.partition("://")
            if not sep or scheme not in ("http", "https") or not rest.strip("/"):
                raise BadInput(f"{BASE_URL_ENV} must start with http:// or https://, got {base_url!r}")
            self.host, self.scheme = rest.rstrip("/"), scheme
        self._credentials = volcengine_credentials(self.settings, self.env)
        self._memory: Any = None
        self._admin: Any = None
        self._collection_ready = False
        self._kinds: dict[str, str] = {}

    # --- naming and credentials --------------------------------------------------------

    @property
    def target(self) -> str:
        """The endpoint, project and collection."""
        return f"{self.endpoint} project {self.project} collection {self.index}"

    @property
    def ledger_store(self) -> str:
        """'': the ledger's entries for viking predate `target` and are kept under no store name."""
        return ""

    def precheck_index_naming(self) -> None:
        """VeADK's rule: 1-128 characters, a letter first, then letters, digits and underscores."""
        if not INDEX_RULE.fullmatch(self.index or ""):
            raise BadInput(
                f"invalid VikingDB memory collection name {self.index!r}: use 1-128 letters, digits and "
                "underscores, starting with a letter",
                hint="set long_term_memory.index, or name the app with --app",
            )

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://{self.host}"

    def credential_source(self) -> str:
        """Which credentials the memory operations use (names only, never values)."""
        if self._api_key:
            return API_KEY_ENV
        return self._credentials.source if self._credentials else ""

    def _require_credentials(self) -> None:
        if not self._api_key and self._credentials is None:
            ak, sk, _ = key_names(self.provider)
            raise BadInput(f"no VikingDB memory credentials: set {API_KEY_ENV}, or {ak} and {sk}")

    def _auth_hint(self, management: bool = False) -> str:
        """What to check after a 401/403: the API key, or the AK/SK (collection calls always use AK/SK)."""
        ak, sk, token = key_names(self.provider)
        use_key = self._api_key and not management
        what = API_KEY_ENV if use_key else f"{ak}, {sk} (and {token} for temporary keys)"
        return f"check {what} and that they may use project {self.project!r} in region {self.region}"

    # --- clients -----------------------------------------------------------------------

    def _sdk(self) -> tuple[Any, Any, Any]:
        try:
            from vikingdb import IAM, APIKey
            from vikingdb.memory import VikingMem
        except ImportError:
            raise missing_extra("vikingdb-python-sdk", "viking") from None
        return IAM, APIKey, VikingMem

    def _iam_client(self, cls: Any, creds: Credentials) -> Any:
        iam, _, _ = self._sdk()
        auth = iam(ak=creds.access_key, sk=creds.secret_key)
        return cls(host=self.host, region=self.region, auth=auth, sts_token=creds.session_token, scheme=self.scheme)

    def memory_client(self) -> Any:
        """The VikingMem client of memory operations: the API key when set, else AK/SK."""
        if self._memory is None:
            self._require_credentials()
            _, api_key_auth, viking_mem = self._sdk()
            if self._api_key:
                auth = api_key_auth(api_key=self._api_key)
                self._memory = viking_mem(host=self.host, region=self.region, auth=auth, scheme=self.scheme)
            else:
                assert self._credentials is not None
                self._memory = self._iam_client(viking_mem, self._credentials)
        return self._memory

    def admin_client(self) -> Any:
        """The collection-management client (AK/SK only, as VeADK's)."""
        if self._admin is None:
            assert self._credentials is not None
            _, _, viking_mem = self._sdk()
            self._admin = self._iam_client(_admin_client(viking_mem), self._credentials)
        return self._admin

    def _collection(self) -> Any:
        return self.memory_client().get_collection(collection_name=self.index, project_name=self.project)

    # --- calls, errors -----------------------------------------------------------------

    def _classify(self, exc: Exception) -> Failure | None:
        from vikingdb.exceptions import VikingException

        if not isinstance(exc, VikingException):
            return None
        status, code, message = exc.status_code, exc.code, str(exc.message)
        if status is None and message.startswith("failed to run"):
            return Failure(fail.connection_kind(message), connection_reason(message))
        if status == 200:  # a 200 whose body is not JSON
            return Failure(fail.MALFORMED, "the reply is not JSON", status=status)
        kind = fail.kind_of_status(status)
        if kind not in (fail.AUTH, fail.THROTTLED):
            kind = CODE_KINDS.get(code, kind)
        return Failure(kind, message, status=status, code=code)

    def service(self) -> fail.Service:
        """How this collection's failures are told (`veadk_mem.failure.report`)."""
        return fail.Service(
            where=f"VikingDB memory at {self.endpoint}",
            auth_hint=lambda _failure, what: self._auth_hint(management="collection/" in what),
            url_hint=f"check {BASE_URL_ENV} and the network",
            missing=lambda _failure, _what: NotFound(
                f"VikingDB memory collection {self.index!r} does not exist in project {self.project!r}"
            ),
        )

    def _reply(self, what: str, res: Any) -> dict[str, Any]:
        """The `data` of a `{"code": 0, "data": ...}` reply; any other code is that error."""
        if not isinstance(res, dict) or "code" not in res:
            raise Failure("malformed", f"expected a JSON object with 'code', got {one_line(repr(res), 80)}")
        code = res.get("code")
        if code != 0:
            raise Failure(CODE_KINDS.get(code, fail.REFUSED), str(res.get("message") or ""), code=code)
        data = res.get("data")
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise Failure("malformed", f"'data' is {type(data).__name__}, not an object")
        return data

    async def _call(self, what: str, fn: Callable[[], Any]) -> dict[str, Any]:
        """One SDK call, checked and retried; returns the reply's data."""
        return await fail.call(
            self.service(),
            f"calling {what}",
            lambda: asyncio.to_thread(lambda: self._reply(what, fn())),
            classify=self._classify,
            delays=self.retry_delays,
        )

    # --- collection --------------------------------------------------------------------

    async def collection_exists(self) -> bool:
        """Whether the collection exists (needs AK/SK: the info endpoint refuses API keys)."""
        admin = self.admin_client()
        body = json.dumps({"CollectionName": self.index, "ProjectName": self.project})
        try:
            await self._call("collection/info", lambda: admin.json_exception("GetCollection", {}, body))
        except NotFound:
            return False
        return True

    async def ensure_collection(self) -> None:
        """Create the collection with the configured memory types when it is missing (AK/SK only).

        With only an API key VeADK skips this check, and so does vmem: saving into a
        missing collection then fails with a message naming it.
        """
        if self._collection_ready or self._credentials is None:
            return
        if not await self.collection_exists():
            body = json.dumps(
                {
                    "CollectionName": self.index,
                    "ProjectName": self.project,
                    "CollectionType": self.env.get("DATABASE_VIKINGMEM_COLLECTION_TYPE") or "standard",
                    "Description": "Created by vmem (veadk-mem) for VeADK long-term memory",
                    "CustomEventTypeSchemas": [],
                    "CustomEntityTypeSchemas": [],
                    "BuiltinEventTypes": self.memory_types,
                    "BuiltinEntityTypes": [],
                }
            )
            admin = self.admin_client()
            try:
                await self._call("collection/create", lambda: admin.json_exception("CreateCollection", {}, body))
            except StoreError as exc:
                if f"code {COLLECTION_EXISTS}" not in exc.message:  # created meanwhile: fine
                    raise
        self._collection_ready = True

    # --- the contract ------------------------------------------------------------------

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """One add_session per session of these memories; ids are `<session id>/<position>`."""
        if not memories:
            return []
        self.memory_client()
        await self.ensure_collection()
        sessions: dict[str, list[MemoryRecord]] = {}
        unnamed = str(uuid.uuid4())  # VeADK makes one up when the session has no id
        for record in memories:
            sessions.setdefault(record.session_id or unnamed, []).append(record)
        collection = self._collection()
        ids: list[str] = []
        for session_id, records in sessions.items():
            metadata = {
                "default_user_id": user_id,
                "default_assistant_id": "assistant",
                "time": int(time.time() * 1000),
            }
            call = partial(
                collection.add_session,
                session_id=session_id,
                messages=[_message(r) for r in records],
                metadata=metadata,
            )
            try:
                await self._call("session/add", call)
            except VmemError as exc:  # the sessions sent before are stored: say how many
                raise fail.partial_write(exc, ids, len(memories)) from None
            ids.extend(f"{session_id}/{n}" for n in range(len(records)))
            if progress is not None:
                progress(len(records))
        return ids

    def _records(self, user_id: str, data: dict[str, Any]) -> list[MemoryRecord]:
        results = data.get("result_list") or []
        if not isinstance(results, list):
            raise fail.report(self.service(), Failure(fail.MALFORMED, "'result_list' is not a list"), "calling search")
        records: list[MemoryRecord] = []
        for item in results:
            if not isinstance(item, dict):
                continue
            info = item.get("memory_info")
            when = item.get("time")
            memory_id = str(item.get("id") or "")
            kind = "profile" if item.get("memory_category") == PROFILE_CATEGORY else "event"
            if memory_id:
                self._kinds[memory_id] = kind
            records.append(
                MemoryRecord(
                    text=memory_text(info),
                    user_id=str(item.get("user_id") or user_id),
                    session_id=str(item.get("session_id") or ""),
                    author="user",
                    id=memory_id,
                    created_at=when / 1000 if isinstance(when, (int, float)) else None,
                    score=float(item["score"]) if isinstance(item.get("score"), (int, float)) else None,
                    metadata={
                        "memory_type": item.get("memory_type"),
                        "memory_info": info,
                        "assistant_id": item.get("assistant_id"),
                    },
                )
            )
        return records

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """VeADK's search: filter user_id and the memory types, limit top_k; one record per result."""
        collection = self._collection()
        call = partial(
            collection.search_memory,
            query=query,
            filter={"user_id": user_id, "memory_type": self.memory_types},
            limit=top_k,
        )
        return list(self._records(user_id, await self._call("search", call)))

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The user's memories of the configured types: a search without a query, newest first."""
        collection = self._collection()
        call = partial(
            collection.search_memory,
            filter={"user_id": user_id, "memory_type": self.memory_types},
            limit=limit or LIST_LIMIT,
        )
        records = self._records(user_id, await self._call("search", call))
        records.sort(key=lambda r: r.created_at or 0.0, reverse=True)
        return records[:limit] if limit else records

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Delete events with event/delete and profiles with profile/delete, by id; only the user's own.

        The delete calls take an id alone: an id is deleted only when this user's listing holds it.
        """
        mine = {r.id for r in await self.list_memories(user_id)}
        collection = self._collection()
        deleted = 0
        for memory_id in dict.fromkeys(ids):
            kind = self._kinds.get(memory_id)
            if kind is None or memory_id not in mine:
                continue
            if kind == "profile":
                await self._call("profile/delete", partial(collection.delete_profile, profile_id=memory_id))
            else:
                await self._call("event/delete", partial(collection.delete_event, event_id=memory_id))
            deleted += 1
        return deleted

    async def profile(self, user_id: str) -> str:
        """`memory_info.user_profile` of the user's first memory_category 1 result ("" when none)."""
        collection = self._collection()
        call = partial(
            collection.search_memory,
            filter={"user_id": [user_id], "memory_category": PROFILE_CATEGORY},
            limit=LIST_LIMIT,
        )
        data = await self._call("search", call)
        results = data.get("result_list") or []
        if not isinstance(results, list) or not results or not isinstance(results[0], dict):
            return ""
        info = results[0].get("memory_info") or {}
        profile = info.get("user_profile", "") if isinstance(info, dict) else ""
        return profile if isinstance(profile, str) else json.dumps(profile, ensure_ascii=False)

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """Credentials present (named, never shown), endpoint answering, collection existing."""
        report = BackendHealth(target=self.target)
        source = self.credential_source()
        if not source:
            ak, sk, _ = key_names(self.provider)
            report.problems.append(f"no credentials: set {API_KEY_ENV}, or {ak} and {sk}")
            report.exists = False
            return report
        report.notes.append(f"credentials: {source}")
        report.notes.append(f"memory types: {', '.join(self.memory_types)}")
        try:
            if self._credentials is not None:
                report.exists = await self.collection_exists()
            else:
                collection = self._collection()
                probe = partial(collection.search_memory, filter={"user_id": user_id or "vmem-doctor"}, limit=1)
                try:
                    await self._call("search", probe)
                except NotFound:
                    report.exists = False
        except StoreError as exc:
            if exc.message.startswith("cannot reach"):
                raise
            report.problems.append(exc.message)
        if not report.exists and not report.problems:
            report.notes.append("collection missing: the first save creates it (needs AK/SK)")
        return report
