"""The `opensearch` backend: VeADK's layout, on opensearch-py's async client.

VeADK 1.1.19 (`opensearch_backend.py`, through llama-index's `OpensearchVectorClient`)
keeps one index per user, named `{index}_{user_id}`, created with
`{"settings": {"index": {"knn": true, "knn.algo_param.ef_search": 100}}, "mappings":
{"properties": {"embedding": {"type": "knn_vector", "dimension": D, "method": {"name":
"hnsw", "space_type": "l2", "engine": "faiss", "parameters": {"ef_construction": 256,
"m": 48}}}}}}`. Each node is a document `{"embedding", "content", "metadata"}` whose
`_id` is the node id and whose `metadata` is llama-index's (`_node_content`, `doc_id`
...); a long memory is several documents sharing `metadata.doc_id`. Search is a `knn`
query; VeADK connects over TLS and verifies certificates only when given a cert path.

vmem writes the same documents with `_bulk` (one request per 500 memories, one refresh
per save), lists by paging `_search`, deletes with `_delete_by_query` on
`metadata.doc_id.keyword` (llama-index's own delete), and finds a user's indexes as the
indices named `*_{user}` that carry VeADK's mapping.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from veadk_mem import failure as fail
from veadk_mem.errors import BadInput, MissingSdk, StoreError, StoreRejected
from veadk_mem.failure import one_line
from veadk_mem.ltm.base import BackendHealth, Capability, LongTermMemoryBackend, MemoryRecord
from veadk_mem.ltm.llama_layout import (
    Doc,
    check_embedder,
    doc_hashes,
    doc_record,
    llama_node,
    node_metadata,
    node_uuid,
    vmem_meta,
)

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.embedding.base import Embedder

EmbedderFactory = Callable[[str | None], "Embedder"]

BATCH = 500  # memories per _bulk request
PAGE = 1000  # documents per _search page when listing
_NAME_CHARS = re.compile(r"[a-z0-9_\-.]")


ASYNC_HINT = "install it with: pip install 'opensearch-py[async]' (veadk-mem declares it; aiohttp is what is missing)"


def async_client_class() -> Any:
    """opensearch-py's AsyncOpenSearch, or MissingSdk (exit 4) naming the install line.

    opensearch-py imports its async client only when aiohttp is installed (its `async`
    extra); without it `from opensearchpy import AsyncOpenSearch` is a bare ImportError.
    """
    try:
        import opensearchpy
    except ImportError:
        raise MissingSdk("opensearch-py is not installed", hint=ASYNC_HINT) from None
    found = getattr(opensearchpy, "AsyncOpenSearch", None)
    if found is None:
        try:
            import aiohttp  # noqa: F401  (what opensearch-py's async client needs)
        except ImportError:
            reason = "aiohttp is not installed"
        else:
            reason = "it does not import in this environment"
        raise MissingSdk(f"opensearch-py's async client is not available: {reason}", hint=ASYNC_HINT)
    return found


def index_name(index: str, user_id: str) -> str:
    """VeADK's OpenSearch index of one user."""
    return f"{index}_{user_id}"


def check_name(name: str, what: str) -> None:
    """OpenSearch's index naming rules, as VeADK checks them, naming the offending character."""
    if not name:
        raise BadInput(f"invalid OpenSearch index name: the {what} is empty")
    if name[0] in "_-":
        raise BadInput(f"invalid OpenSearch index name {name!r}: it must not start with {name[0]!r}")
    bad = next((c for c in name if not _NAME_CHARS.fullmatch(c)), None)
    if bad is not None:
        why = "upper-case letters are not allowed" if bad.isupper() else "use a-z, 0-9, '_', '-' and '.'"
        raise BadInput(f"invalid OpenSearch index name {name!r}: {bad!r} is not allowed ({why}; from the {what})")


def index_body(dim: int) -> dict[str, Any]:
    """The settings and mapping llama-index's OpensearchVectorClient creates for VeADK."""
    return {
        "settings": {"index": {"knn": True, "knn.algo_param.ef_search": 100}},
        "mappings": {
            "properties": {
                "embedding": {
                    "type": "knn_vector",
                    "dimension": dim,
                    "method": {
                        "name": "hnsw",
                        "space_type": "l2",
                        "engine": "faiss",
                        "parameters": {"ef_construction": 256, "m": 48},
                    },
                }
            }
        },
    }


class OpensearchBackend(LongTermMemoryBackend):
    """Memories of one index in OpenSearch, one OpenSearch index per user, as VeADK lays them out."""

    name: ClassVar[str] = "opensearch"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.LIST, Capability.DELETE, Capability.EDIT, Capability.HASHES, Capability.INDEXES, Capability.EMBEDS}
    )
    search_modes: ClassVar[tuple[str, ...]] = ("vector", "keyword", "hybrid")

    def __init__(
        self,
        index: str,
        *,
        settings: VmemSettings | None = None,
        embedder_factory: EmbedderFactory,
        **_: Any,
    ) -> None:
        from veadk_mem.config import VmemSettings

        self.index = index
        self.settings = settings or VmemSettings()
        self._config = self.settings.database.opensearch
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._client: Any = None
        self._docs: dict[str, dict[str, Doc]] = {}
        self._held: dict[str, set[str]] = {}  # content hashes per user, kept up to date by save
        self._warned_tls = False
        self.requests = 0  # HTTP requests sent, for bench/ltm_backends.py
        self.precheck_index_naming()

    def precheck_index_naming(self) -> None:
        """The index part of `{index}_{user_id}` by OpenSearch's rules (the user is checked per call)."""
        check_name(self.index, "index")

    def _name(self, user_id: str) -> str:
        name = index_name(self.index, user_id)
        check_name(name, f"user id {user_id!r}")
        return name

    # --- connection --------------------------------------------------------------------

    @property
    def target(self) -> str:
        scheme = "https" if self._config.use_ssl else "http"
        return f"{scheme}://{self._config.host}:{self._config.port}"

    @property
    def client(self) -> Any:
        if self._client is None:
            async_client = async_client_class()
            config = self._config
            verify = bool(config.cert_path)
            if config.use_ssl and not verify and not self._warned_tls and self.warn is not None:
                self.warn(
                    f"opensearch at {self.target}: TLS certificates are not verified "
                    "(VeADK's default); set database.opensearch.cert_path to verify them"
                )
                self._warned_tls = True
            auth = (config.username, config.password.get_secret_value()) if config.username else None
            self._client = async_client(
                hosts=[{"host": config.host, "port": config.port}],
                http_auth=auth,
                use_ssl=config.use_ssl,
                verify_certs=verify,
                ssl_show_warn=False,
                ca_certs=config.cert_path or None,
                timeout=30,
            )
        return self._client

    def service(self) -> fail.Service:
        """How this server's failures are told (`veadk_mem.failure.report`)."""
        hint = "check DATABASE_OPENSEARCH_HOST / DATABASE_OPENSEARCH_PORT"
        return fail.password_service(f"opensearch at {self.target}", "DATABASE_OPENSEARCH", hint)

    def _classify(self, exc: Exception) -> fail.Failure | None:
        """What opensearch-py raised; a missing index is left to the callers that expect one."""
        import opensearchpy.exceptions as oex

        if isinstance(exc, oex.NotFoundError):
            return None
        if isinstance(exc, (oex.AuthenticationException, oex.AuthorizationException)):
            return fail.Failure(fail.AUTH, status=exc.status_code if isinstance(exc.status_code, int) else None)
        if isinstance(exc, oex.ConnectionError):  # SSLError and ConnectionTimeout included
            reason = _reason(exc)
            if isinstance(exc, oex.SSLError) or "CERTIFICATE_VERIFY_FAILED" in reason or "SSL" in reason:
                found = re.search(r"certificate verify failed: [^(')\]]*", reason)
                detail = found.group(0).strip() if found else reason
                return fail.Failure(
                    fail.UNREACHABLE,
                    f"TLS failed: {detail} (database.opensearch.cert_path must name the CA that signed "
                    "the server's certificate)",
                )
            return fail.Failure(fail.connection_kind(f"{reason} {exc.info}"), reason)
        if isinstance(exc, oex.TransportError):
            status = exc.status_code if isinstance(exc.status_code, int) else None
            return fail.Failure(fail.kind_of_status(status), _reason(exc), status=status)
        return None

    def _tries(self, doing: str) -> AsyncIterator[Any]:
        """The attempts of one call under the retry policy (`veadk_mem.failure.attempts`)."""
        self.requests += 1
        return fail.attempts(self.service(), doing, self._classify, self.retry_delays)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._embedder_factory(None)
        return self._embedder

    # --- the index ---------------------------------------------------------------------

    async def index_dim(self, name: str) -> int | None:
        """The `embedding` dimension of an index, None when it does not exist."""
        import opensearchpy.exceptions as oex

        try:
            async for attempt in self._tries(f"reading index {name}"):
                with attempt:
                    mapping = await self.client.indices.get_mapping(index=name)
        except oex.NotFoundError:
            return None
        return _mapping_dim(next(iter(mapping.values()), {}))

    def _check_dim(self, name: str, stored: int | None, embedder: Embedder) -> None:
        if stored is not None and stored != embedder.dim:
            raise BadInput(
                f"opensearch index {name!r} holds {stored}-d vectors but the embedder is "
                f"{embedder.describe()}: vectors of two dimensions cannot be compared",
                hint=f"configure model.embedding (name and dim) for the model that built it ({stored}-d)",
            )

    async def _create(self, name: str, dim: int) -> None:
        async for attempt in self._tries(f"creating index {name}"):
            with attempt:
                await self.client.indices.create(index=name, body=index_body(dim), ignore=400)  # 400: created meanwhile

    # --- reading -------------------------------------------------------------------------

    async def _read_docs(self, user_id: str) -> dict[str, Doc]:
        """doc_id -> document from every node of the user's index, vectors left on the server."""
        if user_id in self._docs:
            return self._docs[user_id]
        name = self._name(user_id)
        docs: dict[str, Doc] = {}
        if await self.index_dim(name) is None:
            return docs
        start = 0
        while True:
            body = {"query": {"match_all": {}}, "size": PAGE, "from": start, "_source": {"excludes": ["embedding"]}}
            async for attempt in self._tries(f"listing {name}"):
                with attempt:
                    answer = await self.client.search(index=name, body=body)
            hits = answer.get("hits", {}).get("hits", [])
            for hit in hits:
                self._add_hit(docs, hit)
            if len(hits) < PAGE:
                break
            start += PAGE
        self._docs[user_id] = docs
        return docs

    @staticmethod
    def _add_hit(docs: dict[str, Doc], hit: dict[str, Any]) -> Doc:
        source = hit.get("_source") or {}
        meta = source.get("metadata") or {}
        node = _json(meta.get("_node_content"))
        doc_id = str(meta.get("doc_id") or hit.get("_id"))
        doc = docs.setdefault(doc_id, Doc(doc_id))
        doc.keys.append(str(hit.get("_id")))
        doc.chunks.append((node.get("start_char_idx"), str(source.get("content", ""))))
        if meta.get("vmem") and not doc.meta:
            doc.meta = meta
        return doc

    def _record(self, user_id: str, doc: Doc) -> MemoryRecord:
        return doc_record(doc, user_id, index_name(self.index, user_id))

    # --- the contract ----------------------------------------------------------------

    async def existing_hashes(self, user_id: str, hashes: list[str]) -> set[str]:
        """The hashes among these that the user's index already holds (VeADK's documents by their text)."""
        if user_id not in self._held:
            docs = await self._read_docs(user_id)
            self._held[user_id] = doc_hashes(docs)
        return self._held[user_id].intersection(hashes)

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """Index each memory's chunks with their vectors with `_bulk`; one refresh at the end.

        Document ids derive from the content, so a re-run after a failure part-way stores
        the rest and rewrites nothing twice; the error says how many were stored.
        """
        if not memories:
            return []
        name = self._name(user_id)
        embedder = self.embedder
        stored = await self.index_dim(name)
        self._check_dim(name, stored, embedder)
        if stored is None:
            await self._create(name, embedder.dim)
        self._docs.pop(user_id, None)
        done: list[str] = []
        try:
            for start in range(0, len(memories), BATCH):
                batch = memories[start : start + BATCH]
                lines, pieces = self._bulk_lines(name, batch)
                answer: dict[str, Any] = {}
                async for attempt in self._tries(f"saving into {name}"):
                    with attempt:  # document ids derive from the content: a retry rewrites, never doubles
                        answer = await self.client.bulk(body=lines)
                if answer.get("errors"):
                    done.extend(_indexed(answer, pieces))
                    raise StoreRejected(
                        f"opensearch at {self.target} rejected documents of {name}: {_bulk_error(answer)}"
                    )
                done.extend(m.id for m in batch)
                if user_id in self._held:  # a replay of many sessions reads the user's documents once
                    self._held[user_id].update(m.content_hash for m in batch)
                if progress is not None:
                    progress(len(pieces))
        except StoreError as exc:
            if done:  # what was acknowledged is stored; make it searchable if the server still answers
                with contextlib.suppress(StoreError):
                    await self._refresh(name)
            raise fail.partial_write(exc, done, len(memories)) from None
        try:
            await self._refresh(name)
        except StoreError as exc:  # every document was acknowledged: stored, not yet searchable
            raise fail.partial_write(exc, done, len(memories)) from None
        return done

    async def _refresh(self, name: str) -> None:
        async for attempt in self._tries(f"refreshing {name}"):
            with attempt:
                await self.client.indices.refresh(index=name)

    def _bulk_lines(self, name: str, batch: list[MemoryRecord]) -> tuple[str, list[tuple[MemoryRecord, int, int, str]]]:
        """The NDJSON body of one `_bulk` request: an index action and a document per chunk."""
        self.ready(batch)
        pieces = [(m, n, offset, text) for m in batch for n, (offset, text) in enumerate(m.chunks or ())]
        vectors = [vector for m in batch for vector in m.vectors]
        now = time.time()
        lines: list[str] = []
        for (memory, number, offset, text), vector in zip(pieces, vectors, strict=True):
            memory.id = memory.id or node_uuid(name, memory.content_hash)
            memory.created_at = memory.created_at or now
            node_id = node_uuid(memory.id, str(number))
            node = llama_node(node_id, memory.id, vmem_meta(memory), offset, len(text))
            source = {
                "embedding": [float(x) for x in vector],
                "content": text,
                "metadata": node_metadata(node, memory.id),
            }
            lines.append(json.dumps({"index": {"_index": name, "_id": node_id}}))
            lines.append(json.dumps(source, ensure_ascii=False))
        return "\n".join(lines) + "\n", pieces

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories by a `knn` query, a memory scoring as its best chunk."""
        if top_k <= 0:
            return []
        name = self._name(user_id)
        stored = await self.index_dim(name)
        if stored is None:
            return []
        embedder = self.embedder
        self._check_dim(name, stored, embedder)
        vector = [float(x) for x in await self.query_vector(query)]
        k = max(top_k * 3, 10)
        body = {
            "size": k,
            "query": {"knn": {"embedding": {"vector": vector, "k": k}}},
            "_source": {"excludes": ["embedding"]},
        }
        async for attempt in self._tries(f"searching {name}"):
            with attempt:
                answer = await self.client.search(index=name, body=body)
        best: dict[str, MemoryRecord] = {}
        for hit in answer.get("hits", {}).get("hits", []):
            docs: dict[str, Doc] = {}
            doc = self._add_hit(docs, hit)
            if doc.doc_id in best:
                continue
            record = self._record(user_id, doc)
            record.score = float(hit.get("_score") or 0.0)
            best[doc.doc_id] = record
        return list(best.values())[:top_k]

    # --- keyword and hybrid search (`ltm search --mode`): `match` on VeADK's `content` ---

    async def keyword_search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories by OpenSearch's own full text search of `content` (its analyzer, BM25)."""
        name = self._name(user_id)
        if top_k <= 0 or await self.index_dim(name) is None:
            return []
        size = max(top_k * 3, 10)  # a long memory's chunks may take several places
        body = {"size": size, "query": {"match": {"content": {"query": query}}}, "_source": {"excludes": ["embedding"]}}
        async for attempt in self._tries(f"searching {name}"):
            with attempt:
                answer = await self.client.search(index=name, body=body)
        best: dict[str, MemoryRecord] = {}
        for hit in answer.get("hits", {}).get("hits", []):
            doc = self._add_hit({}, hit)
            if doc.doc_id in best:
                continue
            record = self._record(user_id, doc)
            record.score = float(hit.get("_score") or 0.0)
            record.metadata.update(score_kind="bm25", keyword_score=record.score)
            best[doc.doc_id] = record
        return list(best.values())[:top_k]

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The user's memories (documents), newest first; VeADK's carry no time and come last."""
        docs = await self._read_docs(user_id)
        records = [self._record(user_id, d) for d in docs.values()]
        records.sort(key=lambda r: (r.created_at is not None, r.created_at or 0.0, r.id), reverse=True)
        return records[:limit] if limit is not None else records

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Delete these documents (every chunk of each) with one `_delete_by_query`."""
        if not ids:
            return 0
        name = self._name(user_id)
        docs = await self._read_docs(user_id)
        chosen = [i for i in dict.fromkeys(ids) if i in docs]
        if not chosen:
            return 0
        self._docs.pop(user_id, None)
        self._held.pop(user_id, None)
        body = {"query": {"terms": {"metadata.doc_id.keyword": chosen}}}
        async for attempt in self._tries(f"deleting from {name}"):
            with attempt:
                await self.client.delete_by_query(index=name, body=body, refresh=True)
        return len(chosen)

    async def known_indexes(self, user_id: str) -> list[str]:
        """The vmem indexes of every `*_{user}` index carrying VeADK's mapping (a knn `embedding`)."""
        import opensearchpy.exceptions as oex

        suffix = f"_{user_id}"
        try:
            async for attempt in self._tries("listing indices"):
                with attempt:
                    found = await self.client.indices.get(index=f"*{suffix}", allow_no_indices=True)
        except oex.NotFoundError:
            return []
        out = []
        for name, info in (found or {}).items():
            if name.endswith(suffix) and len(name) > len(suffix) and _mapping_dim(info) is not None:
                out.append(name[: -len(suffix)])
        return sorted(out)

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """Server version, the index (or the user indexes under it), memories and vector dimension."""
        report = BackendHealth(target=self.target)
        async for attempt in self._tries("connecting"):
            with attempt:
                info = await self.client.info()
        version = info.get("version", {})
        report.version = f"{version.get('distribution', 'opensearch')} {version.get('number', '?')}"
        if self._config.use_ssl and not self._config.cert_path:
            report.notes.append("TLS certificates not verified (no cert_path)")
        pattern = index_name(self.index, user_id) if user_id is not None else f"{self.index}_*"
        async for attempt in self._tries("listing indices"):
            with attempt:
                found = await self.client.indices.get(index=pattern, allow_no_indices=True, ignore=404)
        dims = {d for d in (_mapping_dim(v) for v in (found or {}).values() if isinstance(v, dict)) if d is not None}
        names = [n for n, v in (found or {}).items() if isinstance(v, dict) and _mapping_dim(v) is not None]
        report.exists = bool(names)
        if user_id is None:
            report.notes.append(f"{len(names)} user index(es) named {self.index}_*")
        total = 0
        for name in names:
            async for attempt in self._tries(f"counting {name}"):
                with attempt:
                    total += int((await self.client.count(index=name)).get("count", 0))
        report.memories = total if user_id is None else len(await self._read_docs(user_id))
        report.dimension = next(iter(dims)) if len(dims) == 1 else (max(dims) if dims else None)
        return check_embedder(report, dims, lambda: self.embedder)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):  # closing a broken connection must not hide the real error
                await client.close()


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _indexed(answer: dict[str, Any], pieces: list[tuple[MemoryRecord, int, int, str]]) -> list[str]:
    """The ids of the memories every chunk of which a `_bulk` answer says was indexed (items
    come in the order of the request)."""
    failed = set()
    items = answer.get("items", [])
    for n, (memory, _, _, _) in enumerate(pieces):
        result: dict[str, Any] = next(iter(items[n].values()), {}) if n < len(items) else {"error": "missing"}
        if result.get("error") or not 200 <= int(result.get("status", 500)) < 300:
            failed.add(memory.id)
    return list(dict.fromkeys(m.id for m, _, _, _ in pieces if m.id not in failed))


def _bulk_error(answer: dict[str, Any]) -> str:
    """The reason of the first failed item of a `_bulk` answer."""
    for item in answer.get("items", []):
        result: dict[str, Any] = next(iter(item.values()), {})
        if result.get("error"):
            return _reason(result["error"])
    return "unknown error"


def _mapping_dim(info: dict[str, Any]) -> int | None:
    """The knn `embedding` dimension in an index's mapping (GET /{index} or /_mapping answer)."""
    field = ((info.get("mappings") or {}).get("properties") or {}).get("embedding") or {}
    if field.get("type") != "knn_vector":
        return None
    return int(field.get("dimension") or 0) or None


def _reason(value: Any) -> str:
    """The reason of an opensearch-py error (or error object), one line, short."""

    info = getattr(value, "info", None)
    if isinstance(value, dict):
        info = {"error": value}
    if isinstance(info, dict):
        error = info.get("error")
        if isinstance(error, dict):
            return one_line(error.get("reason") or error.get("type") or error)
        if error:
            return one_line(error)
    error = getattr(value, "error", None)
    if error and not isinstance(error, Exception):
        return one_line(error)
    return one_line(value) or type(value).__name__
