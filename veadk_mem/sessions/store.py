"""An async store over ADK's own session tables (sqlite, PostgreSQL, MySQL/MariaDB).

`SessionStore` reads and writes the database in the layout it already has (see
`layout.py`), through SQLAlchemy Core. It is a thin face: each verb hands the `Database`
(engine.py: engine, dialect, tables, reader, failure mapping) and the statements built on
it (statements.py) to the part that does the job, made, and its module imported, on first
use, so that a command imports only what it runs:

- `read_queries.py` (`Reads`): lists, summaries, sessions and events, streamed;
- `export.py` (`Export`): JSONL export in bounded short read transactions;
- `deletes.py` (`Deletes`): deletes in one transaction, re-checked on locked rows;
- `preflight.py` (`Preflight`, + `limits.py`): an import's checks against the database;
- `batches.py` (`Batches`): an import's write pipeline, over `upsert.py` (one batch in one
  transaction, state merge) and `big_writes.py` (a long line's session on its own);
  `importer.py`, above this face, runs a whole import (`validate.py`, `checks.py`: the
  file's checks; `records.py`: keys, filters and reports; `files.py`: spools and temp files);
- `stats.py`, `watch.py`, `upgrade.py`: the other commands' jobs.

No part keeps another's state: a read's warnings and skipped sessions come back with its
result (`notes.Listing`, `notes.Stream`), an import's in its report.

    async with SessionStore.from_settings(settings) as store:
        summaries = await store.list_sessions(SessionFilter(app="my_app"), limit=20)
        session = await store.get_session("my_app", "u1", "s1")
        async for session in store.iter_sessions(SessionFilter(user="u1")): ...
        report = await store.delete_sessions(SessionFilter(app="my_app", until=cutoff), dry_run=True)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Self

from veadk_mem.errors import AmbiguousId, BadInput, NotFound
from veadk_mem.sessions.dberrors import describe_db_error
from veadk_mem.sessions.engine import Database, StoreHealth
from veadk_mem.sessions.layout import Layout
from veadk_mem.sessions.notes import Listing, Notes, Stream
from veadk_mem.sessions.pruned import pruned_events
from veadk_mem.sessions.records import (
    PAGED_EVENTS,
    DeleteReport,
    FileKey,
    ImportReport,
    Progress,
    SessionFilter,
    SessionKey,
    SessionSummary,
    file_update_time,
    noop,
)
from veadk_mem.sessions.state_scopes import APP_PREFIX, TEMP_PREFIX, USER_PREFIX, merge_state, split_state, state_scope
from veadk_mem.sessions.vacuum import VacuumReport, vacuum

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.config import VmemSettings
    from veadk_mem.sessions.batches import Batches
    from veadk_mem.sessions.bigline import BigSession
    from veadk_mem.sessions.changes import Changes
    from veadk_mem.sessions.deletes import Deletes
    from veadk_mem.sessions.indexes import IndexReport
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.pages import PagedReads
    from veadk_mem.sessions.preflight import Preflight
    from veadk_mem.sessions.rawsession import RawSession
    from veadk_mem.sessions.read_queries import Listings
    from veadk_mem.sessions.session_reads import SessionReads
    from veadk_mem.sessions.stats import Stats
    from veadk_mem.sessions.stored_rows import StoredRows
    from veadk_mem.sessions.watch import Watcher

__all__ = [
    "APP_PREFIX",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "DeleteReport",
    "FileKey",
    "ImportReport",
    "Progress",
    "SessionFilter",
    "SessionKey",
    "SessionStore",
    "SessionSummary",
    "describe_db_error",
    "file_update_time",
    "iter_import_records",  # noqa: F822 (module __getattr__)
    "merge_state",
    "split_state",
    "state_scope",
    "validate_import",  # noqa: F822 (module __getattr__)
]


def __getattr__(name: str) -> Any:
    """The file checks, re-exported here for library users, imported when first asked for."""
    if name in ("iter_import_records", "validate_import"):
        from veadk_mem.sessions import validate

        return getattr(validate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SessionStore:
    """ADK session tables in one database; use as `async with SessionStore(url) as store`."""

    def __init__(
        self,
        url: str | Database,
        *,
        create: bool = False,
        busy_timeout: float | None = None,
        schema: str = "",
        password: str = "",
    ) -> None:
        if isinstance(url, Database):
            self.db = url
        else:
            self.db = Database(url, create=create, busy_timeout=busy_timeout, schema=schema, password=password)

    @classmethod
    def from_settings(cls, settings: VmemSettings, *, create: bool = False) -> Self:
        """The store VeADK's ShortTermMemory would use under these settings (NotSupported for 'local')."""
        return cls(Database.from_settings(settings, create=create))

    async def __aenter__(self) -> Self:
        await self.db.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.db.close()

    async def open(self) -> None:
        """Connect, and detect the layout; a database with no ADK tables is an error unless create=True."""
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()

    async def health(self) -> StoreHealth:
        """Reachability, layout and size of the database, for `vmem doctor` (see `Database.health`)."""
        return await self.db.health()

    @property
    def url(self) -> str:
        """The database's async URL, as vmem connects to it."""
        return self.db.url

    @property
    def display_url(self) -> str:
        """The database as the user named it, its password masked."""
        return self.db.display_url

    @property
    def layout(self) -> Layout:
        """The layout of the tables (`layout.Layout`), known once the store is open."""
        return self.db.layout

    def _listings(self, notes: Notes) -> Listings:
        from veadk_mem.sessions.read_queries import Listings

        return Listings(self.db, notes)

    def _sessions(self, notes: Notes) -> SessionReads:
        from veadk_mem.sessions.session_reads import SessionReads

        return SessionReads(self.db, notes)

    def _pages(self, notes: Notes) -> PagedReads:
        from veadk_mem.sessions.pages import PagedReads

        return PagedReads(self.db, notes)

    @cached_property
    def _deletes(self) -> Deletes:
        from veadk_mem.sessions.deletes import Deletes

        return Deletes(self.db)

    def _stored(self) -> StoredRows:
        from veadk_mem.sessions.stored_rows import StoredRows

        return StoredRows(self.db)

    @cached_property
    def _preflight(self) -> Preflight:
        from veadk_mem.sessions.preflight import Preflight

        return Preflight(self.db)

    @cached_property
    def _batches(self) -> Batches:
        from veadk_mem.sessions.batches import Batches

        return Batches(self.db)

    @property
    def delete_transactions(self) -> int:
        """Batches committed by this store's deletes (tests count them)."""
        return self._deletes.delete_transactions if "_deletes" in self.__dict__ else 0

    # --- reads (read_queries.py, session_reads.py, pages.py) -----------------------

    async def list_sessions(
        self,
        flt: SessionFilter | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        oldest_first: bool = False,
        compactions: bool = False,
    ) -> Listing[SessionSummary]:
        """Sessions matching `flt`, newest update first, without loading any event; with the
        warnings and the sessions skipped for unreadable state."""
        notes = Notes()
        found = await self._listings(notes).list_sessions(
            flt, limit=limit, offset=offset, oldest_first=oldest_first, compactions=compactions
        )
        return Listing(found, notes)

    async def count_sessions(self, flt: SessionFilter | None = None) -> int:
        """How many sessions match."""
        return await self._listings(Notes()).count_sessions(flt)

    async def get_summary(self, app: str, user: str, session_id: str) -> SessionSummary:
        """One session's summary; NotFound (exit 3) when it does not exist."""
        return await self._listings(Notes()).get_summary(app, user, session_id)

    async def sessions_by_id(self, prefix: str) -> list[SessionKey]:
        """The sessions whose id is `prefix` or begins with it, across apps and users
        (`Listings.sessions_by_id`: the exact id's alone when it names one; at most 20)."""
        return await self._listings(Notes()).sessions_by_id(prefix)

    async def resolve_id(self, prefix: str) -> SessionKey:
        """The one session whose id is `prefix` or begins with it, across apps and users;
        NotFound when none, AmbiguousId (exit 2, with the candidates) when several."""
        from veadk_mem.sessions.read_queries import ID_CANDIDATES

        if not prefix:
            raise BadInput("an empty session id names no session")
        keys = await self.sessions_by_id(prefix)
        if not keys:
            raise NotFound(f"no session id is or begins with {prefix!r} in {self.display_url}")
        if len(keys) > 1:
            shown = "at least " if len(keys) >= ID_CANDIDATES else ""
            raise AmbiguousId(
                f"session id {prefix!r} is ambiguous: {shown}{len(keys)} sessions match",
                candidates=[str(k) for k in keys],
                hint="give more of the id, or APP USER SESSION_ID",
            )
        return keys[0]

    async def pruned_events(self, app: str, user: str, session_id: str) -> int:
        """The older events `session prune` trimmed from this session (0: none, or no longer true)."""
        with self.db.failures():
            return await pruned_events(self.db, app, user, session_id)

    async def find_sessions(self, keys: Sequence[SessionKey]) -> Listing[SessionSummary]:
        """Summaries of the named sessions; NotFound naming every one that does not exist."""
        notes = Notes()
        return Listing(await self._listings(notes).find_sessions(keys), notes)

    def iter_event_data(
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> Stream[dict[str, Any]]:
        """A session's events as ADK stored them (snake_case data), oldest first, streamed."""
        notes = Notes()
        return Stream(self._sessions(notes).iter_event_data(app, user, session_id, last=last), notes)

    def iter_events(self, app: str, user: str, session_id: str, *, last: int | None = None) -> Stream[ev.Event]:
        """A session's events as `events.Event` models, oldest first, streamed."""
        notes = Notes()
        return Stream(self._sessions(notes).iter_events(app, user, session_id, last=last), notes)

    async def get_session(self, app: str, user: str, session_id: str, *, last: int | None = None) -> ev.Session:
        """The whole session (merged state, events oldest first); NotFound (exit 3) when missing."""
        return (await self.read_session(app, user, session_id, last=last))[0]

    async def read_session(
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> tuple[ev.Session, Notes]:
        """`get_session`, with the warnings its events gave (a v0 pickle refused, say)."""
        notes = Notes()
        return await self._sessions(notes).get_session(app, user, session_id, last=last), notes

    def session_json(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> Stream[str]:
        """The ADK session JSON of one session in text pieces, one event a piece."""
        notes = Notes()
        return Stream(self._pages(notes).session_json(app, user, session_id, last=last, page=page), notes)

    def session_jsonl(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> Stream[str]:
        """The session's events, each ADK event JSON on a line, as one version of the session."""
        notes = Notes()
        return Stream(self._pages(notes).session_jsonl(app, user, session_id, last=last, page=page), notes)

    def session_pages(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> Stream[SessionSummary | list[Any]]:
        """The session's summary, then its events' printed JSON a page (a list of texts) at a time
        (`PagedReads.session_pages`: one snapshot on PostgreSQL and MySQL; on sqlite, SessionChanged when
        an agent changed the session between two pages)."""
        notes = Notes()
        return Stream(self._pages(notes).session_pages(app, user, session_id, last=last, page=page), notes)

    def iter_sessions(self, flt: SessionFilter | None = None) -> Stream[ev.Session]:
        """Every matching session with its events, oldest update first, one at a time."""
        notes = Notes()
        return Stream(self._sessions(notes).iter_sessions(flt), notes)

    def changes(self) -> Changes:
        """The keyset reads `vmem ltm sync` follows the database by (`changes.Changes`)."""
        from veadk_mem.sessions.changes import Changes

        return Changes(self.db)

    # --- export (export.py) -----------------------------------------------------

    def export_jsonl(
        self,
        flt: SessionFilter | None = None,
        *,
        progress: Progress = noop,
        batch_events: int = 5000,
        paged_events: int = PAGED_EVENTS,
    ) -> Stream[str]:
        """The export file in text pieces: app_state and user_state records, then one session per
        line; its `damaged` names the sessions left out for unreadable rows (each in a warning)."""
        from veadk_mem.sessions.export import Export

        notes = Notes()
        part = Export(self.db, notes)
        return Stream(
            part.export_jsonl(flt, progress=progress, batch_events=batch_events, paged_events=paged_events), notes
        )

    # --- the other commands' jobs -------------------------------------------------

    async def stats(self, flt: SessionFilter | None = None, *, by: str | None = None, top: int = 10) -> Stats:
        """`vmem session stats`: counts, sizes and tokens of the sessions `flt` selects, computed in the database."""
        from veadk_mem.sessions.stats import collect_stats

        return await collect_stats(self.db, flt, by=by, top=top)

    async def vacuum(self, *, dry_run: bool = False, yes: bool = False) -> VacuumReport:
        """`vmem session vacuum`: return the disk the session tables no longer use (`vacuum.vacuum`)."""
        return await vacuum(self.db, dry_run=dry_run, yes=yes)

    async def indexes(self, *, create: bool = False, dry_run: bool = False) -> IndexReport:
        """`vmem session index`: the plan of each ADK query; with `create` (or `dry_run`, its plan), the
        indexes none serves made (`indexes.create_indexes`)."""
        from veadk_mem.sessions.indexes import create_indexes, inspect_indexes

        if create or dry_run:
            return await create_indexes(self.db, dry_run=dry_run)
        return await inspect_indexes(self.db)

    async def drop_connections(self) -> None:
        """A new pool after a failed read: the old one's connections may be dead, so they are dropped
        unclosed (closing a dead socket can hang); the next read connects anew."""
        await self.db.engine.dispose(close=False)

    def watch(self, app: str, user: str, session_id: str | None = None, **options: Any) -> Watcher:
        """A poller of one session (or a user's newest) for new events (`watch.Watcher`)."""
        from veadk_mem.sessions.watch import Watcher

        return Watcher(self.db, app, user, session_id, **options)

    # --- deletes (deletes.py, stored_rows.py) ------------------------------------

    async def delete_sessions(
        self,
        target: SessionFilter | Sequence[SessionKey] | Sequence[SessionSummary],
        *,
        purge_state: bool = False,
        dry_run: bool = False,
        recheck: bool | None = None,
        batch: int | None = None,
    ) -> DeleteReport:
        """Delete sessions and their events in batches of short transactions, never relying on ON DELETE CASCADE."""
        return await self._deletes.delete_sessions(
            target, purge_state=purge_state, dry_run=dry_run, recheck=recheck, batch=batch
        )

    async def stored_sessions(
        self, *, app: str | None = None, user: str | None = None, keys: Sequence[SessionKey] | None = None
    ) -> list[SessionSummary]:
        """Sessions by key as stored, state not decoded: a delete's view (a corrupt state is still deleted)."""
        return await self._stored().stored_sessions(app=app, user=user, keys=keys)

    async def orphan_events(
        self, *, app: str | None = None, user: str | None = None, keys: Sequence[SessionKey] | None = None
    ) -> dict[SessionKey, int]:
        """Event rows without a session row (a killed import's staging), counted by key."""
        return await self._stored().orphan_events(app=app, user=user, keys=keys)

    async def delete_orphans(
        self, *, app: str | None = None, user: str | None = None, keys: Sequence[SessionKey] | None = None
    ) -> int:
        """Delete the event rows `orphan_events` counts; how many went."""
        return await self._stored().delete_orphans(app=app, user=user, keys=keys)

    # --- imports (preflight.py, batches.py) --------------------------------------

    def offline_limits(self) -> Limits | None:
        """The limits of a sqlite file that does not exist yet (known without creating it), else None."""
        return self._preflight.offline_limits()

    async def limits(self) -> Limits:
        """What this database accepts (column sizes, time range, MariaDB's max_allowed_packet)."""
        return await self._preflight.limits()

    async def key_collisions(
        self, keys: Sequence[FileKey], states: Sequence[tuple[str, str | None, str]] = ()
    ) -> list[str]:
        """Distinct session keys the database's collation takes for one (MySQL/MariaDB only)."""
        return await self._preflight.key_collisions(keys, states)

    async def name_collisions(self, names: Sequence[tuple[str, str | None, str]]) -> list[str]:
        """App names, and user ids within an app, that the state tables' collation takes for one (MySQL)."""
        return await self._preflight.name_collisions(names)

    async def newer_sessions(self, keys: Sequence[FileKey]) -> list[str]:
        """The sessions of `keys` stored with an update time later than the file's."""
        return await self._preflight.newer_sessions(keys)

    async def import_records(
        self,
        records: Iterable[ev.Session | RawSession | BigSession | dict[str, Any]],
        *,
        force: bool = True,
        progress: Progress | None = None,
        batch_seconds: float = 0.5,
        batch_rows: int | None = None,
    ) -> ImportReport:
        """Upsert sessions and state records (validated input), committing in batches."""
        return await self._batches.import_records(
            records, force=force, progress=progress, batch_seconds=batch_seconds, batch_rows=batch_rows
        )

    def batch_rows(self) -> int:
        """Rows an import writes per transaction: fewer on sqlite, whose one write lock the agents wait for."""
        return self._batches.batch_rows()

    def big_line_bytes(self) -> int:
        """The JSONL line length from which an import streams a session and writes it on its own."""
        return self._batches.big_line_bytes()
