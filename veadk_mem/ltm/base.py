"""The long-term-memory backend contract and the records that cross it.

A backend implements `target`, `precheck_index_naming`, `save` and `search` (which returns
`MemoryRecord`s: a hosted backend converts its service's payloads itself), and declares in
`capabilities` which optional methods its store has; the facade asks the declaration, never
which methods a class overrides. Policy, content-hash dedupe, the replay ledger, index
fallback and the MemoryEntry shape live once, in the facade. Every method takes the user id
and must scope to it: a search never returns another user's memories. docs/ltm.md has the
guide for backend authors.
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from veadk_mem.errors import BadInput, NotSupported
from veadk_mem.failure import RETRY_DELAYS
from veadk_mem.ltm.keywords import FUSION_DEPTH, fuse_records, reads
from veadk_mem.ltm.provenance import Provenance

if TYPE_CHECKING:
    from veadk_mem.embedding.base import Embedder


def content_hash(text: str) -> str:
    """The identity of a memory string for idempotent saves (sha256 hex).

    A text with no UTF-8 encoding (a lone surrogate: half an emoji ADK stored) is BadInput:
    no store or embedder can take it, so its session is reported, not the run lost.
    """
    try:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except UnicodeEncodeError as exc:
        char = f"\\u{ord(text[exc.start]):04x}"
        raise BadInput(f"memory text holds a lone surrogate ({char} at {exc.start}), which no store can hold") from None


@dataclass
class MemoryRecord:
    """One memory string as VeADK saves it, with where it came from.

    `text` is exactly the string handed to the backend (usually the JSON of a filtered
    Content). Backends fill `id`, `created_at` and, on search, `score`.
    """

    text: str
    user_id: str
    app_name: str = ""
    session_id: str = ""
    event_id: str = ""
    author: str = ""
    content_hash: str = ""
    id: str = ""
    created_at: float | None = None
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # The stored vectors (one per chunk) when a backend was asked for them (export), or the
    # vectors to store instead of embedding the text (import, when the models are equal).
    # A (chunks, dim) float32 array or nested lists of numbers.
    vectors: Any = None
    # The text of each vector, with its offset in the embedded text: set with `vectors` when
    # the facade embeds (`embed_records`); stores that keep chunk texts (VeADK's llama layout) read it.
    chunks: list[tuple[int, str]] | None = None
    # Where a hosted service says the memory came from (its uri, category, ...), shown as the
    # MemoryEntry's origin instead of this record's user, app, session and event.
    origin: dict[str, Any] | None = None
    # Where vmem got the memory from when it saved it (None: not recorded, e.g. saved by an agent).
    source: Provenance | None = None

    def __post_init__(self) -> None:
        if not self.content_hash:
            self.content_hash = content_hash(self.text)


@dataclass
class BackendHealth:
    """What `vmem doctor` says of a backend: where it is, what it holds, what is wrong.

    Part of the backend contract so doctor never probes private attributes. `target` names
    the store without secrets (a path, host:port, endpoint); `problems` are failures found
    (doctor reports the check as failed), `notes` plain facts ("search module: absent").
    """

    target: str
    version: str = ""
    exists: bool = True
    memories: int | None = None
    dimension: int | None = None
    model: str = ""
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def embed_records(embedder: Embedder, records: list[MemoryRecord], text_of: Callable[[str], str]) -> None:
    """Chunk each record's text (`text_of` its memory string) to fit the model and embed every
    chunk not embedded yet, all in the embedder's batches: sets `chunks` and `vectors`.

    Vectors given with one row per chunk (an import of the same model) are kept. The one place
    memories are chunked and embedded: the facade runs it off the event loop ahead of `save`.
    """
    todo: list[tuple[MemoryRecord, int]] = []
    pieces: list[str] = []
    for record in records:
        if record.chunks is None:
            record.chunks = embedder.spans(text_of(record.text))
        if record.vectors is not None and len(record.vectors) == len(record.chunks):
            continue
        todo.append((record, len(pieces)))
        pieces.extend(text for _, text in record.chunks)
    if not pieces:
        return
    vectors = embedder.embed(pieces)
    for record, start in todo:
        assert record.chunks is not None
        record.vectors = vectors[start : start + len(record.chunks)]


class QueryVectors:
    """Query vectors embedded ahead, for a batch search: one run of batches instead of a call per query."""

    def __init__(self) -> None:
        self._vectors: dict[str, Any] = {}

    def prepare(self, embedder: Embedder, queries: list[str]) -> None:
        """Embed the queries not yet known, in the embedder's batches (a long one: its chunks averaged).
        Only this batch's vectors are kept: a batch search of any length holds one batch of them."""
        wanted = dict.fromkeys(queries)
        kept = {q: v for q, v in self._vectors.items() if q in wanted}
        fresh = [q for q in wanted if q not in kept]
        short = [q for q in fresh if embedder.fits(q)]
        if short:
            kept.update(zip(short, embedder.embed(short), strict=True))
        kept.update((q, embedder.embed_one(q)) for q in fresh if not embedder.fits(q))
        self._vectors = kept

    def has(self, query: str) -> bool:
        """Whether the query was embedded ahead."""
        return query in self._vectors

    def vector(self, embedder: Embedder, query: str) -> Any:
        """The query's vector: embedded ahead, or now."""
        found = self._vectors.get(query)
        return found if found is not None else embedder.embed_one(query)


class Capability(StrEnum):
    """An optional part of the backend contract; a backend lists those its store has in `capabilities`."""

    LIST = "list"  # list_memories and iter_memories: the user's memories, newest first
    DELETE = "delete"  # delete_memories by id
    HASHES = "hashes"  # existing_hashes asks the store (else the facade keeps a replay ledger)
    INDEXES = "indexes"  # known_indexes: which indexes hold a user's memories
    USERS = "users"  # scopes: every (index, user) pair, for export --all-users
    PROFILE = "profile"  # profile: a user profile the service derives
    EMBEDS = "embeds"  # stores vectors of `embedder`: the facade embeds memories and queries for it
    REEMBED = "reembed"  # reembed_plan and reembed: moves its vectors to another model in place, recording it
    EDIT = "edit"  # keeps the text it is sent, and deletes: `ltm edit` replaces a memory by delete-and-add


# What a backend without the capability cannot do, for the one message of NotSupported.
LACKING: dict[Capability, tuple[str, str]] = {
    Capability.LIST: ("cannot list memories", ""),
    Capability.DELETE: ("cannot delete memories", ""),
    Capability.USERS: ("cannot list its users", "name one with --user"),
    Capability.PROFILE: ("has no user profile (VeADK returns an empty string for it)", ""),
    Capability.INDEXES: ("cannot tell which indexes hold a user's memories", "name the app with --app"),
    Capability.REEMBED: (
        "cannot re-embed in place: only the local store records its vectors' model (VeADK's Redis and "
        "OpenSearch layouts do not; hosted services embed on their side)",
        "vmem ltm export, then vmem ltm import into a new index with the new model configured",
    ),
}


class LongTermMemoryBackend(ABC):
    """A long-term-memory store, bound to one index."""

    name: ClassVar[str] = ""
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    # Why this store lacks a capability, where it has more to say than LACKING: (what, hint).
    lacking: ClassVar[dict[Capability, tuple[str, str]]] = {}
    index: str
    # Set by the facade: how a backend tells the operator something (stderr in the CLI):
    # a warning, or a note on progress (a hosted service still working).
    warn: Callable[[str], None] | None = None
    notice: Callable[[str], None] | None = None

    # `ltm search --mode`: the rankings this store can give (`vector` is what a VeADK agent
    # retrieves; a hosted service's own search counts as its vector mode) and its default.
    search_modes: ClassVar[tuple[str, ...]] = ("vector",)
    default_search_mode: ClassVar[str] = "vector"
    # The waits of the one retry policy (veadk_mem.failure), the same for every store.
    retry_delays: ClassVar[tuple[float, ...]] = RETRY_DELAYS

    def can(self, capability: Capability) -> bool:
        """Whether this backend declares the capability."""
        return capability in self.capabilities

    @classmethod
    def require(cls, capability: Capability) -> None:
        """NotSupported (exit 4) naming what this backend cannot do, unless it declares the capability."""
        if capability not in cls.capabilities:
            default = LACKING.get(capability, (f"has no {capability.value} capability", ""))
            what, hint = cls.lacking.get(capability, default)
            raise NotSupported(f"the {cls.name} backend {what}", hint=hint or None)

    @property
    @abstractmethod
    def target(self) -> str:
        """Where the store is, without secrets (a path, host:port, endpoint): for doctor, the ledger, messages."""

    @property
    def ledger_store(self) -> str:
        """The store's name in the replay ledger's scope: the target (a backend may keep an older name)."""
        return self.target

    @abstractmethod
    def precheck_index_naming(self) -> None:
        """Raise BadInput with a clear message when `index` is not a valid name for this store."""

    @abstractmethod
    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """Store memories for the user; returns the ids stored (for EMBEDS, each comes with its chunks and vectors).

        `progress(n)` is told as memories are stored (n of them each time) where the store
        saves piecemeal; the facade accounts for whatever a backend leaves untold.
        """

    @abstractmethod
    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The top_k memories of this user closest to the query, best first, with their scores."""

    async def search_by(self, user_id: str, query: str, top_k: int, mode: str) -> list[MemoryRecord]:
        """`search` in one of `search_modes` (the facade has checked the mode is one of them).

        vector: `search`, as VeADK retrieves; keyword: `keyword_search`; hybrid: the two
        rankings fused by `keywords.fuse_scores`, each looked at to the same depth.
        """
        if mode == "vector":
            return await self.search(user_id, query, top_k)

        depth = max(FUSION_DEPTH, top_k)
        keyword = await self.keyword_search(user_id, query, top_k if mode == "keyword" else depth)
        if mode == "keyword":
            return list(keyword)
        blind = not reads(self.embedder.reads_cjk, query)
        return list(fuse_records(await self.search(user_id, query, depth), keyword, top_k, blind=blind))

    async def keyword_search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories by the store's own full-text ranking (`keyword` in search_modes)."""
        raise NotSupported(f"the {self.name} backend has no keyword search")

    # --- Capability.EMBEDS: the facade chunks and embeds, off the event loop, with `embedder` ---

    @property
    def embedder(self) -> Embedder:
        """The embedder of this index's vectors."""
        raise NotSupported(f"the {self.name} backend embeds nothing in this process")

    def embedding_text(self, memory: str) -> str:
        """What of a memory string is embedded: the string itself (a store may embed less)."""
        return memory

    @property
    def queries(self) -> QueryVectors:
        """Query vectors the facade embedded ahead of the searches."""
        held: QueryVectors | None = self.__dict__.get("_query_vectors")
        if held is None:
            held = self.__dict__["_query_vectors"] = QueryVectors()
        return held

    def ready(self, memories: list[MemoryRecord]) -> None:
        """Make sure every memory has its chunks and vectors: what the facade handed over, else
        embedded now, on this thread (a caller of `save` that did not go through the facade)."""
        embed_records(self.embedder, memories, self.embedding_text)

    async def query_vector(self, query: str) -> Any:
        """The query's vector: embedded ahead by the facade (a batch search), else now in a worker
        thread (on the loop for an `inline` embedder, whose hop would cost more than its work)."""
        if self.queries.has(query):
            pass
        elif self.embedder.inline:
            self.queries.prepare(self.embedder, [query])
        else:
            await asyncio.to_thread(self.queries.prepare, self.embedder, [query])
        return self.queries.vector(self.embedder, query)

    async def existing_hashes(self, user_id: str, hashes: list[str]) -> set[str]:
        """Which of these content hashes the user's index already holds (Capability.HASHES)."""
        return set()

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The user's memories, newest first (Capability.LIST)."""
        self.require(Capability.LIST)
        return []

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Delete the user's memories with these ids; returns how many went (Capability.DELETE)."""
        self.require(Capability.DELETE)
        return 0

    async def iter_memories(
        self, user_id: str, *, vectors: bool = False, batch: int = 1000
    ) -> AsyncIterator[list[MemoryRecord]]:
        """The user's memories in this index, in batches (for export); with `vectors`, their vectors too.

        The default lists everything at once; stores that can page override it so an
        export runs in constant memory.
        """
        if vectors:
            raise NotSupported(f"the {self.name} backend cannot export vectors: leave out --vectors")
        records = await self.list_memories(user_id)
        for start in range(0, len(records), batch):
            yield records[start : start + batch]

    async def scopes(self) -> list[tuple[str, str]]:
        """Every (index, user) pair holding memories in this store, for `ltm export --all-users` (USERS)."""
        self.require(Capability.USERS)
        return []

    async def embedding_model(self) -> tuple[str, int] | None:
        """(model, dimension) of the vectors this index holds or would be given; None when the service embeds."""
        return None

    async def profile(self, user_id: str) -> str:
        """The user profile the store derived from the memories (Capability.PROFILE)."""
        self.require(Capability.PROFILE)
        return ""

    async def known_indexes(self, user_id: str) -> list[str] | None:
        """Every index holding this user's memories, when the store can tell (for `forget`; INDEXES)."""
        return None

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """Reachability and contents of the store for `vmem doctor` (raises VmemError when unreachable).

        Backends report their server version, whether the index exists, how many memories it
        holds and its vector dimension against the configured embedder, where the store can tell.
        """
        return BackendHealth(target=self.target)

    async def close(self) -> None:  # noqa: B027  (most backends hold nothing to release)
        """Release connections."""
