"""An async store over ADK's own session tables (sqlite, PostgreSQL, MySQL/MariaDB).

`SessionStore` reads and writes the database in the layout it already has (see
`layout.py`), through SQLAlchemy Core. It is a thin face of a few verbs: each hands the
`Database` (`store.db`, engine.py: engine, dialect, layout and tables, reader, the one
failure mapping, the URL as named) to the part that does the job, made, and its module
imported, on first use, so that a command imports only what it runs:

- `read_queries.py` (`Listings`), `session_reads.py`, `pages.py`: lists, summaries,
  sessions and events, streamed;
- `export.py` (`Export`): JSONL export in bounded short read transactions;
- `deletes.py` (`Deletes`): deletes in batches of short transactions, re-checked on locked rows;
- `store.rows` (`stored_rows.py`): rows by key as stored, whatever their state holds, and
  event rows without a session: what a delete and `forget` find beside the reads;
- `store.preflight` (`preflight.py`, + `limits.py`): an import's checks against the database;
- `batches.py` (`Batches`): an import's write pipeline, over `upsert.py` (one batch in one
  transaction, state merge) and `big_writes.py` (a long line's session on its own);
  `importer.py`, above this face, runs a whole import (`validate.py`, `checks.py`: the
  file's checks; `records.py`: keys, filters and reports; `files.py`: spools and temp files);
- `stats.py`, `watch.py`, `changes.py`: the other reads' jobs. A command's whole job over the
  database is its module's function, handed the store or its database: `upgrade.upgrade_store`,
  `retention.prune`, `vacuum.vacuum`, `indexes.inspect_indexes` / `create_indexes`.

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
from typing import TYPE_CHECKING, Any, Literal, Self, overload

from veadk_mem.errors import AmbiguousId, BadInput, NotFound
from veadk_mem.sessions.dberrors import describe_db_error
from veadk_mem.sessions.engine import Database
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

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.config import VmemSettings
    from veadk_mem.sessions.batches import Batches
    from veadk_mem.sessions.bigline import BigSession
    from veadk_mem.sessions.changes import Changes
    from veadk_mem.sessions.deletes import Deletes
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

        return Deletes(self.db, self.rows)

    @cached_property
    def _batches(self) -> Batches:
        from veadk_mem.sessions.batches import Batches

        return Batches(self.db)

    @cached_property
    def rows(self) -> StoredRows:
        """Rows by key as stored (`stored_rows.StoredRows`): sessions whatever their state holds, ids
        by prefix, event rows without a session (counted, deleted): a delete's and `forget`'s view."""
        from veadk_mem.sessions.stored_rows import StoredRows

        return StoredRows(self.db)

    @cached_property
    def preflight(self) -> Preflight:
        """An import's checks against this database (`preflight.Preflight`): limits, collisions
        under its collation, newer stored sessions, the line length streamed."""
        from veadk_mem.sessions.preflight import Preflight

        return Preflight(self.db)

    # --- reads (read_queries.py, session_reads.py, pages.py) -----------------------

    async def list_sessions(
        self,
        flt: SessionFilter | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        oldest_first: bool = False,
        compactions: bool = False,
        count_only: bool = False,
    ) -> Listing[SessionSummary]:
        """Sessions matching `flt`, newest update first, without loading any event; with the
        warnings and the sessions skipped for unreadable state. With `count_only`, none listed:
        only how many match (`.total`, one COUNT)."""
        notes = Notes()
        part = self._listings(notes)
        if count_only:
            return Listing([], notes, total=await part.count_sessions(flt))
        found = await part.list_sessions(
            flt, limit=limit, offset=offset, oldest_first=oldest_first, compactions=compactions
        )
        return Listing(found, notes)

    async def get_summary(self, app: str, user: str, session_id: str) -> SessionSummary:
        """One session's summary; NotFound (exit 3) when it does not exist."""
        return await self._listings(Notes()).get_summary(app, user, session_id)

    async def resolve_id(self, prefix: str) -> SessionKey:
        """The one session whose id is `prefix` or begins with it, across apps and users;
        NotFound when none, AmbiguousId (exit 2, with the candidates) when several."""
        from veadk_mem.sessions.read_queries import ID_CANDIDATES, sessions_by_id

        if not prefix:
            raise BadInput("an empty session id names no session")
        keys = await sessions_by_id(self.db, prefix)
        if not keys:
            raise NotFound(f"no session id is or begins with {prefix!r} in {self.db.display_url}")
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

    @overload
    def iter_events(
        self, app: str, user: str, session_id: str, *, last: int | None = None, raw: Literal[False] = False
    ) -> Stream[ev.Event]: ...

    @overload
    def iter_events(
        self, app: str, user: str, session_id: str, *, last: int | None = None, raw: Literal[True]
    ) -> Stream[dict[str, Any]]: ...

    def iter_events(
        self, app: str, user: str, session_id: str, *, last: int | None = None, raw: bool = False
    ) -> Stream[ev.Event] | Stream[dict[str, Any]]:
        """A session's events, oldest first, streamed: `events.Event` models, or with `raw` the
        data as ADK stored them (snake_case), which a timeline reads without validating."""
        notes = Notes()
        part = self._sessions(notes)
        if raw:
            return Stream(part.iter_event_data(app, user, session_id, last=last), notes)
        return Stream(part.iter_events(app, user, session_id, last=last), notes)

    async def get_session(
        self, app: str, user: str, session_id: str, *, last: int | None = None, notes: Notes | None = None
    ) -> ev.Session:
        """The whole session (merged state, events oldest first); NotFound (exit 3) when missing.
        The warnings its events gave (a v0 pickle refused, say) go to `notes` when given."""
        return await self._sessions(Notes() if notes is None else notes).get_session(app, user, session_id, last=last)

    def session_json(
        self,
        app: str,
        user: str,
        session_id: str,
        *,
        last: int | None = None,
        page: int = 1000,
        lines: bool = False,
    ) -> Stream[str]:
        """The ADK session JSON of one session in text pieces, one event a piece; with `lines`
        (`get --jsonl`), each event's JSON on a line of its own, read as one version of the session."""
        notes = Notes()
        part = self._pages(notes)
        read = part.session_jsonl if lines else part.session_json
        return Stream(read(app, user, session_id, last=last, page=page), notes)

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

    async def stats(self, flt: SessionFilter | None = None, *, by: str | None = None, top: int = 10) -> Stats:
        """`vmem session stats`: counts, sizes and tokens of the sessions `flt` selects, computed in the database."""
        from veadk_mem.sessions.stats import collect_stats

        return await collect_stats(self.db, flt, by=by, top=top)

    def watch(self, app: str, user: str, session_id: str | None = None, **options: Any) -> Watcher:
        """A poller of one session (or a user's newest) for new events (`watch.Watcher`)."""
        from veadk_mem.sessions.watch import Watcher

        return Watcher(self.db, app, user, session_id, **options)

    # --- export, import, delete (export.py, batches.py, deletes.py) ---------------

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
