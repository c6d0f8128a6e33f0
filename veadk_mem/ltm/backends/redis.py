"""The `redis` backend: VeADK's RediSearch layout, on redis-py's asyncio client.

VeADK 1.1.19 (`redis_backend.py`, through llama-index's `RedisVectorStore`) keeps one
RediSearch index per user, named `veadk-ltm/{index}/{user_id}`, over hashes whose keys
are that name, `_`, and a node id. Each hash holds `id` and `doc_id` (TAG), `text`
(TEXT), `vector` (FLOAT32 bytes; FLAT, COSINE) plus llama-index's `_node_content`
(the node as JSON, without its text) and `_node_type`. A long memory is split into
several nodes sharing one `doc_id`; list and delete treat a document as one memory.

vmem writes the same hashes (ids derived from the content, so a re-save rewrites the
same keys), pipelined: one round trip per batch. A Redis without the search module
(plain Redis, Valkey) still saves, lists and deletes them; search then scans the
user's vectors exactly, with a one-line warning.

Index prefixes overlap: the index of user `u` also covers the keys of user `u2`
(prefix `veadk-ltm/app/u`). A key belongs to a user only when what follows
`{prefix}_` is a node id (no `_`), and every read here filters on that.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from veadk_mem import failure as fail
from veadk_mem.embedding.base import normalize
from veadk_mem.errors import BadInput, NotSupported, StoreError
from veadk_mem.failure import one_line
from veadk_mem.ltm.backends.redis_wire import send_hsets
from veadk_mem.ltm.base import BackendHealth, Capability, LongTermMemoryBackend, MemoryRecord
from veadk_mem.ltm.keywords import redisearch_query
from veadk_mem.ltm.llama_layout import (
    Doc,
    check_embedder,
    doc_hashes,
    doc_record,
    llama_node,
    node_uuid,
    vmem_meta,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from veadk_mem.config import VmemSettings
    from veadk_mem.embedding.base import Embedder

EmbedderFactory = Callable[[str | None], "Embedder"]

PREFIX = "veadk-ltm"
SEPARATOR = "_"
BATCH = 500  # memories per pipelined round trip
_FIELDS = ("id", "doc_id", "text", "_node_content")


def index_name(index: str, user_id: str) -> str:
    """VeADK's RediSearch index name, which is also its key prefix."""
    return f"{PREFIX}/{index}/{user_id}"


def glob_escape(text: str) -> str:
    """`text` matched literally by SCAN MATCH."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisBackend(LongTermMemoryBackend):
    """Memories of one index in Redis, one RediSearch index per user, as VeADK lays them out."""

    name: ClassVar[str] = "redis"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.LIST,
            Capability.DELETE,
            Capability.EDIT,
            Capability.HASHES,
            Capability.INDEXES,
            Capability.USERS,
            Capability.EMBEDS,
        }
    )
    search_modes: ClassVar[tuple[str, ...]] = ("vector", "keyword", "hybrid")

    def __init__(
        self,
        index: str,
        *,
        settings: VmemSettings | None = None,
        embedder_factory: EmbedderFactory,
        url: str = "",
        **_: Any,
    ) -> None:
        from veadk_mem.config import VmemSettings

        self.index = index
        self.settings = settings or VmemSettings()
        config = self.settings.database.redis
        self.url = url or config.url.get_secret_value()
        self._config = config
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._client: Any = None
        self._search: bool | None = None
        self._docs: dict[str, dict[str, Doc]] = {}
        self._held: dict[str, set[str]] = {}  # content hashes per user, kept up to date by save
        self._dims: dict[str, int | None] = {}
        self._warned = False
        self.precheck_index_naming()

    # --- connection --------------------------------------------------------------------

    @property
    def target(self) -> str:
        """Where the server is, without secrets."""
        from veadk_mem.config import mask_url

        if self.url:
            return mask_url(self.url)
        return f"redis://{self._config.host}:{self._config.port}/{self._config.db}"

    @property
    def client(self) -> Any:
        if self._client is None:
            import redis.asyncio as aioredis

            options: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 30}
            if self.url:
                if not self.url.startswith(("redis://", "rediss://", "unix://")):
                    raise BadInput(
                        f"database.redis.url must start with redis://, rediss:// or unix://, got {self.target!r}"
                    )
                self._client = aioredis.Redis.from_url(self.url, **options)
            else:
                self._client = aioredis.Redis(
                    host=self._config.host,
                    port=self._config.port,
                    db=self._config.db,
                    username=self._config.username or None,
                    password=self._config.password.get_secret_value() or None,
                    **options,
                )
        return self._client

    def service(self) -> fail.Service:
        """How this server's failures are told (`veadk_mem.failure.report`)."""
        hint = "check DATABASE_REDIS_URL (or DATABASE_REDIS_HOST / DATABASE_REDIS_PORT)"
        return fail.password_service(f"redis at {self.target}", "DATABASE_REDIS", hint)

    def _classify(self, exc: Exception) -> fail.Failure | None:
        """What redis-py raised: a lost or refused connection, credentials, a busy server, a refusal."""
        import redis.exceptions as rex

        if isinstance(exc, rex.AuthenticationError):
            return fail.Failure(fail.AUTH)
        if isinstance(exc, (rex.ConnectionError, rex.TimeoutError, OSError)):
            return fail.Failure(fail.connection_kind(exc), _first_line(exc))
        if isinstance(exc, rex.ResponseError):
            text = _first_line(exc)
            if text.startswith(("WRONGPASS", "NOAUTH", "NOPERM")):
                return fail.Failure(fail.AUTH, text)
            if text.startswith(("BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN")):
                return fail.Failure(fail.SERVER, text)
            return fail.Failure(fail.REFUSED, text)
        if isinstance(exc, rex.RedisError):
            return fail.Failure(fail.REFUSED, _first_line(exc))
        return None

    def _tries(self, doing: str) -> AsyncIterator[Any]:
        """The attempts of one call under the retry policy (`veadk_mem.failure.attempts`)."""
        return fail.attempts(self.service(), doing, self._classify, self.retry_delays)

    async def has_search(self) -> bool:
        """Whether the server runs RediSearch (FT.* commands); asked once."""
        import redis.exceptions as rex

        if self._search is None:
            async for attempt in self._tries("checking for the search module"):
                with attempt:
                    try:
                        await self.client.execute_command("FT._LIST")
                        self._search = True
                    except rex.ResponseError as exc:
                        if "unknown command" not in str(exc).lower():
                            raise
                        self._search = False
        return bool(self._search)

    def precheck_index_naming(self) -> None:
        """VeADK checks nothing; vmem wants 1-200 printable characters without spaces."""
        bad = next((c for c in self.index if not c.isprintable() or c.isspace()), None)
        if not self.index or len(self.index) > 200 or bad is not None:
            shown = f": {bad!r} is not allowed" if bad is not None else ""
            raise BadInput(f"invalid redis index name {self.index!r}{shown}: use 1-200 printable characters, no spaces")

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._embedder_factory(None)
        return self._embedder

    # --- the index ---------------------------------------------------------------------

    async def index_dim(self, user_id: str) -> int | None:
        """The vector dimension of the user's index (or of a stored vector without search), None when new."""
        import redis.exceptions as rex

        name = index_name(self.index, user_id)
        if name in self._dims:
            return self._dims[name]
        if await self.has_search():
            async for attempt in self._tries(f"reading index {name}"):
                with attempt:
                    try:
                        info = await self.client.execute_command("FT.INFO", name)
                    except rex.ResponseError as exc:
                        if "unknown index" in str(exc).lower() or "no such index" in str(exc).lower():
                            return None
                        raise
            self._dims[name] = _info_dim(info)  # an index keeps its dimension for life
            return self._dims[name]
        for key in await self._user_keys(user_id):
            async for attempt in self._tries(f"reading {name}"):
                with attempt:
                    blob = await self.client.hget(key, "vector")
            if blob:
                return len(blob) // 4
        return None

    def _check_dim(self, user_id: str, stored: int | None, embedder: Embedder) -> None:
        if stored is not None and stored != embedder.dim:
            raise BadInput(
                f"redis index {index_name(self.index, user_id)!r} holds {stored}-d vectors but the embedder is "
                f"{embedder.describe()}: vectors of two dimensions cannot be compared",
                hint=f"configure model.embedding (name and dim) for the model that built it ({stored}-d)",
            )

    async def _create_index(self, user_id: str, dim: int) -> None:
        """FT.CREATE with VeADK's schema (as redisvl builds it from VeADK's IndexSchema)."""
        import redis.exceptions as rex

        name = index_name(self.index, user_id)
        args = [
            "FT.CREATE", name, "ON", "HASH", "PREFIX", "1", name, "SCHEMA",
            "id", "TAG", "SEPARATOR", ",",
            "doc_id", "TAG", "SEPARATOR", ",",
            "text", "TEXT", "WEIGHT", "1",
            "vector", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", str(dim), "DISTANCE_METRIC", "COSINE",
        ]  # fmt: skip
        async for attempt in self._tries(f"creating index {name}"):
            with attempt:
                try:
                    await self.client.execute_command(*args)
                except rex.ResponseError as exc:
                    if "already exists" not in str(exc).lower():  # a concurrent creator won: fine
                        raise

    # --- reading the user's hashes -------------------------------------------------------

    def _owns(self, user_id: str, key: str) -> bool:
        head = index_name(self.index, user_id) + SEPARATOR
        return key.startswith(head) and SEPARATOR not in key[len(head) :]

    async def _user_keys(self, user_id: str) -> list[str]:
        pattern = glob_escape(index_name(self.index, user_id) + SEPARATOR) + "*"
        keys: list[str] = []
        async for attempt in self._tries(f"listing the keys of {index_name(self.index, user_id)}"):
            with attempt:
                keys = []  # a retry scans again from the start
                async for raw in self.client.scan_iter(match=pattern, count=1000):
                    key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                    if self._owns(user_id, key):
                        keys.append(key)
        return keys

    async def _read_docs(self, user_id: str) -> dict[str, Doc]:
        """doc_id -> document, from every hash of the user (vectors left on the server)."""
        if user_id in self._docs:
            return self._docs[user_id]
        keys = await self._user_keys(user_id)
        docs: dict[str, Doc] = {}
        for start in range(0, len(keys), 1000):
            part = keys[start : start + 1000]
            rows = await self._hmget(part, _FIELDS, f"reading {index_name(self.index, user_id)}")
            for key, row in zip(part, rows, strict=True):
                node_id, doc_id, text, node_content = (_text(v) for v in row)
                if text is None and node_id is None:
                    continue  # deleted since the scan
                node = _json(node_content)
                doc = docs.setdefault(doc_id or node_id or key, Doc(doc_id or node_id or key))
                doc.keys.append(key)
                doc.chunks.append((node.get("start_char_idx"), text or ""))
                meta = node.get("metadata")
                if isinstance(meta, dict) and meta.get("vmem") and not doc.meta:
                    doc.meta = meta
        self._docs[user_id] = docs
        return docs

    async def _hmget(self, keys: list[str], fields: tuple[str, ...], doing: str) -> list[Any]:
        """HMGET of these fields of every key, pipelined in one round trip."""
        async for attempt in self._tries(doing):
            with attempt:
                pipe = self.client.pipeline(transaction=False)
                for key in keys:
                    pipe.hmget(key, *fields)
                return list(await pipe.execute())
        raise AssertionError("unreachable: the attempts either return or raise")

    def _record(self, user_id: str, doc: Doc) -> MemoryRecord:
        return doc_record(doc, user_id, index_name(self.index, user_id))

    # --- the contract ----------------------------------------------------------------

    async def existing_hashes(self, user_id: str, hashes: list[str]) -> set[str]:
        """The hashes among these that the user's documents already hold (VeADK's ones by their text)."""
        if user_id not in self._held:
            docs = await self._read_docs(user_id)
            self._held[user_id] = doc_hashes(docs)
        return self._held[user_id].intersection(hashes)

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """Write each memory's chunks with their vectors as hashes, one pipelined round trip per batch.

        A failure part-way says how many memories were stored; those keys are derived from
        the content, so re-running stores the rest and rewrites nothing twice.
        """
        if not memories:
            return []
        embedder = self.embedder
        search = await self.has_search()
        stored_dim = await self.index_dim(user_id)
        self._check_dim(user_id, stored_dim, embedder)
        if search and stored_dim is None:
            await self._create_index(user_id, embedder.dim)
            self._dims.pop(index_name(self.index, user_id), None)
        name = index_name(self.index, user_id)
        done: list[str] = []
        self._docs.pop(user_id, None)
        for start in range(0, len(memories), BATCH):
            batch = memories[start : start + BATCH]
            try:
                self.ready(batch)
            except StoreError as exc:  # the embedding endpoint failed: the batches before are stored
                raise fail.partial_write(exc, done, len(memories)) from None
            pieces = [(m, n, offset, text) for m in batch for n, (offset, text) in enumerate(m.chunks or ())]
            vectors = [vector for m in batch for vector in m.vectors]
            mappings = self._mappings(user_id, pieces, vectors)
            acked = 0  # HSET replies read, the most of any attempt: what the server acknowledged
            try:
                async for attempt in self._tries(f"saving into {name}"):
                    with attempt:
                        replies = [0]
                        try:  # a retry rewrites the same keys: what an earlier attempt stored stays stored
                            await send_hsets(self.client, mappings, replies)
                        finally:
                            acked = max(acked, replies[0])
            except StoreError as exc:
                # a memory is stored when the replies to all its chunks' HSETs came back
                whole = [m.id for m, n, _, _ in pieces[:acked] if n == 0]
                last = pieces[acked - 1] if acked else None
                if whole and last is not None and acked < len(pieces) and pieces[acked][0] is last[0]:
                    whole.pop()  # its last chunks were not acknowledged
                raise fail.partial_write(exc, [*done, *whole], len(memories)) from None
            done.extend(m.id for m in batch)
            if user_id in self._held:  # a replay of many sessions reads the user's documents once
                self._held[user_id].update(m.content_hash for m in batch)
            if progress is not None:
                progress(len(pieces))
        return done

    async def embedding_model(self) -> tuple[str, int] | None:
        """The configured embedder's model: VeADK's indexes do not record theirs, only the dimension."""
        return (self.embedder.name, self.embedder.dim)

    async def scopes(self) -> list[tuple[str, str]]:
        """Every (index, user) with a `veadk-ltm/{index}/{user}` search index (needs the search module)."""
        if not await self.has_search():
            raise NotSupported(
                f"redis at {self.target} has no search module: its users cannot be listed", hint="name one with --user"
            )
        async for attempt in self._tries("listing search indexes"):
            with attempt:
                names = await self.client.execute_command("FT._LIST")
        found = set()
        for raw in names:
            name = _text(raw) or ""
            index, sep, user = name.removeprefix(PREFIX + "/").partition("/")
            if name.startswith(PREFIX + "/") and sep and index and user:
                found.add((index, user))
        return sorted(found)

    def _mappings(
        self, user_id: str, pieces: list[tuple[MemoryRecord, int, int, str]], vectors: list[Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        """(key, hash fields) per chunk, with llama-index's `_node_content` so its reader parses them."""
        import numpy as np

        now = time.time()
        name = index_name(self.index, user_id)
        out: list[tuple[str, dict[str, Any]]] = []
        for (memory, number, offset, text), vector in zip(pieces, vectors, strict=True):
            memory.id = memory.id or node_uuid(name, memory.content_hash)
            memory.created_at = memory.created_at or now
            node_id = node_uuid(memory.id, str(number))
            meta = vmem_meta(memory)
            node = llama_node(node_id, memory.id, meta, offset, len(text))
            mapping = {
                "id": node_id,
                "doc_id": memory.id,
                "text": text,
                "vector": np.ascontiguousarray(vector, dtype=np.float32).tobytes(),
                "_node_content": json.dumps(node, ensure_ascii=False),
                "_node_type": "TextNode",
                "document_id": memory.id,
                "ref_doc_id": memory.id,
            }
            # The node's metadata as extra hash fields too, as llama-index's RedisVectorStore writes
            # a node's (node_to_metadata_dict): outside VeADK's schema, so its index and reads are unchanged.
            mapping.update(
                {k: v if isinstance(v, str) else repr(v) for k, v in meta.items() if v is not None and k not in mapping}
            )
            out.append((f"{name}{SEPARATOR}{node_id}", mapping))
        return out

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories by cosine: KNN through FT.SEARCH, or an exact scan without search."""
        if top_k <= 0:
            return []
        embedder = self.embedder
        stored = await self.index_dim(user_id)
        if stored is None:
            return []
        self._check_dim(user_id, stored, embedder)
        vector = await self.query_vector(query)
        if not await self.has_search():
            if self.warn is not None and not self._warned:
                self.warn(
                    f"redis at {self.target} has no search module: searching by an exact scan of the user's vectors"
                )
                self._warned = True
            return list(await self._scan_search(user_id, vector, top_k))
        return list(await self._knn(user_id, vector, top_k))

    async def search_by(self, user_id: str, query: str, top_k: int, mode: str) -> list[MemoryRecord]:
        """As the base does, after checking that keyword and hybrid search have an index and RediSearch."""
        if mode != "vector":
            if await self.index_dim(user_id) is None:
                return []
            if not await self.has_search():
                raise NotSupported(
                    f"redis at {self.target} has no search module: keyword and hybrid search need RediSearch",
                    hint="use --mode vector (an exact scan of the user's vectors)",
                )
        return await super().search_by(user_id, query, top_k, mode)

    async def keyword_search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories by BM25 over `text` (the field VeADK's index declares TEXT)."""

        expression = redisearch_query(query)
        if not expression or top_k <= 0:
            return []
        name = index_name(self.index, user_id)
        k = top_k
        while True:
            async for attempt in self._tries(f"searching {name}"):
                with attempt:
                    raw = await self.client.execute_command(
                        "FT.SEARCH", name, expression, "SCORER", "BM25", "WITHSCORES",
                        "RETURN", "4", "id", "doc_id", "text", "_node_content",
                        "LIMIT", "0", str(k), "DIALECT", "2",
                    )  # fmt: skip
            total, scored = _scored_hits(raw)
            best: dict[str, MemoryRecord] = {}
            for key, score, fields in scored:
                if not self._owns(user_id, key):
                    continue
                doc_id = fields.get("doc_id") or fields.get("id") or key
                if doc_id in best:
                    continue
                doc = Doc(doc_id, [key], [(None, fields.get("text", ""))])
                node = _json(fields.get("_node_content"))
                if isinstance(node.get("metadata"), dict) and node["metadata"].get("vmem"):
                    doc.meta = node["metadata"]
                record = self._record(user_id, doc)
                record.score = score
                record.metadata.update(score_kind="bm25", keyword_score=score)
                best[doc_id] = record
            if len(best) >= top_k or total <= k:
                return list(best.values())[:top_k]
            k *= 4

    async def _knn(self, user_id: str, vector: npt.NDArray[np.float32], top_k: int) -> list[MemoryRecord]:
        import numpy as np

        name = index_name(self.index, user_id)
        blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
        k = top_k  # widened below only when other users' keys or a memory's other chunks took places
        while True:
            async for attempt in self._tries(f"searching {name}"):
                with attempt:
                    raw = await self.client.execute_command(
                        "FT.SEARCH", name, f"*=>[KNN {k} @vector $vec AS vector_distance]",
                        "PARAMS", "2", "vec", blob, "SORTBY", "vector_distance", "ASC",
                        "RETURN", "5", "id", "doc_id", "text", "_node_content", "vector_distance",
                        "LIMIT", "0", str(k), "DIALECT", "2",
                    )  # fmt: skip
            hits = _search_hits(raw)[1]  # (its total is at most k for a KNN query)
            best: dict[str, MemoryRecord] = {}
            for key, fields in hits:
                if not self._owns(user_id, key):
                    continue  # another user whose id extends this one's (prefix overlap)
                doc_id = fields.get("doc_id") or fields.get("id") or key
                if doc_id in best:
                    continue  # hits come best first: a memory scores as its best chunk
                doc = Doc(doc_id, [key], [(None, fields.get("text", ""))])
                node = _json(fields.get("_node_content"))
                if isinstance(node.get("metadata"), dict) and node["metadata"].get("vmem"):
                    doc.meta = node["metadata"]
                record = self._record(user_id, doc)
                record.score = 1.0 - float(fields.get("vector_distance", 1.0))
                best[doc_id] = record
            if len(best) >= top_k or len(hits) < k:  # enough, or the index has no more
                return list(best.values())[:top_k]
            k *= 4

    async def _scan_search(self, user_id: str, vector: npt.NDArray[np.float32], top_k: int) -> list[MemoryRecord]:
        import numpy as np

        keys = await self._user_keys(user_id)
        rows: list[tuple[str, str, str, Any]] = []
        for start in range(0, len(keys), 1000):
            part = keys[start : start + 1000]
            fields = ("doc_id", "text", "_node_content", "vector")
            fetched = await self._hmget(part, fields, f"reading {index_name(self.index, user_id)}")
            for key, (doc_id, text, node_content, blob) in zip(part, fetched, strict=True):
                if blob and len(blob) == 4 * len(vector):
                    rows.append((key, _text(doc_id) or key, _text(text) or "", (node_content, blob)))
        if not rows:
            return []
        matrix = normalize(np.frombuffer(b"".join(r[3][1] for r in rows), dtype=np.float32).reshape(len(rows), -1))
        scores = matrix @ vector
        best: dict[str, MemoryRecord] = {}
        for i in np.argsort(-scores, kind="stable"):
            key, doc_id, text, (node_content, _) = rows[int(i)]
            if doc_id in best:
                continue
            doc = Doc(doc_id, [key], [(None, text)])
            node = _json(_text(node_content))
            if isinstance(node.get("metadata"), dict) and node["metadata"].get("vmem"):
                doc.meta = node["metadata"]
            record = self._record(user_id, doc)
            record.score = float(scores[int(i)])
            best[doc_id] = record
            if len(best) >= top_k:
                break
        return list(best.values())

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The user's memories (documents), newest first; VeADK's carry no time and come last."""
        docs = await self._read_docs(user_id)
        records = [self._record(user_id, d) for d in docs.values()]
        records.sort(key=lambda r: (r.created_at is not None, r.created_at or 0.0, r.id), reverse=True)
        return records[:limit] if limit is not None else records

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Delete these documents (every chunk of each) of the user; returns how many went."""
        if not ids:
            return 0
        docs = await self._read_docs(user_id)
        chosen = [docs[i] for i in dict.fromkeys(ids) if i in docs]
        keys = [k for d in chosen for k in d.keys]
        self._docs.pop(user_id, None)
        self._held.pop(user_id, None)
        for start in range(0, len(keys), 1000):
            async for attempt in self._tries(f"deleting from {index_name(self.index, user_id)}"):
                with attempt:
                    await self.client.delete(*keys[start : start + 1000])
        return len(chosen)

    async def known_indexes(self, user_id: str) -> list[str]:
        """Every index holding this user's memories: the `veadk-ltm/*/{user}` search indexes, or keys."""
        tail = f"/{user_id}"
        found: set[str] = set()
        if await self.has_search():
            async for attempt in self._tries("listing search indexes"):
                with attempt:
                    names = await self.client.execute_command("FT._LIST")
            for raw in names:
                name = _text(raw) or ""
                if name.startswith(PREFIX + "/") and name.endswith(tail) and len(name) > len(PREFIX) + len(tail) + 1:
                    found.add(name[len(PREFIX) + 1 : -len(tail)])
        pattern = f"{PREFIX}/*{glob_escape(tail + SEPARATOR)}*"
        async for attempt in self._tries("listing keys"):
            with attempt:
                async for raw in self.client.scan_iter(match=pattern, count=1000):
                    key = _text(raw) or ""
                    head, sep, rest = key.rpartition(tail + SEPARATOR)
                    if sep and SEPARATOR not in rest and head.startswith(PREFIX + "/"):
                        found.add(head[len(PREFIX) + 1 :])
        return sorted(found)

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """Server version, search module, the index's users, memories and vector dimension."""
        import redis.exceptions as rex

        report = BackendHealth(target=self.target)
        async for attempt in self._tries("connecting"):
            with attempt:
                info = await self.client.info("server")
        report.version = f"redis {info.get('redis_version', '?')}"
        search = await self.has_search()
        report.notes.append("search module: present" if search else "search module: absent (search scans exactly)")
        pattern = f"{PREFIX}/{self.index}/" if user_id is None else index_name(self.index, user_id)
        dims: set[int] = set()
        memories = 0
        if search:
            async for attempt in self._tries("listing search indexes"):
                with attempt:
                    names = [_text(n) or "" for n in await self.client.execute_command("FT._LIST")]
            names = [n for n in names if (n.startswith(pattern) if user_id is None else n == pattern)]
            for name in names:
                async for attempt in self._tries(f"reading index {name}"):
                    with attempt:
                        try:
                            index_info = await self.client.execute_command("FT.INFO", name)
                        except rex.ResponseError:
                            continue
                dim = _info_dim(index_info)
                if dim is not None:
                    dims.add(dim)
            report.exists = bool(names)
            report.notes.append(f"{len(names)} user index(es) under {PREFIX}/{self.index}/")
        if user_id is not None:
            memories = len(await self._read_docs(user_id))
            report.exists = report.exists or memories > 0
            report.memories = memories
        report.dimension = min(dims) if len(dims) == 1 else (None if not dims else max(dims))
        return check_embedder(report, dims, lambda: self.embedder)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):  # closing a broken connection must not hide the real error
                await client.aclose()


def _first_line(exc: BaseException) -> str:
    """An error as one short line, with any URL's password masked."""
    from veadk_mem.config import mask_url

    return one_line(mask_url(str(exc))) or type(exc).__name__


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _json(value: Any) -> dict[str, Any]:
    text = _text(value)
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _pairs(items: Any) -> dict[str, Any]:
    """A RESP2 flat list [k1, v1, k2, v2 ...] or a RESP3 map, as a dict with str keys.

    redis-py answers raw commands in the protocol the connection speaks: RESP2 (redis-py
    before 8, or `protocol=2`) or RESP3 (redis-py 8's default, or `protocol=3`), so every
    reply read here goes through this, whatever its shape.
    """
    if isinstance(items, dict):
        return {_text(k) or "": v for k, v in items.items()}
    items = list(items or [])
    return {_text(items[i]) or "": items[i + 1] for i in range(0, len(items) - 1, 2)}


def _info_dim(info: Any) -> int | None:
    """The `vector` field's DIM in an FT.INFO answer (attributes are flat lists in RESP2, maps in RESP3)."""
    for attribute in _pairs(info).get("attributes", []) or []:
        mapping = {k: _text(v) if isinstance(v, bytes) else v for k, v in _pairs(attribute).items()}
        if mapping.get("identifier") == "vector" or mapping.get("attribute") == "vector":
            for key, value in mapping.items():
                if key.lower() == "dim":
                    return int(str(value))
            if not isinstance(attribute, dict):  # an older module's list, where DIM may sit at any offset
                fields = [_text(x) if isinstance(x, bytes | str) else x for x in attribute]
                for i, item in enumerate(fields[:-1]):
                    if isinstance(item, str) and item.lower() == "dim":
                        return int(str(fields[i + 1]))
    return None


def _scored_hits(raw: Any) -> tuple[int, list[tuple[str, float, dict[str, str]]]]:
    """(total, [(key, score, fields)]) from an FT.SEARCH ... WITHSCORES answer in either protocol.

    RESP2 puts each score after its key (`[total, key1, score1, [f1, v1, ...], ...]`); RESP3
    gives it as `score` in each result map. The rest is `_search_hits`'s.
    """
    if isinstance(raw, dict):
        total, hits = _search_hits(raw)
        scores = [float(_text(_pairs(r).get("score")) or 0.0) for r in _pairs(raw).get("results") or []]
    else:
        items = list(raw or [])
        if not items:
            return 0, []
        scores = [float(_text(items[i]) or 0.0) for i in range(2, len(items), 3)]
        total, hits = _search_hits([items[0], *(x for i, x in enumerate(items[1:]) if i % 3 != 1)])
    return total, [(key, score, fields) for (key, fields), score in zip(hits, scores, strict=True)]


def _search_hits(raw: Any) -> tuple[int, list[tuple[str, dict[str, str]]]]:
    """(total, [(key, fields)]) from an FT.SEARCH answer in either protocol.

    RESP2: `[total, key1, [f1, v1, ...], key2, ...]`. RESP3: a map with `total_results` and
    `results`, each a map with `id` and `extra_attributes` (the RETURNed fields).
    """
    if isinstance(raw, dict):
        reply = _pairs(raw)
        hits: list[tuple[str, dict[str, str]]] = []
        for result in reply.get("results") or []:
            row = _pairs(result)
            fields = {k: _text(v) or "" for k, v in _pairs(row.get("extra_attributes") or {}).items()}
            hits.append((_text(row.get("id")) or "", fields))
        return int(reply.get("total_results") or 0), hits
    items = list(raw or [])
    if not items:
        return 0, []
    total = int(items[0])
    hits = []
    for i in range(1, len(items) - 1, 2):
        key = _text(items[i]) or ""
        fields = {k: _text(v) or "" for k, v in _pairs(items[i + 1]).items()}
        hits.append((key, fields))
    return total, hits
