"""The export file of named sessions: `export_jsonl`'s own lines, only those of these sessions.

`export_jsonl` selects by filter (app, user, update time); a browser exports the sessions a
person picked. Each (app, user) of them is exported with the narrowest filter that covers
its sessions' update times, and of that the lines of the named sessions are kept (with their
times lines, the app's state record once and the user's): the same bytes `session export`
writes for them, read the same way, a long session a page at a time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from veadk_mem.events import TIMES_KIND
from veadk_mem.sessions.records import SessionFilter, SessionKey

if TYPE_CHECKING:
    from veadk_mem.sessions.store import SessionStore

_SLACK = 0.001  # seconds around the update times: the stored time's rounding, not a second session's


async def export_keys_jsonl(store: SessionStore, keys: Sequence[SessionKey]) -> AsyncIterator[str]:
    """The export lines of these sessions (NotFound naming any that does not exist)."""
    summaries = await store.find_sessions(list(dict.fromkeys(keys)))
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in summaries:
        groups[(s.app_name, s.user_id)].append(s.update_time)
    wanted = {(s.app_name, s.user_id, s.id) for s in summaries}
    lines = _Lines(wanted)
    for (app, user), times in sorted(groups.items()):
        flt = SessionFilter(app=app, user=user, since=min(times) - _SLACK, until=max(times) + _SLACK)
        async for piece in store.export_jsonl(flt):
            kept = lines.keep(piece)
            if kept:
                yield kept


class _Lines:
    """Keeps the wanted lines of an export's pieces. A piece starts at a line's start, except the
    1 MB pieces of a long session's line, which go on the way that line's start went."""

    def __init__(self, wanted: set[tuple[str, str, str]]) -> None:
        self.wanted = wanted
        self.apps: set[str] = set()
        self.keep_next = False  # the session line after a kept times line
        self.inside: bool | None = None  # within a long line: keeping it (True) or not (False)

    def keep(self, piece: str) -> str:
        out: list[str] = []
        pos = 0
        while pos < len(piece):
            end = piece.find("\n", pos)
            stop = len(piece) if end < 0 else end + 1
            part = piece[pos:stop]
            if self.inside is None and end >= 0:
                keep = self._starts(part)
            elif self.inside is None:  # a long session line's first piece
                keep, self.keep_next = self.keep_next, False
            else:
                keep = self.inside
            if keep:
                out.append(part)
            self.inside = None if end >= 0 else keep
            pos = stop
        return "".join(out)

    def _starts(self, line: str) -> bool:
        """Whether to keep this whole line (a state record, a times line, or a session line)."""
        if not line.startswith('{"kind":'):
            keep, self.keep_next = self.keep_next, False
            return keep
        record = json.loads(line)
        kind = record.get("kind")
        if kind == TIMES_KIND:
            self.keep_next = (record.get("appName"), record.get("userId"), record.get("sessionId")) in self.wanted
            return self.keep_next
        if kind == "app_state":
            first = record.get("appName") not in self.apps
            self.apps.add(record.get("appName"))
            return first
        users = {(a, u) for a, u, _ in self.wanted}
        return (record.get("appName"), record.get("userId")) in users
