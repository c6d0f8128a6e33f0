"""The `memory` backend: memories in a dict of this process, gone when it ends.

The store of `ltm save --dry-run` (what would be saved goes here, not to the configured
store) and the shared fake of the tests: the same facade paths users run, with no server.
Search ranks by the query's terms found in a memory (the keyword index's terms), best
first; it is no model of any store's ranking. Instances built with the same `MemoryStore`
(by default the process's one) see each other's indexes, as the indexes of one store do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from veadk_mem.errors import BadInput
from veadk_mem.ltm.base import Capability, LongTermMemoryBackend, MemoryRecord
from veadk_mem.ltm.convert import searchable_text
from veadk_mem.ltm.keywords import index_terms, query_terms


@dataclass
class MemoryStore:
    """(index, user) -> content hash -> record: what one in-memory store holds."""

    held: dict[tuple[str, str], dict[str, MemoryRecord]] = field(default_factory=dict)

    def scope(self, index: str, user_id: str) -> dict[str, MemoryRecord]:
        """The user's memories in the index (an empty dict, kept, when none yet)."""
        return self.held.setdefault((index, user_id), {})


PROCESS_STORE = MemoryStore()


class MemoryBackend(LongTermMemoryBackend):
    """One index of a `MemoryStore`."""

    name: ClassVar[str] = "memory"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.LIST, Capability.DELETE, Capability.EDIT, Capability.HASHES, Capability.INDEXES, Capability.USERS}
    )

    def __init__(self, index: str, *, store: MemoryStore | None = None, **_: Any) -> None:
        self.index = index
        self.store = PROCESS_STORE if store is None else store

    @property
    def target(self) -> str:
        """No place: this process's memory."""
        return "(in memory)"

    def precheck_index_naming(self) -> None:
        """Any non-empty name."""
        if not self.index:
            raise BadInput("the memory backend needs an index name")

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """Keep copies of the memories the user's index does not hold yet; returns their ids."""
        held = self.store.scope(self.index, user_id)
        now = time.time()
        ids: list[str] = []
        for memory in memories:
            if memory.content_hash in held:
                continue
            memory.id = memory.id or f"{self.index}:{user_id}:{memory.content_hash[:16]}"
            memory.created_at = memory.created_at or now
            held[memory.content_hash] = replace(memory, vectors=None, score=None)
            ids.append(memory.id)
        return ids

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's memories holding most of the query's terms (share of terms found), best first."""
        wanted = set(query_terms(query))
        scored = []
        for record in self.store.scope(self.index, user_id).values():
            found = len(wanted & set(index_terms(searchable_text(record.text)).split()))
            if found:
                scored.append(replace(record, score=found / len(wanted)))
        scored.sort(key=lambda r: (-(r.score or 0.0), -(r.created_at or 0.0)))
        return scored[:top_k]

    async def existing_hashes(self, user_id: str, hashes: list[str]) -> set[str]:
        """The hashes among these the user's index holds."""
        return set(hashes).intersection(self.store.scope(self.index, user_id))

    async def list_memories(self, user_id: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The user's memories, newest first."""
        records = sorted(self.store.scope(self.index, user_id).values(), key=lambda r: -(r.created_at or 0.0))
        return [replace(r) for r in (records[:limit] if limit else records)]

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Drop the user's memories with these ids."""
        held = self.store.scope(self.index, user_id)
        gone = [h for h, r in held.items() if r.id in set(ids)]
        for digest in gone:
            del held[digest]
        return len(gone)

    async def known_indexes(self, user_id: str) -> list[str]:
        """The indexes of this store holding the user's memories."""
        return sorted(index for (index, user), held in self.store.held.items() if user == user_id and held)

    async def scopes(self) -> list[tuple[str, str]]:
        """Every (index, user) pair holding memories."""
        return sorted(scope for scope, held in self.store.held.items() if held)
