"""The long-term-memory backend contract and the records that cross it.

A backend implements a few async methods: `precheck_index_naming`, `save` and `search`,
and `list`, `delete` and `profile` where its store can. Everything else (policy,
content-hash dedupe, index fallback, result conversion) lives once, in the facade.
Every method takes the user id and must scope to it: a search never returns another
user's memories.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from veadk_mem.errors import BadInput, NotSupported
from veadk_mem.failure import RETRY_DELAYS

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


class QueryVectors:
    """Query vectors embedded ahead, for a batch search: one run of batches instead of a call per query."""

    def __init__(self) -> None:
        self._vectors: dict[str, Any] = {}

    def prepare(self, embedder: Embedder, queries: list[str]) -> None:
        """Embed the queries not yet known, in the embedder's batches. Only this batch's vectors
        are kept: a batch search of any length holds one batch of them."""
        # A query too long for one chunk is left to embed_one, which averages its chunks.
        wanted = dict.fromkeys(queries)
        kept = {q: v for q, v in self._vectors.items() if q in wanted}
        todo = [q for q in wanted if q not in kept and embedder.fits(q)]
        if todo:
            kept.update(zip(todo, embedder.embed(todo), strict=True))
        self._vectors = kept

    def vector(self, embedder: Embedder, query: str) -> Any:
        """The query's vector: embedded ahead, or now."""
        found = self._vectors.get(query)
        return found if found is not None else embedder.embed_one(query)


# What a backend's search may return: records, or the raw chunks a hosted service gives
# (a string, a dict with text/abstract/summary/content, a {"memories": [...]} list).
Chunk = MemoryRecord | str | dict[str, Any]


class LongTermMemoryBackend(ABC):
    """A long-term-memory store, bound to one index."""

    name: ClassVar[str] = ""
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

    @abstractmethod
    def precheck_index_naming(self) -> None:
        """Raise BadInput with a clear message when `index` is not a valid name for this store."""

    @abstractmethod
    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """Store memories for the user; returns the ids stored.

        `progress(n)` is told as memories are stored (n of them each time) where the store
        saves piecemeal; the facade accounts for whatever a backend leaves untold.
        """

    @abstractmethod
    async def search(self, user_id: str, query: str, top_k: int) -> list[Chunk]:
        """The top_k memories of this user closest to the query, best first."""

    async def search_by(self, user_id: str, query: str, top_k: int, mode: str) -> list[Chunk]:
        """`search` in one of `search_modes` (the facade has checked the mode is one of them).

        vector: `search`, as VeADK retrieves; keyword: `keyword_search`; hybrid: the two
        rankings fused by reciprocal rank, each looked at to the same depth.
        """
        if mode == "vector":
            return await self.search(user_id, query, top_k)
        from veadk_mem.ltm.keywords import FUSION_DEPTH, fuse_records

        depth = max(FUSION_DEPTH, top_k)
        keyword = await self.keyword_search(user_id, query, top_k if mode == "keyword" else depth)
        if mode == "keyword":
            return list(keyword)
        by_vector = [r for r in await self.search(user_id, query, depth) if isinstance(r, MemoryRecord)]
        return list(fuse_records(by_vector, keyword, top_k))

    async def keyword_search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories by the store's own full-text ranking (stores with keyword search)."""
        raise NotSupported(f"the {self.name} backend has no keyword search")

    async def prepare_queries(self, queries: list[str]) -> None:  # noqa: B027  (a service embeds its own)
        """Embed many queries in batches ahead of their searches (batch search); stores that embed locally."""

    async def prepare_memories(self, memories: list[MemoryRecord]) -> None:  # noqa: B027
        """Embed the memories of many sessions in batches ahead of their saves (`memory.vectors`)."""

    async def existing_hashes(self, user_id: str, hashes: list[str]) -> set[str]:
        """Which of these content hashes the user's index already holds (empty when unknown)."""
        return set()

    def knows_what_it_holds(self) -> bool:
        """Whether `existing_hashes` asks the store; if not, the facade keeps a replay ledger instead."""
        return type(self).existing_hashes is not LongTermMemoryBackend.existing_hashes

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The user's memories, newest first."""
        raise NotSupported(f"the {self.name} backend cannot list memories")

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Delete the user's memories with these ids; returns how many went."""
        raise NotSupported(f"the {self.name} backend cannot delete memories")

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
        """Every (index, user) pair holding memories in this store, for `ltm export --all-users`."""
        raise NotSupported(f"the {self.name} backend cannot list its users", hint="name one with --user")

    async def embedding_model(self) -> tuple[str, int] | None:
        """(model, dimension) of the vectors this index holds or would be given; None when the service embeds."""
        return None

    async def profile(self, user_id: str) -> str:
        """The user profile the store derived from the memories."""
        raise NotSupported(f"the {self.name} backend has no user profile (VeADK returns an empty string for it)")

    async def known_indexes(self, user_id: str) -> list[str] | None:
        """Every index holding this user's memories, when the store can tell (for `forget`)."""
        return None

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """Reachability and contents of the store for `vmem doctor` (raises VmemError when unreachable).

        Backends report their server version, whether the index exists, how many memories it
        holds and its vector dimension against the configured embedder, where the store can tell.
        """
        return BackendHealth(target=self.index)

    async def close(self) -> None:  # noqa: B027  (most backends hold nothing to release)
        """Release connections."""
