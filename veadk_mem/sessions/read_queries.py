"""Read queries of sessions' summaries: lists, counts, one session's summary, ids by prefix."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import NotFound, StoreError
from veadk_mem.sessions.records import BATCH, SessionFilter, SessionKey, SessionSummary
from veadk_mem.sessions.statements import Statements

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.notes import Notes

FIRST_PAGE = 8  # events of a session's first page: its size is not known yet; later pages grow to `page`
MEMORY_FACTOR = 4  # memory a page or batch takes per byte of its events' JSON: rows, decoded, encoded
ID_CANDIDATES = 20  # sessions an id prefix lists at most when it is ambiguous
READ_ATTEMPTS = 3  # reads of a session an agent keeps changing on sqlite before vmem gives up


async def sessions_by_id(db: Database, prefix: str) -> list[SessionKey]:
    """`StoredRows.sessions_by_id`, here so that resolving a short id (`session get ID`) loads
    none of the write and delete parts `StoredRows` imports."""
    with db.failures():
        async with db.reader.connect() as conn:
            exact = await keys_by_id(db, conn, prefix, exact=True)
            return exact or await keys_by_id(db, conn, prefix, exact=False)


async def keys_by_id(db: Database, conn: AsyncConnection, prefix: str, *, exact: bool) -> list[SessionKey]:
    """One bounded query on the sessions table's key columns (never on events): an id equal to
    `prefix`, or a range of ids from it (`>=` and `<` its successor: a range a key index can seek)."""
    from sqlalchemy import select

    c = db.tables.sessions.c
    col = c.id.collate("C") if db.dialect == "postgresql" else c.id  # byte order, not the locale's
    if exact:
        terms = [c.id == prefix]
    else:
        terms = [col >= prefix]
        if prefix and ord(prefix[-1]) < 0x10FFFF:
            terms.append(col < prefix[:-1] + chr(ord(prefix[-1]) + 1))
    stmt = select(c.app_name, c.user_id, c.id).where(*terms).order_by(col, c.app_name, c.user_id)
    rows = await conn.execute(stmt.limit(ID_CANDIDATES * 4))
    # MySQL's collations compare case- and pad-insensitively: keep only what begins with `prefix` as written
    keys = [SessionKey(r.app_name, r.user_id, r.id) for r in rows]
    return [k for k in keys if (k.id == prefix if exact else k.id.startswith(prefix))][:ID_CANDIDATES]


def elsewhere_hint(session_id: str, keys: Sequence[SessionKey]) -> str | None:
    """Where else a session id that is not where it was asked for exists; None when nowhere."""
    if not keys:
        return None
    places = "; ".join(f"in app {k.app_name} for user {k.user_id}" for k in keys[:3])
    more = f" (and {len(keys) - 3} more)" if len(keys) > 3 else ""
    return f"session {session_id} exists {places}{more}"


class SessionChanged(Exception):
    """sqlite: the session changed between two pages of a read (an agent appended): read it again."""


class Listings:
    """Sessions' summaries (merged state, event counts; no event loaded), each read in one autocommit statement."""

    def __init__(self, db: Database, notes: Notes) -> None:
        self.db = db
        self.sql = Statements(db)
        self.notes = notes  # what the reads met: handed back with their results (store.py)

    async def states(
        self, conn: AsyncConnection, apps: Iterable[str], pairs: Iterable[tuple[str, str]]
    ) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
        from sqlalchemy import select

        t = self.db.tables
        app_list = sorted(set(apps))
        pair_set = set(pairs)
        app_states: dict[str, dict[str, Any]] = {}
        user_states: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(0, len(app_list), BATCH):
            chunk = app_list[i : i + BATCH]
            rows = await conn.execute(
                select(t.app_states.c.app_name, t.app_states.c.state).where(t.app_states.c.app_name.in_(chunk))
            )
            for row in rows:
                app_states[row.app_name] = dict(row.state or {})
            users = sorted({u for a, u in pair_set if a in chunk})
            for j in range(0, len(users), BATCH):
                rows = await conn.execute(
                    select(t.user_states.c.app_name, t.user_states.c.user_id, t.user_states.c.state).where(
                        t.user_states.c.app_name.in_(chunk), t.user_states.c.user_id.in_(users[j : j + BATCH])
                    )
                )
                for row in rows:
                    if (row.app_name, row.user_id) in pair_set:
                        user_states[(row.app_name, row.user_id)] = dict(row.state or {})
        return app_states, user_states

    async def list_sessions(
        self,
        flt: SessionFilter | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        oldest_first: bool = False,
        compactions: bool = False,
    ) -> list[SessionSummary]:
        """Sessions matching `flt`, newest update first, without loading any event.

        With `compactions`, each summary also counts its ADK context compactions (a scan of
        the stored events' JSON, so only for the listing that shows them).
        """
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                found = await self.sql.summaries(
                    conn, flt, limit=limit, offset=offset, oldest_first=oldest_first, notes=self.notes
                )
                if compactions:
                    await self.sql.count_compactions(conn, found)
                return found

    async def count_sessions(self, flt: SessionFilter | None = None) -> int:
        """How many sessions match."""
        from sqlalchemy import func, select

        with self.db.failures():
            async with self.db.reader.connect() as conn:
                stmt = select(func.count()).select_from(self.db.tables.sessions).where(*self.sql.session_where(flt))
                return int((await conn.execute(stmt)).scalar_one())

    async def get_summary(self, app: str, user: str, session_id: str) -> SessionSummary:
        """One session's summary; NotFound (exit 3) when it does not exist."""
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                return await self.one_summary(conn, app, user, session_id)

    async def one_summary(self, conn: AsyncConnection, app: str, user: str, session_id: str) -> SessionSummary:
        found = await self.sql.summaries(conn, None, None, one=(app, user, session_id), notes=self.notes)
        if not found and f"{app}/{user}/{session_id}" in self.notes.damaged:
            raise StoreError(self.notes.warnings[-1].removesuffix("; skipped"))
        if not found:
            elsewhere = await keys_by_id(self.db, conn, session_id, exact=True)
            raise NotFound(
                f"session {app}/{user}/{session_id}: not found in {self.db.display_url}",
                hint=elsewhere_hint(session_id, elsewhere),
            )
        return found[0]

    async def find_sessions(self, keys: Sequence[SessionKey]) -> list[SessionSummary]:
        """Summaries of the named sessions; NotFound naming every one that does not exist."""
        found: list[SessionSummary] = []
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                for i in range(0, len(keys), BATCH):
                    found += await self.sql.summaries(conn, None, keys[i : i + BATCH], notes=self.notes)
        wanted = set(keys)
        found = [s for s in found if s.key in wanted]  # MySQL's collation matches more than the exact key
        missing = [str(k) for k in keys if k not in {s.key for s in found}]
        if missing:
            raise NotFound(f"session not found: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        return found
