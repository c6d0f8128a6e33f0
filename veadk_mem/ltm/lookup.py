"""Where a memory is: the indexes to look in for a user's memories, and the one memory an id names.

One lookup for every command that takes a memory id (`ltm show`, `ltm edit`): the same scopes,
the same failures (NotFound, exit 3; NotSupported, exit 4, for a backend that cannot read its
memories back or, without --user, list its users).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veadk_mem.errors import NotFound
from veadk_mem.ltm.base import Capability

if TYPE_CHECKING:
    from veadk_mem.ltm.base import MemoryRecord
    from veadk_mem.ltm.facade import LongTermMemory


async def user_indexes(ltm: LongTermMemory, user_id: str, app_name: str | None) -> list[str]:
    """The indexes to look in for a user's memories: the app's (or the configured one) when named, else
    every index the store knows holds the user's memories, else VeADK's fallback."""
    if app_name or ltm.index or ltm.backend_config.get("index"):
        return [ltm.index_for(app_name)]
    known = await ltm.indexes_of(user_id)
    return known if known else [ltm.index_for(None)]


async def find_memory(
    ltm: LongTermMemory, memory_id: str, *, user_id: str | None, app_name: str | None
) -> tuple[str, str, MemoryRecord]:
    """(index, user, record) of the memory with this id; NotFound (exit 3) when no index holds it,
    NotSupported (exit 4) when the backend cannot read its memories back (or, without --user, its users)."""
    if user_id is not None:
        scopes = [(index, user_id) for index in await user_indexes(ltm, user_id, app_name)]
    else:
        backend = ltm.backend_for(app_name)
        backend.require(Capability.USERS)
        wanted = ltm.index_for(app_name) if app_name or ltm.index else None
        scopes = [(i, u) for i, u in await backend.scopes() if wanted is None or i == wanted]
    for index, user in scopes:
        backend = ltm.backend_for(index=index)
        backend.require(Capability.LIST)
        async for batch in backend.iter_memories(user):
            for record in batch:
                if record.id == memory_id:
                    return index, user, record
    where = f"of user {user_id!r}" if user_id is not None else "of any user"
    raise NotFound(f"no memory {where} has id {memory_id!r}", hint="ids are in `vmem ltm list --user U`")
