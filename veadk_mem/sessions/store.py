"""An async store over ADK's own session tables (sqlite, PostgreSQL, MySQL/MariaDB).

`SessionStore` reads and writes the database in the layout it already has (see
`layout.py`), through SQLAlchemy Core. It is the connection and its statements
(`statements.py` over `engine.py`) with one part per job, each made, and its module
imported, on first use, so a command imports only what it runs:

- `engine.py`: connection, sqlite locking discipline, layout detection;
- `dberrors.py`: driver errors as one-line, secret-free messages;
- `statements.py`: statement building and caching, the one-call driver path;
- `read_queries.py` (`Reads`): lists, summaries, sessions and events, streamed;
- `export.py` (`Export`): JSONL export in bounded short read transactions;
- `deletes.py` (`Deletes`): deletes in one transaction, re-checked on locked rows;
- `preflight.py` (`Preflight`, + `limits.py`): an import's checks against the database;
- `batches.py` (`Batches`): an import's write pipeline, over `upsert.py` (one batch in one
  transaction, state merge) and `big_writes.py` (a long line's session on its own);
  `importer.py`, above this facade, runs a whole import (`validate.py`, `checks.py`: the
  file's checks; `records.py`: keys, filters and reports; `files.py`: spools and temp files).

Each part is given the store (its engine, tables and statement cache) and, where it needs
them, the other parts; none shares state with another but through those.

    async with SessionStore.from_settings(settings) as store:
        summaries = await store.list_sessions(SessionFilter(app="my_app"), limit=20)
        session = await store.get_session("my_app", "u1", "s1")
        async for session in store.iter_sessions(SessionFilter(user="u1")): ...
        report = await store.delete_sessions(SessionFilter(app="my_app", until=cutoff), dry_run=True)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from veadk_mem.sessions.dberrors import describe_db_error
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
from veadk_mem.sessions.statements import Statements

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.sessions.batches import Batches
    from veadk_mem.sessions.bigline import BigSession
    from veadk_mem.sessions.deletes import Deletes
    from veadk_mem.sessions.export import Export
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.preflight import Preflight
    from veadk_mem.sessions.rawsession import RawSession
    from veadk_mem.sessions.read_queries import Reads
    from veadk_mem.sessions.rows import Columns

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


class SessionStore(Statements):
    """ADK session tables in one database; use as `async with SessionStore(url) as store`."""

    @cached_property
    def _reads(self) -> Reads:
        from veadk_mem.sessions.read_queries import Reads

        return Reads(self)

    @cached_property
    def _export(self) -> Export:
        from veadk_mem.sessions.export import Export

        return Export(self, self._reads)

    @cached_property
    def _deletes(self) -> Deletes:
        from veadk_mem.sessions.deletes import Deletes

        return Deletes(self, self._reads)

    @cached_property
    def _preflight(self) -> Preflight:
        from veadk_mem.sessions.preflight import Preflight

        return Preflight(self)

    @cached_property
    def _batches(self) -> Batches:
        from veadk_mem.sessions.batches import Batches

        return Batches(self)

    @property
    def delete_transactions(self) -> int:
        """Batches committed by this store's deletes (tests count them)."""
        return self._deletes.delete_transactions if "_deletes" in self.__dict__ else 0

    # --- reads (read_queries.py) ------------------------------------------------

    async def list_sessions(
        self,
        flt: SessionFilter | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        oldest_first: bool = False,
        compactions: bool = False,
    ) -> list[SessionSummary]:
        """Sessions matching `flt`, newest update first, without loading any event."""
        return await self._reads.list_sessions(
            flt, limit=limit, offset=offset, oldest_first=oldest_first, compactions=compactions
        )

    async def count_sessions(self, flt: SessionFilter | None = None) -> int:
        """How many sessions match."""
        return await self._reads.count_sessions(flt)

    async def get_summary(self, app: str, user: str, session_id: str) -> SessionSummary:
        """One session's summary; NotFound (exit 3) when it does not exist."""
        return await self._reads.get_summary(app, user, session_id)

    async def find_sessions(self, keys: Sequence[SessionKey]) -> list[SessionSummary]:
        """Summaries of the named sessions; NotFound naming every one that does not exist."""
        return await self._reads.find_sessions(keys)

    def iter_event_data(
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """A session's events as ADK stored them (snake_case data), oldest first, streamed."""
        return self._reads.iter_event_data(app, user, session_id, last=last)

    def iter_events(self, app: str, user: str, session_id: str, *, last: int | None = None) -> AsyncIterator[ev.Event]:
        """A session's events as `events.Event` models, oldest first, streamed."""
        return self._reads.iter_events(app, user, session_id, last=last)

    async def get_session(self, app: str, user: str, session_id: str, *, last: int | None = None) -> ev.Session:
        """The whole session (merged state, events oldest first); NotFound (exit 3) when missing."""
        return await self._reads.get_session(app, user, session_id, last=last)

    def session_json(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> AsyncIterator[str]:
        """The ADK session JSON of one session in text pieces, one event a piece."""
        return self._reads.session_json(app, user, session_id, last=last, page=page)

    def iter_sessions(self, flt: SessionFilter | None = None) -> AsyncIterator[ev.Session]:
        """Every matching session with its events, oldest update first, one at a time."""
        return self._reads.iter_sessions(flt)

    # --- export (export.py) -----------------------------------------------------

    def export_jsonl(
        self,
        flt: SessionFilter | None = None,
        *,
        progress: Progress = noop,
        batch_events: int = 5000,
        paged_events: int = PAGED_EVENTS,
    ) -> AsyncIterator[str]:
        """The export file in text pieces: app_state and user_state records, then one session per line."""
        return self._export.export_jsonl(flt, progress=progress, batch_events=batch_events, paged_events=paged_events)

    # --- deletes (deletes.py) ---------------------------------------------------

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

    # --- writes (writes.py) -----------------------------------------------------

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

    def takes_columns(self) -> bool:
        """True when this database's import can write batches built elsewhere (`import_columns`)."""
        return self._batches.takes_columns()

    def column_style(self) -> str:
        """How such batches hold JSON text (`rows.TEXTS`), for the rows ADK itself writes here."""
        return self._batches.column_style()

    async def import_columns(
        self,
        batches: Iterator[Columns | int],
        *,
        force: bool = True,
        progress: Progress | None = None,
        bigs: dict[int, BigSession] | None = None,
    ) -> ImportReport:
        """`import_records` of batches whose columns were built elsewhere (`reader.ReaderProcess`)."""
        return await self._batches.import_columns(batches, force=force, progress=progress, bigs=bigs)
