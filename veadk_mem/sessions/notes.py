"""What a read met besides its rows: warnings to show once, and the sessions it skipped.

Each call of the store gets its own `Notes` and hands it back with its result (`Listing`,
`Stream`), so that no warning outlives the command that met it and nothing is shared.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Notes:
    """Warnings (each to be said once) and the sessions skipped because a stored row could not be read."""

    warnings: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    damaged_keys: list[tuple[str, str, str]] = field(default_factory=list)  # (app, user, id), where known

    def skip(self, session: str, warning: str, key: tuple[str, str, str] | None = None) -> None:
        """Note `session` (its `key` when known) as skipped, with the warning that says why."""
        self.damaged.append(session)
        self.warnings.append(warning)
        if key is not None:
            self.damaged_keys.append(key)


class Listing(list[T]):
    """A list of results with the notes of the read that found them, and how many matched
    (`total`: the items' count, or a count alone, `SessionStore.list_sessions(count_only=True)`)."""

    def __init__(self, items: list[T], notes: Notes, *, total: int | None = None) -> None:
        super().__init__(items)
        self.notes = notes
        self.total = len(items) if total is None else total

    @property
    def warnings(self) -> list[str]:
        return self.notes.warnings

    @property
    def damaged(self) -> list[str]:
        return self.notes.damaged


class Stream(AsyncIterator[T]):
    """An async stream of results whose notes fill in as it is read (complete once it ended)."""

    def __init__(self, items: AsyncIterator[T], notes: Notes) -> None:
        self._items = items
        self.notes = notes

    def __aiter__(self) -> Stream[T]:
        return self

    async def __anext__(self) -> T:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        """Close the underlying generator (its transaction and connection) before it is read to the end."""
        close = getattr(self._items, "aclose", None)
        if close is not None:
            await close()

    @property
    def warnings(self) -> list[str]:
        return self.notes.warnings

    @property
    def damaged(self) -> list[str]:
        return self.notes.damaged
