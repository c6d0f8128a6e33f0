"""Which memories a command reaches: where else a user's memories are when a read found none,
and whether a deletion takes the user's whole index (and so its replay-ledger entries).

Decisions the CLI only reports: `vmem ltm search`/`list` print `elsewhere`'s note after an
empty result, `vmem ltm delete` passes `whole_index` to the facade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veadk_mem.ltm.facade import LongTermMemory


async def elsewhere(ltm: LongTermMemory, app_name: str | None, user: str) -> str | None:
    """Where the user's memories are, when a search or listing found none in the index it read
    (an app name mistyped, memories saved under another app), or None when there is nothing to add."""
    index = await ltm.user_index(app_name, user)
    known = await ltm.indexes_of(user)
    if known is None or known == [index]:
        return None
    if not known:
        return f"user {user!r} has no memories in any index"
    return (
        f"no memories of user {user!r} in index {index!r}; the user's indexes: {', '.join(known)} (pick one with --app)"
    )


def whole_index(*, everything: bool, since: float | None, until: float | None) -> bool:
    """A deletion of every memory the user has in the index, not narrowed to a time window:
    the ledger's entries of that index go with it, so a later save sends them again."""
    return everything and since is None and until is None
