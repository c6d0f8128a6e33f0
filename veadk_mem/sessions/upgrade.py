"""`session upgrade`: an ADK v0 (pickle) session database brought to the v1 JSON layout, in place.

ADK's own migration writes into another database (adk-python #4319); an owner whose agents
must keep their database URL needs the tables converted where they are. The steps:

1. sqlite: take the write lock (BEGIN IMMEDIATE) and hold it to the end; refused when
   another connection holds it. Count sessions, events and state rows, with the latest times.
2. Write a JSONL backup with the session export, read it back and count it against the database.
   Pickled actions are decoded with conversion bounds (set by memory, not the listing's value
   count: safepickle.converting); an event whose actions cannot be decoded at all stops the
   upgrade, naming it, unless kept raw (--keep-undecodable: the pickle, base64, in the event's
   customMetadata under safepickle.RAW_ACTIONS_KEY, in the backup and the new table alike).
3. Build the v1 tables beside the old ones (`vmem_upgrade_<name>`), copy every row in
   bounded batches (keyset pages; memory stays flat), events converted through the codec,
   times copied as stored.
4. Count again, the copy and the old tables, and swap the tables in one step: the old ones
   become `<name>_v0_<UTC stamp>`, the new ones take ADK's names. Any difference (the
   agent wrote meanwhile) aborts and leaves the database as it was.

sqlite and PostgreSQL do steps 1-4 in ONE transaction (their DDL is transactional), so any
failure, even a killed vmem, rolls everything back; PostgreSQL locks the old tables for the
final count and the renames only. MySQL/MariaDB commit DDL at once and cannot rename tables
under LOCK TABLES: the copy is committed in batches, the swap is one atomic `RENAME TABLE`,
checked right before it and again right after it (a write that slipped in between is caught
and the tables are swapped back); a failure drops the new tables, and tables left by a
killed run are removed by the next one. The old tables stay until `--drop-old`, which
refuses unless the current tables hold every kept session (updated no earlier) and event, by key.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from veadk_mem import files
from veadk_mem.errors import BadInput, NotSupported, StoreError, VmemError
from veadk_mem.sessions import reshape
from veadk_mem.sessions.bigline import BigLine, check_big
from veadk_mem.sessions.layout import (
    EVENTS_INDEX,
    LATEST_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    Layout,
    build_tables,
    to_epoch,
)
from veadk_mem.sessions.records import Progress, batch_bytes, noop
from veadk_mem.sessions.safepickle import CONVERSION, RAW_ACTIONS_KEY, converting
from veadk_mem.sessions.validate import iter_checked

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.store import SessionStore

NEW_PREFIX = "vmem_upgrade_"
ADK_TABLES = ("sessions", "events", "app_states", "user_states", "adk_internal_metadata")
KEPT = re.compile(r"^(sessions|events|app_states|user_states|adk_internal_metadata)_v0_(\d{14})$")
_PAGE = 1000  # rows per keyset page and per INSERT
_PAGE_BYTES: int | None = None  # pickled actions per events page, about (None: `batch_bytes()`)
DEFAULT_BACKUP = re.compile(r"^vmem-upgrade-backup-\d{14}\.jsonl$")
_NAMED = 10  # undecodable events named in an error; the rest are counted

Phase = Callable[[str, int], AbstractContextManager[Progress]]


@contextlib.contextmanager
def _no_phase(description: str, total: int) -> Iterator[Progress]:
    yield noop


async def before_swap(conn: AsyncConnection) -> None:
    """Called after the copy, before the final count and the swap: a seam for fault-injection tests."""


@dataclass(frozen=True)
class Snapshot:
    """Row counts and latest times of one set of ADK tables: what must not change during an upgrade."""

    sessions: int
    events: int
    app_states: int
    user_states: int
    latest_session: float
    latest_event: float
    latest_state: float

    def differences(self, other: Snapshot) -> list[str]:
        """What differs from `other`, for people: ["sessions 4 -> 5", ...]."""
        out = []
        for name in ("sessions", "events", "app_states", "user_states"):
            a, b = getattr(self, name), getattr(other, name)
            if a != b:
                out.append(f"{name.replace('_', ' ')} {a:,} -> {b:,}")
        for name in ("latest_session", "latest_event", "latest_state"):
            a, b = getattr(self, name), getattr(other, name)
            if abs(a - b) > 1e-6:
                out.append(f"{name.replace('_', ' ')} time changed")
        return out


@dataclass
class UpgradeReport:
    """What an upgrade did, or with dry_run would do."""

    database: str
    layout: str
    description: str
    releases: str = ""
    status: str = "current"  # current | dry_run | upgraded
    sessions: int = 0
    events: int = 0
    app_states: int = 0
    user_states: int = 0
    backup: str | None = None
    renamed: dict[str, str] = field(default_factory=dict)  # ADK table -> the name the old one is kept under
    new_tables: dict[str, str] = field(default_factory=dict)  # temporary name -> ADK name
    old_tables: list[str] = field(default_factory=list)  # kept from an upgrade, for --drop-old
    dropped: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)  # tables of an interrupted upgrade, removed first
    drop_old: bool = False
    kept_raw: list[str] = field(default_factory=list)  # events whose undecodable actions were kept raw
    mixed_events: int = 0  # event rows in a mixed shape (sessions/reshape.py), found
    rewritten: int = 0  # ... and rewritten in ADK's shape
    warnings: list[str] = field(default_factory=list)  # said on stderr, not part of the JSON report

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "database": self.database,
            "layout": self.layout,
            "description": self.description,
            "releases": self.releases,
            "sessions": self.sessions,
            "events": self.events,
            "app_states": self.app_states,
            "user_states": self.user_states,
            "backup": self.backup,
            "renamed": self.renamed,
            "new_tables": self.new_tables,
            "old_tables": self.old_tables,
            "dropped": self.dropped,
            "leftovers": self.leftovers,
            "drop_old": self.drop_old,
            "kept_raw": self.kept_raw,
            "mixed_events": self.mixed_events,
            "rewritten": self.rewritten,
        }


def default_backup(now: datetime | None = None) -> Path:
    """Where the backup goes without --backup: the working directory, named for the time."""
    return Path(f"vmem-upgrade-backup-{_stamp(now)}.jsonl")


def _stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")


def check_backup(path: Path) -> None:
    """BadInput, before anything is read, for a --backup that exists (never written over) or cannot be made."""
    if path.exists() or path.is_symlink():
        raise BadInput(f"--backup {path}: exists; name a new file (an earlier backup is never written over)")
    files.check_target(path, option="--backup")


# --- the upgrade ----------------------------------------------------------------------------


async def upgrade_store(
    store: SessionStore,
    *,
    backup: Path,
    dry_run: bool = False,
    drop_old: bool = False,
    progress: Phase | None = None,
    now: datetime | None = None,
    keep_undecodable: bool = False,
) -> UpgradeReport:
    """Open `store` and upgrade its v0 tables in place (see the module docstring).

    keep_undecodable: an event whose actions cannot be decoded keeps its pickle (base64) in
    customMetadata instead of stopping the upgrade.
    """
    phase = progress or _no_phase
    async with store:
        names = await _table_names(store)
        tables = store.db.tables
        report = UpgradeReport(
            database=store.db.display_url,
            layout=store.db.layout.value,
            description=tables.describe(),
            releases=tables.releases,
            old_tables=sorted(n for n in names if KEPT.match(n)),
            leftovers=sorted(n for n in names if n.startswith(NEW_PREFIX)),
            drop_old=drop_old,
        )
        if reshape.applies(store.db):
            report.mixed_events = await reshape.count_mixed(store.db)
            if report.mixed_events:
                await _reshape(store, report, phase, backup, dry_run)
        if store.db.layout is Layout.SQLITE and not report.mixed_events:
            raise NotSupported(
                f"{store.db.display_url}: an ADK SqliteSessionService file, not DatabaseSessionService tables; "
                "current ADK's SqliteSessionService reads it as it is"
            )
        if store.db.layout is not Layout.V0:
            if drop_old and report.old_tables and not report.mixed_events:
                if dry_run:
                    report.status = "dry_run"
                else:
                    await _check_drop(store, report.old_tables)
                    report.dropped = await _drop_old(store, report.old_tables)
                    report.old_tables = []
            return report
        stamp = _stamp(now)
        present = [n for n in ADK_TABLES if n in names]
        report.renamed = {n: f"{n}_v0_{stamp}" for n in present}
        report.new_tables = {f"{NEW_PREFIX}{n}": n for n in ADK_TABLES}
        report.backup = str(backup)
        taken = [n for n in report.renamed.values() if n in names]
        if taken:
            raise StoreError(f"{store.db.display_url}: table {taken[0]} already exists; retry in a second")
        if dry_run:
            report.status = "dry_run"
            async with store.db.reader.connect() as conn:
                snap = await _snapshot(conn)
            _count(report, snap)
            return report
        check_backup(backup)
        await Upgrade(store, report, phase, keep_undecodable).run(backup)
        if drop_old:
            kept = sorted({*report.old_tables, *report.renamed.values()})
            await _check_drop(store, kept)
            report.dropped = await _drop_old(store, kept)
            report.old_tables = []
        else:
            report.old_tables = sorted({*report.old_tables, *report.renamed.values()})
        return report


async def _reshape(store: SessionStore, report: UpgradeReport, phase: Phase, backup: Path, dry_run: bool) -> None:
    """Rewrite the event rows stored in a mixed shape in ADK's, after the verified backup a layout
    upgrade takes (the backup restores the rows as they were read: in ADK's shape)."""
    report.backup = str(backup)
    async with store.db.reader.connect() as conn:
        before = await _snapshot(conn)
    _count(report, before)
    if dry_run:
        report.status = "dry_run"
        return
    check_backup(backup)
    await Upgrade(store, report, phase)._backup(backup, before)
    with phase("rewriting events in ADK's shape", before.events) as advance:
        report.rewritten = await reshape.rewrite_mixed(store.db, advance)
    report.status = "reshaped"


def _count(report: UpgradeReport, snap: Snapshot) -> None:
    report.sessions, report.events = snap.sessions, snap.events
    report.app_states, report.user_states = snap.app_states, snap.user_states


class Upgrade:
    """One run of the steps in the module docstring on an open store."""

    def __init__(self, store: SessionStore, report: UpgradeReport, phase: Phase, keep_raw: bool = False) -> None:
        self.store = store
        self.report = report
        self.phase = phase
        self.keep_raw = keep_raw
        self.old = store.db.tables
        self.new = build_tables(Layout.V1, prefix=NEW_PREFIX)
        self.dialect = store.db.dialect
        self.where = store.db.display_url

    def q(self, name: str) -> str:
        """A table, index or constraint name quoted for this database."""
        return str(self.store.db.engine.dialect.identifier_preparer.quote(name))

    async def run(self, backup: Path) -> None:
        """Lock (sqlite), back up, copy, check and swap; on any failure the database is as it was."""

        with converting(self.keep_raw) as conversion:
            await self._run(backup)
        self.report.kept_raw = [_event_name(k) for k in sorted(conversion.undecoded)]
        for key, why in sorted(conversion.undecoded.items()):
            self.report.warnings.append(
                f"{_event_name(key)}: actions not decoded ({why}); kept raw (base64 pickle) in its "
                f"customMetadata.{_raw_key()}"
            )

    async def _run(self, backup: Path) -> None:
        store = self.store
        async with store.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            try:
                await self._begin(conn)
            except Exception as exc:
                raise self._refusal(exc) from None
            try:
                before = await _snapshot(conn)
                _count(self.report, before)
                await self._commit_batch(conn)  # MySQL: nothing held while the backup is written
                await self._backup(backup, before)
                try:
                    await self._copy(conn)
                    self._check_decoded()
                    await before_swap(conn)
                    await self._swap(conn, before)
                except BaseException:
                    await self._undo(conn)
                    raise
            except VmemError:
                raise
            except Exception as exc:
                raise self._refusal(exc) from None

    async def _begin(self, conn: AsyncConnection) -> None:
        await conn.begin()  # sqlite: BEGIN IMMEDIATE (the vmem_write option): the write lock, held to the end
        if self.dialect == "sqlite":
            return
        if self.dialect == "postgresql":
            seconds = max(self.store.db.busy_timeout, 0.001)
            await conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(seconds * 1000)}ms'")

    def _refusal(self, exc: BaseException) -> VmemError:
        text = str(getattr(exc, "orig", None) or exc).lower()
        if "locked" in text or "lock timeout" in text or "lock_timeout" in text:
            return StoreError(
                f"{self.where}: another connection holds the database (waited {self.store.db.busy_timeout:g} s); "
                "not upgrading, nothing was changed",
                hint="stop the agents that use it, then retry (VMEM_SQLITE_BUSY_TIMEOUT sets the wait)",
            )
        return self.store.db.fail(exc)

    # -- backup -----------------------------------------------------------------------------

    async def _backup(self, path: Path, before: Snapshot) -> None:
        """Export to `path`, read it back, count it against the database; StoreError when it differs."""
        store = self.store
        with self.phase("backing up sessions", before.sessions) as advance, backup_output(path) as handle:
            pieces = store.export_jsonl(progress=advance)
            async for piece in pieces:
                handle.write(piece)
        self.report.warnings += pieces.warnings
        try:
            self._check_decoded()
        except StoreError:
            path.unlink(missing_ok=True)
            raise
        if pieces.damaged:
            path.unlink(missing_ok=True)
            raise StoreError(
                f"{self.where}: {len(pieces.damaged):,} session(s) have rows vmem cannot read (named above); "
                "not upgrading, nothing was changed"
            )
        sessions, events = _count_backup(path)
        if (sessions, events) != (before.sessions, before.events):
            path.unlink(missing_ok=True)
            raise StoreError(
                f"{self.where}: the backup holds {sessions:,} sessions and {events:,} events, the database "
                f"{before.sessions:,} and {before.events:,} (an agent is writing?); not upgrading, nothing was changed",
                hint="stop the agents that use the database, then retry",
            )

    def _check_decoded(self) -> None:
        """StoreError naming the events whose actions could not be decoded, unless they are kept raw."""

        conversion = CONVERSION.get()
        if conversion is None or conversion.keep_raw or not conversion.undecoded:
            return
        items = sorted(conversion.undecoded.items())
        named = "; ".join(f"{_event_name(k)} ({why})" for k, why in items[:_NAMED])
        more = f"; and {len(items) - _NAMED:,} more" if len(items) > _NAMED else ""
        raise StoreError(
            f"{self.where}: the actions of {len(items):,} event(s) cannot be decoded: {named}{more}; "
            "not upgrading, nothing was changed",
            hint=f"--keep-undecodable keeps each such pickle as it is (base64) in the event's "
            f"customMetadata.{_raw_key()}",
        )

    # -- copy -------------------------------------------------------------------------------

    async def _copy(self, conn: AsyncConnection) -> None:
        """Create the new tables (after removing an interrupted run's) and copy every row into them."""
        from sqlalchemy import insert, select

        await self._drop_tables(conn, self.report.leftovers)
        await conn.run_sync(self.new.metadata.create_all)
        assert self.new.internal is not None
        meta = {SCHEMA_VERSION_KEY: LATEST_SCHEMA_VERSION}
        if "adk_internal_metadata" in self.report.renamed:  # a v0 database ADK marked "0": keep its other keys
            from sqlalchemy import column, table

            old_meta = table("adk_internal_metadata", column("key"), column("value"))
            rows = await conn.execute(select(old_meta.c.key, old_meta.c.value))
            meta = {**{str(k): str(v) for k, v in rows}, **meta}
        await conn.execute(insert(self.new.internal), [{"key": k, "value": v} for k, v in meta.items()])
        await self._commit_batch(conn)
        total = self.report.sessions + self.report.events + self.report.app_states + self.report.user_states
        with self.phase("copying into the new tables", total) as advance:
            await self._copy_table(conn, self.old.app_states, self.new.app_states, None, advance)
            await self._copy_table(conn, self.old.user_states, self.new.user_states, None, advance)
            await self._copy_table(conn, self.old.sessions, self.new.sessions, None, advance)
            await self._copy_table(conn, self.old.events, self.new.events, self._event_rows, advance)

    async def _copy_table(
        self,
        conn: AsyncConnection,
        src: Table,
        dst: Table,
        convert: Callable[[Sequence[Any]], list[dict[str, Any]]] | None,
        advance: Progress,
    ) -> None:
        from sqlalchemy import insert

        weigh = _actions_bytes if convert is not None else None
        async for rows in _pages(conn, src, weigh):
            values = convert(rows) if convert else [dict(r._mapping) for r in rows]
            await conn.execute(insert(dst), values)
            await self._commit_batch(conn)
            advance(len(rows))

    def _event_rows(self, rows: Sequence[Any]) -> list[dict[str, Any]]:
        """v0 event rows as v1 rows: ADK event data through vmem's codec, the time column as stored."""
        from veadk_mem import events as ev
        from veadk_mem.sessions.codec import event_from_row, event_row
        from veadk_mem.sessions.rawsession import raw_event

        out = []
        warnings = self.report.warnings
        for row in rows:  # event_from_row skips the columns an old release lacks by name
            event = ev.Event.model_validate(event_from_row(self.old, row, warnings))
            values = event_row(self.new, row.app_name, row.user_id, row.session_id, raw_event(event))
            values["timestamp"] = row.timestamp
            out.append(values)
        return out

    async def _commit_batch(self, conn: AsyncConnection) -> None:
        """MySQL: commit each batch (its DDL commits anyway); sqlite and PostgreSQL keep one transaction."""
        if self.dialect == "mysql":
            await conn.commit()

    # -- swap -------------------------------------------------------------------------------

    async def _swap(self, conn: AsyncConnection, before: Snapshot) -> None:
        """Check nothing changed since `before` and the copy is whole, then put the new tables in place."""
        if self.dialect == "postgresql":
            old = ", ".join(self.q(n) for n in self.report.renamed)
            try:
                await conn.exec_driver_sql(f"LOCK TABLE {old} IN EXCLUSIVE MODE")
            except Exception as exc:
                raise self._refusal(exc) from None
        copied = await _snapshot(conn, {n: NEW_PREFIX + n for n in ADK_TABLES})
        self._check(before, copied, await _snapshot(conn))
        if self.dialect == "mysql":
            await self._swap_mysql(conn, before, copied)
            return
        for name, kept in self.report.renamed.items():
            await conn.exec_driver_sql(f"ALTER TABLE {self.q(name)} RENAME TO {self.q(kept)}")
        if self.dialect == "sqlite":
            # sqlite cannot rename an index, and index names are per database: the old table's goes
            await conn.exec_driver_sql(f"DROP INDEX IF EXISTS {self.q(EVENTS_INDEX)}")
        for temp, name in self.report.new_tables.items():
            await conn.exec_driver_sql(f"ALTER TABLE {self.q(temp)} RENAME TO {self.q(name)}")
        if self.dialect == "sqlite":
            await conn.exec_driver_sql(f"DROP INDEX {self.q(NEW_PREFIX + EVENTS_INDEX)}")
            canonical = build_tables(Layout.V1).events
            for index in canonical.indexes:
                await conn.run_sync(index.create)
        else:
            for name, kept in self.report.renamed.items():
                await self._rename_pg_names(conn, kept, name, (EVENTS_INDEX, EVENTS_INDEX + kept[len(name) :]))
            for temp, name in self.report.new_tables.items():
                await self._rename_pg_names(conn, name, temp, (NEW_PREFIX + EVENTS_INDEX, EVENTS_INDEX))
        await conn.commit()

    def _check(self, before: Snapshot, copied: Snapshot, now: Snapshot) -> None:
        changed = before.differences(now)
        if changed:
            raise StoreError(
                f"{self.where}: the tables changed during the upgrade ({'; '.join(changed)}); "
                "not upgrading, nothing was changed",
                hint="stop the agents that use the database, then retry",
            )
        short = before.differences(copied)
        if short:
            raise StoreError(f"{self.where}: the copy differs from the old tables ({'; '.join(short)}); not upgrading")

    async def _rename_pg_names(self, conn: AsyncConnection, table: str, was: str, index: tuple[str, str]) -> None:
        """PostgreSQL: the constraints named after a table (`<was>_pkey`, ...) and its ADK index follow its
        new name, as their names are per schema: the new tables' names must be free for them."""
        from sqlalchemy import text

        rows = await conn.execute(
            text("SELECT conname FROM pg_constraint WHERE conrelid = CAST(:t AS regclass)"), {"t": self.q(table)}
        )
        for (name,) in rows.all():
            if name.startswith(was + "_"):
                fresh = (table + name[len(was) :])[:63]
                await conn.exec_driver_sql(
                    f"ALTER TABLE {self.q(table)} RENAME CONSTRAINT {self.q(name)} TO {self.q(fresh)}"
                )
        rows = await conn.execute(
            text("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = :t"),
            {"t": table},
        )
        for (name,) in rows.all():
            if name == index[0]:
                await conn.exec_driver_sql(f"ALTER INDEX {self.q(name)} RENAME TO {self.q(index[1][:63])}")

    async def _swap_mysql(self, conn: AsyncConnection, before: Snapshot, copied: Snapshot) -> None:
        """One atomic RENAME TABLE; the old tables are counted again after it and swapped back if they changed."""
        await conn.commit()
        forward = [*self.report.renamed.items(), *((t, n) for t, n in self.report.new_tables.items())]
        await conn.exec_driver_sql("RENAME TABLE " + ", ".join(f"{self.q(a)} TO {self.q(b)}" for a, b in forward))
        after = await _snapshot(conn, self.report.renamed)
        await conn.commit()
        changed = before.differences(after)
        if changed:
            back = [(b, a) for a, b in reversed(forward)]
            await conn.exec_driver_sql("RENAME TABLE " + ", ".join(f"{self.q(a)} TO {self.q(b)}" for a, b in back))
            raise StoreError(
                f"{self.where}: the tables changed during the upgrade ({'; '.join(changed)}); "
                "swapped back, not upgrading, nothing was changed",
                hint="stop the agents that use the database, then retry",
            )
        await conn.exec_driver_sql(
            f"ALTER TABLE {self.q('events')} RENAME INDEX {self.q(NEW_PREFIX + EVENTS_INDEX)} TO {self.q(EVENTS_INDEX)}"
        )

    async def _undo(self, conn: AsyncConnection) -> None:
        """After a failure: roll back (sqlite, PostgreSQL) or drop the new tables (MySQL, whose DDL committed)."""
        with contextlib.suppress(Exception):
            await conn.rollback()
        if self.dialect == "mysql":
            with contextlib.suppress(Exception):
                await self._drop_tables(conn, list(self.report.new_tables))
                await conn.commit()

    async def _drop_tables(self, conn: AsyncConnection, names: Sequence[str]) -> None:
        for name in _drop_order(names):
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.q(name)}")


def _actions_bytes(rows: Sequence[Any]) -> int:
    """The pickled actions in a page of v0 event rows, in bytes."""
    return sum(len(r.actions or b"") for r in rows)


def _event_name(key: tuple[str, str, str, str]) -> str:
    app, user, session, event = key
    return f"app {app!r} user {user!r} session {session!r} event {event!r}"


def _raw_key() -> str:

    return RAW_ACTIONS_KEY


# -- the backup file --------------------------------------------------------------------------


def backup_output(path: Path) -> AbstractContextManager[IO[str]]:
    """A text stream that becomes the backup `path` (mode 0600) when the block ends without error,
    by the one writer (`veadk_mem.files`): never over an existing file, stale parts removed first."""
    check_backup(path)
    family = DEFAULT_BACKUP if DEFAULT_BACKUP.match(path.name) else None
    return files.atomic_output(path, option="--backup", overwrite=False, family=family)


# -- dropping the kept tables -----------------------------------------------------------------


async def _check_drop(store: SessionStore, names: Sequence[str]) -> None:
    """StoreError (nothing dropped) unless the current tables hold everything the old ones kept by an
    upgrade hold: every old session (by key), updated no earlier, and every old event (by key).

    Counts alone passed a copy that had lost a session once another had been created: the old
    tables were dropped with the last database copy of the deleted one.
    """
    from sqlalchemy import and_, column, exists, func, select, table

    from veadk_mem.sessions.layout import AdkTimestamp

    stamps = sorted({m[2] for n in names if (m := KEPT.match(n))})
    present = set(names)
    now = store.db.tables

    def refuse(what: str) -> StoreError:
        return StoreError(
            f"{store.db.display_url}: not dropping the old tables: {what}; nothing was dropped",
            hint="the old tables may hold the only copy of what is missing: compare them first "
            "(drop them by hand once the difference is meant, e.g. sessions deleted since)",
        )

    with store.db.failures():
        async with store.db.engine.connect() as conn:
            for stamp in stamps:
                if (name := f"sessions_v0_{stamp}") in present:
                    old = table(
                        name, column("app_name"), column("user_id"), column("id"), column("update_time", AdkTimestamp())
                    )
                    c = now.sessions.c
                    same = (c.app_name == old.c.app_name, c.user_id == old.c.user_id, c.id == old.c.id)
                    missing = ~exists(select(c.id).where(*same))
                    count = (await conn.execute(select(func.count()).select_from(old).where(missing))).scalar_one()
                    if count:
                        first = (
                            await conn.execute(select(old.c.app_name, old.c.user_id, old.c.id).where(missing).limit(1))
                        ).one()
                        raise refuse(
                            f"{count:,} session(s) of {name} are not in the current sessions table "
                            f"(app {first[0]!r} user {first[1]!r} session {first[2]!r} among them)"
                        )
                    older = select(func.count()).select_from(old.join(now.sessions, and_(*same)))
                    count = (await conn.execute(older.where(c.update_time < old.c.update_time))).scalar_one()
                    if count:
                        raise refuse(f"{count:,} session(s) of {name} were updated later than the current copy")
                if (name := f"events_v0_{stamp}") in present:
                    old = table(name, column("id"), column("app_name"), column("user_id"), column("session_id"))
                    e = now.events.c
                    key = (
                        e.id == old.c.id,
                        e.app_name == old.c.app_name,
                        e.user_id == old.c.user_id,
                        e.session_id == old.c.session_id,
                    )
                    lost = select(func.count()).select_from(old).where(~exists(select(e.id).where(*key)))
                    if count := (await conn.execute(lost)).scalar_one():
                        raise refuse(f"{count:,} event(s) of {name} are not in the current events table")


def _drop_order(names: Sequence[str]) -> list[str]:
    """Events before the sessions they reference."""
    return sorted(names, key=lambda n: (0 if "events" in n else 1, n))


async def _pages(
    conn: AsyncConnection, table: Table, weigh: Callable[[Sequence[Any]], int] | None = None
) -> AsyncIterator[Sequence[Any]]:
    """Every row of `table` in primary-key order, a keyset page at a time (no OFFSET, no open cursor).

    With `weigh` (a page's payload bytes), pages after a heavy one hold fewer rows, so that a
    run of huge events (a pickled 250,000-value state delta is some MB) keeps about
    _PAGE_BYTES (`batch_bytes()`) in memory at a time, not 1,000 of them; light pages grow back to _PAGE rows.
    """
    from sqlalchemy import select, tuple_

    pk = list(table.primary_key.columns)
    last: tuple[Any, ...] | None = None
    limit = _PAGE
    while True:
        stmt = select(table).order_by(*pk).limit(limit)
        if last is not None:
            # the first column's own range lets every optimizer use the primary key
            stmt = stmt.where(pk[0] >= last[0], tuple_(*pk) > tuple_(*last))
        rows = (await conn.execute(stmt)).all()
        if not rows:
            return
        yield rows
        if len(rows) < limit:
            return
        last = tuple(getattr(rows[-1], c.name) for c in pk)
        if weigh is not None:
            per_row = max(weigh(rows) // len(rows), 1)
            limit = max(1, min(_PAGE, limit * 2, (_PAGE_BYTES or batch_bytes()) // per_row))


async def _snapshot(conn: AsyncConnection, names: dict[str, str] | None = None) -> Snapshot:
    """Counts and latest times of the ADK tables, or of the tables `names` maps their names to."""
    from sqlalchemy import column, func, select, table

    from veadk_mem.sessions.layout import AdkTimestamp

    async def stats(name: str, stamp: str) -> tuple[int, float]:
        t = table((names or {}).get(name, name), column(stamp, AdkTimestamp()))
        row = (await conn.execute(select(func.count(), func.max(t.c[stamp])).select_from(t))).one()
        return int(row[0]), to_epoch(row[1])

    sessions, latest_session = await stats("sessions", "update_time")
    events, latest_event = await stats("events", "timestamp")
    apps, latest_app = await stats("app_states", "update_time")
    users, latest_user = await stats("user_states", "update_time")
    return Snapshot(sessions, events, apps, users, latest_session, latest_event, max(latest_app, latest_user))


def _count_backup(path: Path) -> tuple[int, int]:
    """Sessions and events in a backup file, read back record by record (every one validated); a
    long line (a big session) checked as import checks one, a block at a time, never decoded whole."""

    if os.path.getsize(path) == 0:
        return 0, 0
    sessions = events = 0
    for _, record in iter_checked(path, big="skip"):
        if isinstance(record, BigLine):
            sessions += 1
            events += check_big(record, None).count
        elif not isinstance(record, dict):
            sessions += 1
            events += len(record.events)
    return sessions, events


async def _table_names(store: SessionStore) -> set[str]:
    from sqlalchemy import inspect

    with store.db.failures():
        async with store.db.engine.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))


async def _drop_old(store: SessionStore, names: Sequence[str]) -> list[str]:
    """Drop the tables an upgrade kept (events first), in one transaction where the database allows."""
    quote = store.db.engine.dialect.identifier_preparer.quote
    with store.db.failures():
        async with store.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                for name in _drop_order(names):
                    await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quote(name)}")
    return list(_drop_order(names))
