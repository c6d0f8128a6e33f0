"""Import writes: table creation, the target's limits, collisions, batched upserts."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic.alias_generators import to_camel

from veadk_mem.errors import Interrupted, StoreError, VmemError
from veadk_mem.gc_pause import bulk_objects, collect_young
from veadk_mem.sessions.bigline import BigSession
from veadk_mem.sessions.codec import event_row
from veadk_mem.sessions.dberrors import concurrent_ddl, retry_db, retryable
from veadk_mem.sessions.engine import sqlite_gap
from veadk_mem.sessions.layout import (
    LATEST_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    Layout,
    build_tables,
    stored_time,
    to_epoch,
)
from veadk_mem.sessions.rawsession import RawSession
from veadk_mem.sessions.records import BATCH, ImportReport, Progress, noop
from veadk_mem.sessions.rows import Columns, Head, Split, build_columns, heads_of, text_style

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem import events as ev
    from veadk_mem.sessions.driver import InsertPlan
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.rawsession import RawEvent
    from veadk_mem.sessions.records import FileKey
    from veadk_mem.sessions.statements import Statements


BATCH_ROWS = 20_000  # rows an import writes per transaction (`Writes.batch_rows`)
SQLITE_BATCH_ROWS = 5_000  # ... on sqlite, where every agent waits for the write lock meanwhile
# Keys in one MySQL/MariaDB locking read: under 1,000 values (three a key), which MariaDB would
# turn into a semi-join (in_predicate_conversion_threshold) whose scan of a small sessions table
# kept every row it passed locked to the commit, an agent's own session included.
LOCKING_IN_KEYS = 300


class Writes:
    """`import_records` and the checks `importer.import_file` runs before it."""

    def __init__(self, db: Statements) -> None:
        self.db = db
        # fields an old v0 table has no column for -> the events that had them, for one warning each
        self._dropped: dict[str, set[tuple[str, ...]]] = {}

    async def _ensure_tables(self) -> bool:
        """Create ADK's v1 tables exactly as ADK 2.x does when the database has none.

        Another creator (a second import, the agent's first start) may be creating them at
        the same moment: MySQL's DDL commits at once, so its CREATE TABLE can fail with
        "already exists" half-way. Then the layout is read again and the missing tables
        created, a few times, instead of failing.
        """
        if self.db.layout is not Layout.EMPTY:
            return False
        from sqlalchemy import insert, select

        tables = build_tables(Layout.EMPTY)

        async def create() -> None:
            async with self.db.engine.connect() as conn:
                conn = await conn.execution_options(vmem_write=True)
                async with conn.begin():
                    await conn.run_sync(tables.metadata.create_all)
                    assert tables.internal is not None
                    have = await conn.execute(
                        select(tables.internal.c.value).where(tables.internal.c.key == SCHEMA_VERSION_KEY)
                    )
                    if have.first() is None:
                        await conn.execute(
                            insert(tables.internal).values(key=SCHEMA_VERSION_KEY, value=LATEST_SCHEMA_VERSION)
                        )

        try:
            await retry_db(create, concurrent_ddl)
        except Exception as exc:
            raise self.db.fail(exc) from None
        self.db.use_tables(tables, Layout.V1)
        return True

    def offline_limits(self) -> Limits | None:
        """The limits of a sqlite file that does not exist yet (known without creating it), else None."""
        from veadk_mem.sessions.limits import Limits

        path = self.db.sqlite_path()
        if self.db.dialect == "sqlite" and path is not None and not Path(path).exists():
            return Limits("sqlite", Layout.V1)
        return None

    async def limits(self) -> Limits:
        """What this database accepts (column sizes, time range, MariaDB's max_allowed_packet)."""
        from veadk_mem.sessions.limits import Limits

        packet = 0
        if self.db.dialect == "mysql":
            from sqlalchemy import text

            try:
                async with self.db.engine.connect() as conn:
                    packet = int((await conn.execute(text("SELECT @@max_allowed_packet"))).scalar_one())
            except Exception as exc:
                raise self.db.fail(exc) from None
        return Limits(self.db.dialect, Layout.V1 if self.db.layout is Layout.EMPTY else self.db.layout, packet)

    async def key_collisions(
        self, keys: Sequence[FileKey], states: Sequence[tuple[str, str | None, str]] = ()
    ) -> list[str]:
        """Distinct session keys the database's collation takes for one (MySQL/MariaDB only).

        Under MariaDB's default utf8mb4_general_ci, "Order-1", "order-1" and "order-1 " are the
        same primary key: writing them would merge sessions. The keys are compared by the
        database itself, in a temporary table with the sessions table's own collations, with
        each other and with the stored sessions. App and user names get the same check
        (`name_collisions`): their state rows are keyed by them. Returns one description per
        collision.
        """
        if self.db.dialect != "mysql" or not (keys or states):
            return []
        names = await self.name_collisions(
            [(k.app_name, k.user_id, k.where) for k in keys] + [(a, u, w) for a, u, w in states]
        )
        if not keys:
            return names
        from sqlalchemy import text

        out: list[str] = []
        try:
            async with self.db.engine.connect() as conn:
                if self.db.layout is Layout.EMPTY:  # the columns ADK will create get the database default
                    await conn.execute(
                        text(
                            "CREATE TEMPORARY TABLE vmem_keys (app_name VARCHAR(128) NOT NULL, "
                            "user_id VARCHAR(128) NOT NULL, id VARCHAR(128) NOT NULL, n INT NOT NULL)"
                        )
                    )
                else:
                    await conn.execute(
                        text(
                            "CREATE TEMPORARY TABLE vmem_keys "
                            "SELECT app_name, user_id, id, 0 AS n FROM sessions LIMIT 0"
                        )
                    )
                try:
                    insert = text("INSERT INTO vmem_keys (app_name, user_id, id, n) VALUES (:a, :u, :i, :n)")
                    for i in range(0, len(keys), BATCH):
                        chunk = keys[i : i + BATCH]
                        await conn.execute(
                            insert,
                            [{"a": k.app_name, "u": k.user_id, "i": k.id, "n": i + j} for j, k in enumerate(chunk)],
                        )
                    bin3 = "CAST(app_name AS BINARY), CAST(user_id AS BINARY), CAST(id AS BINARY)"
                    rows = await conn.execute(
                        text(
                            f"SELECT GROUP_CONCAT(n ORDER BY n) FROM vmem_keys GROUP BY app_name, user_id, id "
                            f"HAVING COUNT(DISTINCT {bin3}) > 1"
                        )
                    )
                    for (group,) in rows:
                        seen: dict[str, FileKey] = {}
                        for n in str(group).split(","):
                            key = keys[int(n)]
                            seen.setdefault(repr(str(key)), key)
                        out.append(" = ".join(f"{k} ({seen[k].where})" for k in seen))
                    if self.db.layout is not Layout.EMPTY:
                        rows = await conn.execute(
                            text(
                                "SELECT k.n, s.app_name, s.user_id, s.id FROM vmem_keys k JOIN sessions s "
                                "ON s.app_name = k.app_name AND s.user_id = k.user_id AND s.id = k.id "
                                "WHERE CAST(s.app_name AS BINARY) <> CAST(k.app_name AS BINARY) "
                                "OR CAST(s.user_id AS BINARY) <> CAST(k.user_id AS BINARY) "
                                "OR CAST(s.id AS BINARY) <> CAST(k.id AS BINARY)"
                            )
                        )
                        for n, app, user, sid in rows:
                            key = keys[int(n)]
                            out.append(f"{str(key)!r} ({key.where}) = {f'{app}/{user}/{sid}'!r} in the database")
                finally:
                    await conn.execute(text("DROP TEMPORARY TABLE IF EXISTS vmem_keys"))
        except Exception as exc:
            raise self.db.fail(exc) from None
        return names + out

    async def name_collisions(self, names: Sequence[tuple[str, str | None, str]]) -> list[str]:
        """App names, and user ids within an app, that the state tables' collation takes for one (MySQL).

        `names` are (app, user or None for an app_state record, where). App state rows are
        keyed by the app name and user state rows by (app, user): "Shop" and "shop" would
        merge two apps' state (or fail half-way on a duplicate key). Compared by the database
        with each other and with the stored state rows, as `key_collisions` does for sessions.
        """

        first: dict[tuple[str, str | None], str] = {}
        for app, user, where in names:
            first.setdefault((app, user), where)
        entries = list(first.items())

        def name(i: int) -> str:
            (app, user), where = entries[i]
            return f"{app!r} ({where})" if user is None else f"{f'{app}/{user}'!r} ({where})"

        try:
            return await self._name_collisions(entries, name)
        except Exception as exc:
            raise self.db.fail(exc) from None

    async def _name_collisions(self, entries: list[tuple[tuple[str, str | None], str]], name: Any) -> list[str]:
        from sqlalchemy import text

        out: list[str] = []
        async with self.db.engine.connect() as conn:
            if self.db.layout is Layout.EMPTY:
                await conn.execute(
                    text(
                        "CREATE TEMPORARY TABLE vmem_names (app_name VARCHAR(128) NOT NULL, "
                        "user_id VARCHAR(128) NOT NULL, n INT NOT NULL, has_user INT NOT NULL)"
                    )
                )
            else:
                await conn.execute(
                    text(
                        "CREATE TEMPORARY TABLE vmem_names "
                        "SELECT app_name, user_id, 0 AS n, 0 AS has_user FROM user_states LIMIT 0"
                    )
                )
            try:
                insert = text("INSERT INTO vmem_names (app_name, user_id, n, has_user) VALUES (:a, :u, :n, :h)")
                rows = [
                    {"a": app, "u": user or "", "n": i, "h": int(user is not None)}
                    for i, ((app, user), _) in enumerate(entries)
                ]
                for i in range(0, len(rows), BATCH):
                    await conn.execute(insert, rows[i : i + BATCH])
                app_bin, user_bin = "CAST(app_name AS BINARY)", "CAST(user_id AS BINARY)"
                found = await conn.execute(
                    text(
                        "SELECT GROUP_CONCAT(n ORDER BY n) FROM vmem_names GROUP BY app_name "
                        f"HAVING COUNT(DISTINCT {app_bin}) > 1"
                    )
                )
                for (group,) in found:
                    apps: dict[str, int] = {}
                    for n in str(group).split(","):
                        apps.setdefault(entries[int(n)][0][0], int(n))
                    out.append("apps " + " = ".join(f"{a!r} ({entries[n][1]})" for a, n in apps.items()))
                found = await conn.execute(
                    text(
                        "SELECT GROUP_CONCAT(n ORDER BY n) FROM vmem_names WHERE has_user = 1 "
                        f"GROUP BY app_name, user_id HAVING COUNT(DISTINCT {app_bin}) = 1 "
                        f"AND COUNT(DISTINCT {user_bin}) > 1"
                    )
                )
                for (group,) in found:
                    out.append("users " + " = ".join(name(int(n)) for n in str(group).split(",")))
                if self.db.layout is not Layout.EMPTY:
                    stored = await conn.execute(
                        text(
                            "SELECT k.n, a.app_name FROM vmem_names k JOIN app_states a ON a.app_name = k.app_name "
                            "WHERE CAST(a.app_name AS BINARY) <> CAST(k.app_name AS BINARY)"
                        )
                    )
                    for n, app in stored:
                        out.append(f"app {entries[int(n)][0][0]!r} ({entries[int(n)][1]}) = {app!r} in the database")
                    stored = await conn.execute(
                        text(
                            "SELECT k.n, u.app_name, u.user_id FROM vmem_names k JOIN user_states u "
                            "ON u.app_name = k.app_name AND u.user_id = k.user_id WHERE k.has_user = 1 "
                            "AND CAST(u.app_name AS BINARY) = CAST(k.app_name AS BINARY) "
                            "AND CAST(u.user_id AS BINARY) <> CAST(k.user_id AS BINARY)"
                        )
                    )
                    for n, app, user in stored:
                        out.append(f"user {name(int(n))} = {f'{app}/{user}'!r} in the database")
            finally:
                await conn.execute(text("DROP TEMPORARY TABLE IF EXISTS vmem_names"))
        return list(dict.fromkeys(out))

    async def newer_sessions(self, keys: Sequence[FileKey]) -> list[str]:
        """The sessions of `keys` stored with an update time later than the file's."""
        if self.db.layout is Layout.EMPTY or not keys:
            return []
        from sqlalchemy import select

        s = self.db.tables.sessions.c
        wanted = {(k.app_name, k.user_id, k.id): k for k in keys}
        out: list[str] = []
        try:
            async with self.db.reader.connect() as conn:
                groups: dict[tuple[str, str], list[str]] = defaultdict(list)
                for k in keys:
                    groups[(k.app_name, k.user_id)].append(k.id)
                for (a, u), ids in groups.items():
                    for j in range(0, len(ids), BATCH):
                        rows = await conn.execute(
                            select(s.app_name, s.user_id, s.id, s.update_time).where(
                                s.app_name == a, s.user_id == u, s.id.in_(ids[j : j + BATCH])
                            )
                        )
                        for app, user, sid, stamp in rows:
                            key = wanted.get((app, user, sid))
                            if key is not None and _newer(to_epoch(stamp), key.update_time):
                                out.append(f"{key} ({key.where})")
        except Exception as exc:
            raise self.db.fail(exc) from None
        return out

    async def import_records(
        self,
        records: Iterable[ev.Session | RawSession | BigSession | dict[str, Any]],
        *,
        force: bool = True,
        progress: Progress | None = None,
        batch_seconds: float = 0.5,
        batch_rows: int | None = None,
    ) -> ImportReport:
        """Upsert sessions and state records (validated input), committing in batches.

        Each session is written whole or not at all. A batch commits after `batch_seconds`
        or `batch_rows` rows (default `batch_rows()`), so a failure loses at most the open batch; the error says how
        many sessions were committed before it, and a re-run is idempotent. Without `force`,
        a session stored with a newer update time than the record's is left alone and named
        in `report.skipped`.
        """
        from veadk_mem import events as ev
        from veadk_mem.sessions.rawsession import from_model

        records_iter = (from_model(r) if isinstance(r, ev.Session) else r for r in records)
        batch_rows = batch_rows or self.batch_rows()

        def reader(plans: tuple[InsertPlan, InsertPlan] | None) -> Take:
            first = [True]
            held: list[Any] = []  # a long line's session met while filling a batch: the next batch

            def take() -> tuple[_Batch, bool]:
                if held:
                    return _Batch([], [], big=held.pop()), False
                # the first batch is small: nothing is written while it is read, the rest overlap
                rows = min(batch_rows, 1000) if first[0] else batch_rows
                first[0] = False
                records, done = _take_batch(records_iter, batch_seconds, rows)
                if records and isinstance(records[-1], BigSession):
                    held.append(records.pop())
                    if not records:
                        return _Batch([], [], big=held.pop()), done
                return self._prepare(records, plans), done and not held

            return take

        return await self._import(reader, force, progress)

    def batch_rows(self) -> int:
        """Rows an import writes per transaction: fewer on sqlite, whose one write lock the agents wait for.

        On PostgreSQL and MySQL a batch locks only its own rows, and larger batches cost
        fewer round trips; a sqlite batch holds the whole file's write lock while it is
        written, and an agent's append waits that long (20,000 rows: 1 to 3 s on a busy machine).
        """
        return SQLITE_BATCH_ROWS if self.db.dialect == "sqlite" else BATCH_ROWS

    def big_line_bytes(self) -> int:
        """The JSONL line length from which an import streams a session and writes it on its own.

        `$VMEM_BIG_LINE` bytes when set; else 2 MB on sqlite (some 6,000 events), where such a
        session is written in short transactions (`_write_big_staged`) instead of its batch's
        one transaction, which holds the whole file's write lock; else 16 MB, where streaming
        only bounds the import's memory.
        """
        from veadk_mem.sessions.bigline import BIG_LINE, SQLITE_BIG_LINE, big_line_bytes

        return big_line_bytes(SQLITE_BIG_LINE if self.db.dialect == "sqlite" else BIG_LINE)

    def column_style(self) -> str:
        """How this database's rows hold JSON text (`rows.TEXTS`), so they are the rows ADK writes."""
        return text_style(self.db.dialect, self.db.layout is Layout.SQLITE)

    def takes_columns(self) -> bool:
        """True when this database's import can write batches built elsewhere (`import_columns`).

        That is the driver path (`driver.InsertPlan`: aiosqlite, asyncpg) into ADK 2.x's tables
        or SqliteSessionService's, or into an empty database (or a sqlite file not created
        yet), which gets ADK 2.x's.
        """
        return self.db.dialect in ("sqlite", "postgresql") and self.db.layout in (
            Layout.EMPTY,
            Layout.V1,
            Layout.SQLITE,
        )

    async def import_columns(
        self,
        batches: Iterator[Columns | int],
        *,
        force: bool = True,
        progress: Progress | None = None,
        bigs: dict[int, BigSession] | None = None,
    ) -> ImportReport:
        """`import_records` of batches whose columns were built elsewhere (`reader.ReaderProcess`).

        Only where `takes_columns()` is True. An int is where a long line starts: its
        session, checked already, is `bigs[start]`, streamed from the file as it is written.
        """

        def reader(plans: tuple[InsertPlan, InsertPlan] | None) -> Take:
            if plans is None:
                raise RuntimeError(f"internal: no driver plans for an import into {self.db.layout.value}")

            def take() -> tuple[_Batch, bool]:
                columns = next(batches, None)
                if isinstance(columns, int):
                    return _Batch([], [], big=(bigs or {})[columns]), False
                return (_Batch([], []), True) if columns is None else (_rows_batch(columns, plans), False)

            return take

        return await self._import(reader, force, progress)

    async def _import(
        self, reader: Callable[[tuple[InsertPlan, InsertPlan] | None], Take], force: bool, progress: Progress | None
    ) -> ImportReport:
        """Create the tables if there are none, then write what `reader(driver plans)` takes, batch by batch."""
        report = ImportReport()
        report.created_tables = await self._ensure_tables()
        report.layout = self.db.layout.value
        self._dropped = {}
        take = reader(self._insert_plans())
        with bulk_objects():
            await self._write_all(take, report, progress or noop, force)
        return report

    async def _write_all(self, take: Take, report: ImportReport, advance: Progress, force: bool) -> None:
        """Write the batches `take` gives, each in its own transaction.

        The next batch is read (and its rows built) in a thread while this one is written: the
        database works meanwhile, in its server or in sqlite's C code without the GIL.
        """
        ahead: asyncio.Future[tuple[_Batch, bool]] | None = None
        staging: list[str] = []  # a session written in short transactions, while it is under way
        try:
            batch, done = await asyncio.to_thread(take)
            while batch.records or batch.big is not None:
                ahead = None if done else asyncio.ensure_future(asyncio.to_thread(take))
                started = time.monotonic()

                # Another writer (a second import, the agent) may deadlock with this batch: the
                # database rolled it back whole, so the same records are written again.
                await retry_db(self._counted_attempt(batch, report, force=force, staging=staging), retryable)
                if ahead is not None:
                    await sqlite_gap(self.db.dialect, time.monotonic() - started)
                advance(len(batch.splits) if batch.big is None else 1)  # sessions, as the summary
                collect_young()
                if ahead is None:
                    break
                batch, done = await ahead
                ahead = None
        except (asyncio.CancelledError, KeyboardInterrupt):
            # Ctrl-C: say what was committed, as for any other failure part-way
            if ahead is not None:
                ahead.cancel()
            if report.sessions or report.app_states or report.user_states:
                raise Interrupted(
                    f"interrupted -- {report.sessions:,} session(s) before it were written and committed"
                    f"{_staged_note(staging)}; re-running the import is safe"
                ) from None
            raise Interrupted(f"interrupted -- {_nothing(staging)}") from None
        except Exception as exc:
            if ahead is not None:  # let the reading thread finish before the iterator is dropped
                with contextlib.suppress(Exception):
                    await ahead
            error = exc if isinstance(exc, VmemError) else self.db.fail(exc)
            if report.sessions or report.app_states or report.user_states:
                error.message = (
                    f"{error.message} -- {report.sessions:,} session(s) before it were written and committed"
                    f"{_staged_note(staging)}; re-running the import is safe"
                ).replace("; nothing was changed", "")
            else:
                error.message = error.message.replace("; nothing was changed", "") + f" -- {_nothing(staging)}"
            error.args = (error.message,)
            raise error from None
        finally:
            self._warn_dropped()

    def _warn_dropped(self) -> None:
        """One warning per field an old v0 table had no column for, with how many events had it."""
        t = self.db.tables
        for name, keys in sorted(self._dropped.items()):
            field = to_camel(name)
            where = f"ADK {t.releases}" if t.releases else "this v0 database"
            self.db.warnings.append(
                f"{field} dropped from {len(keys):,} event(s): the tables of {where} have no {name} column"
            )
        self._dropped = {}

    def _counted_attempt(
        self, batch: _Batch, report: ImportReport, *, force: bool, staging: list[str]
    ) -> Callable[[], Awaitable[None]]:
        """One try at writing `batch`, for `retry_db`, adding its counts to `report`.

        Counted the moment its transaction commits, before the connection goes back to the
        pool: a Ctrl-C landing later (in that release, or in tenacity's own bookkeeping after
        the try) must not lose a committed batch from the count the message gives. A batch
        committed and then failed on its way out is not written, or counted, again.
        """
        committed: list[ImportReport] = []

        def done(written: ImportReport) -> None:
            committed.append(written)
            _add(report, written)

        async def attempt() -> None:
            if committed:
                return
            written = await self._write_one(batch, force=force, staging=staging, done=done)
            if not committed:
                done(written)

        return attempt

    async def _write_one(
        self, batch: _Batch, *, force: bool, staging: list[str], done: Callable[[ImportReport], None] | None = None
    ) -> ImportReport:
        """Write one batch, or the one long session it holds, in its own transaction (on
        sqlite, the long session in short ones: `_write_big_staged`); `done` is told its
        counts as soon as that transaction has committed."""
        if batch.big is not None and self.db.dialect == "sqlite":
            return await self._write_big_staged(batch.big, force=force, staging=staging)
        if batch.big is not None:
            return await self._write_big(batch.big, force=force, done=done)
        return await self._write_batch(batch, force=force, done=done)

    async def _write_batch(
        self, batch: _Batch, *, force: bool, done: Callable[[ImportReport], None] | None = None
    ) -> ImportReport:
        """Write `batch` in ONE transaction and return its counts.

        A handful of statements per batch, not per session: one SELECT of the stored keys,
        one read and one write of the state rows touched, DELETEs of the sessions written
        over, and multi-row INSERTs of sessions and events.
        """
        pending = ImportReport()
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                await self._write_records(conn, batch, pending, force=force)
            if done is not None:
                done(pending)
        return pending

    async def _write_big(
        self, big: BigSession, *, force: bool, done: Callable[[ImportReport], None] | None = None
    ) -> ImportReport:
        """Write the session of a long line in ONE transaction, its events read and inserted a chunk at a time.

        All or nothing, as every session: a failure or Ctrl-C part-way rolls the whole
        session back, and a re-run writes it again (the same upsert as any session). The
        transaction is as long as the session is: on PostgreSQL / MySQL it holds the lock on
        that session's row (and its app / user state rows) meanwhile, nothing else.
        """
        from veadk_mem.sessions.bigline import column_chunks, event_chunks
        from veadk_mem.sessions.state_scopes import split_state

        pending = ImportReport()
        key = (big.app_name, big.user_id, big.id)
        now = time.time()
        updated, created = big.update_time(now), big.create_time(now)
        app_part, user_part, own = split_state(big.state)
        plans = self._insert_plans()
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                stored = await self._stored_times(conn, [key])
                if not force and key in stored and _newer(stored[key], updated):
                    pending.skipped.append("/".join(key))
                    return pending
                await self._merge_states(conn, {key[0]: dict(app_part)}, {(key[0], key[1]): dict(user_part)})
                if key in stored:
                    await self._delete_stored(conn, [key])
                    pending.replaced = 1
                await self._insert_session_row(conn, key, own, created, updated, plans)
                encoded = plans is not None and big.columns  # by the check pass already
                chunks: Iterator[Any] = column_chunks(big) if encoded else event_chunks(big)

                def rows() -> tuple[int, list[Any]] | None:  # the next chunk's rows, built in a thread
                    events = next(chunks, None)
                    if events is None:
                        return None
                    if encoded:
                        assert plans is not None
                        return len(events["id"]), plans[1].rows(events)
                    if plans is None:
                        return len(events), self._event_rows(key[0], key[1], key[2], events)
                    columns = build_columns(
                        [RawSession(key[2], key[0], key[1], {}, updated, events)], self.column_style()
                    )
                    return len(events), plans[1].rows(columns.events)

                ahead = asyncio.ensure_future(asyncio.to_thread(rows))
                try:
                    while (got := await ahead) is not None:
                        ahead = asyncio.ensure_future(asyncio.to_thread(rows))  # read on while this one is written
                        count, event_rows = got
                        if plans is None:
                            await self._insert_event_rows(conn, event_rows)
                        elif event_rows and not await plans[1].insert(conn, event_rows):
                            raise RuntimeError(f"internal: no open transaction for the insert into {plans[1].table}")
                        pending.events += count
                        collect_young()
                finally:
                    if not ahead.done():
                        ahead.cancel()
                        with contextlib.suppress(BaseException):
                            await ahead
                pending.sessions = 1
            if done is not None:
                done(pending)
        return pending

    async def _insert_session_row(
        self,
        conn: AsyncConnection,
        key: tuple[str, str, str],
        own: dict[str, Any],
        created: float,
        updated: float,
        plans: tuple[InsertPlan, InsertPlan] | None,
    ) -> None:
        """The one row in `sessions` of a session written on its own (`_write_big`, `_write_big_staged`)."""
        from sqlalchemy import insert

        from veadk_mem.sessions.rows import TEXTS

        t = self.db.tables
        if plans is not None:
            row: dict[str, list[Any]] = {"app_name": [key[0]], "user_id": [key[1]], "id": [key[2]]}
            row["state"] = [TEXTS[self.column_style()][1](own)]
            row |= {"create_time": [created], "update_time": [updated]}
            if not await plans[0].insert(conn, plans[0].rows(row)):
                raise RuntimeError(f"internal: no open transaction for the insert into {plans[0].table}")
        else:
            session_row = {"app_name": key[0], "user_id": key[1], "id": key[2], "state": own}
            session_row |= {"create_time": stored_time(t, created), "update_time": stored_time(t, updated)}
            await conn.execute(insert(t.sessions), [session_row])

    @contextlib.asynccontextmanager
    async def _short_write(self) -> AsyncIterator[AsyncConnection]:
        """One write transaction (BEGIN IMMEDIATE on sqlite), then `sqlite_gap` for as long as it held the lock."""
        started = time.monotonic()
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                yield conn
        await sqlite_gap(self.db.dialect, time.monotonic() - started)

    async def _write_big_staged(self, big: BigSession, *, force: bool, staging: list[str]) -> ImportReport:
        """sqlite: the session of a long line in short transactions, its row in `sessions` last.

        sqlite has one writer for the whole file: `_write_big`'s one transaction kept every
        agent of the file waiting for the whole session (6.4 s for 200,000 events, past ADK's
        5 s busy timeout). Here each transaction writes `batch_rows()` events and commits,
        with `sqlite_gap`'s pause after it. No reader sees part of the session all the same:
        ADK (get_session, list_sessions, append_event) and vmem find a session by its row in
        `sessions`, and events without that row are read by no one. That row, with the app and
        user state, is written last, in one short transaction, and only when the key's events
        are exactly the ones written here. sqlite's foreign keys stay off on vmem's connections
        (`engine.StoreBase.open`), so the events may wait for their row; ADK's connections turn
        them on, which checks only the rows ADK itself writes or deletes.

        A session stored already (written over) loses its row in the first transaction: from
        then on readers find no such session (an agent appending to it gets ADK's
        SessionNotFoundError) until the new version's row is written; its old events are
        deleted in short transactions before the new ones are written. A failure or Ctrl-C
        part-way leaves events without a session row, seen by no reader; the next import of
        the session deletes them first. Meanwhile `staging` holds what the import's error
        message says of it.
        """
        from sqlalchemy import delete, func, literal_column, select

        from veadk_mem.sessions.bigline import column_chunks, event_chunks
        from veadk_mem.sessions.state_scopes import split_state

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        pending = ImportReport()
        key = (big.app_name, big.user_id, big.id)
        now = time.time()
        updated, created = big.update_time(now), big.create_time(now)
        app_part, user_part, own = split_state(big.state)
        plans = self._insert_plans()
        session_is = (s.app_name == key[0], s.user_id == key[1], s.id == key[2])
        events_of = (e.app_name == key[0], e.user_id == key[1], e.session_id == key[2])
        step = self.batch_rows()
        written: list[str] = []  # the ids of the events written, to take them back if the key is taken meanwhile

        async def still_free(conn: AsyncConnection) -> None:
            """_Taken when the session's row appeared since (an agent or another import created it)."""
            if (await conn.execute(select(literal_column("1")).where(*session_is))).first() is not None:
                raise _Taken

        # 1. the stored version, re-checked as in `_write_big`: its row goes first
        async with self._short_write() as conn:
            stored = await self._stored_times(conn, [key])
            if not force and key in stored and _newer(stored[key], updated):
                pending.skipped.append("/".join(key))
                return pending
            if key in stored:
                await conn.execute(delete(t.sessions).where(*session_is))
                pending.replaced = 1
        name = "/".join(key)
        staging.append(
            f"session {name} was not written (its stored version was removed first)"
            if pending.replaced
            else f"session {name} was not written"
        )

        async def rest() -> ImportReport:
            # 2. the key's events without a session row: the stored version's, or an interrupted import's
            while True:
                async with self._short_write() as conn:
                    await still_free(conn)
                    some = select(literal_column("rowid")).where(*events_of).limit(step).scalar_subquery()
                    gone = (await conn.execute(delete(t.events).where(literal_column("rowid").in_(some)))).rowcount
                if gone < step:
                    break
            # 3. the events, `step` at a time, each group read and built in a thread while the last is written
            encoded = plans is not None and big.columns  # by the check pass already
            chunks: Iterator[Any] = column_chunks(big) if encoded else event_chunks(big)

            left: list[tuple[list[str], list[Any]]] = []  # a chunk's ids and rows beyond the last group

            def group() -> tuple[list[str], list[Any]] | None:
                """The next `step` events' ids and rows (a spool chunk is 2,000 events: split or joined)."""
                ids: list[str] = []
                rows: list[Any] = []
                while len(ids) < step:
                    if not left:
                        events = next(chunks, None)
                        if events is None:
                            break
                        left.append(built(events))
                    more_ids, more_rows = left.pop()
                    take = step - len(ids)
                    ids += more_ids[:take]
                    rows += more_rows[:take]
                    if len(more_ids) > take:
                        left.append((more_ids[take:], more_rows[take:]))
                return (ids, rows) if ids else None

            def built(events: Any) -> tuple[list[str], list[Any]]:
                if encoded:
                    assert plans is not None
                    return events["id"], plans[1].rows(events)
                ids = [event.id for event in events]
                if plans is None:
                    return ids, self._event_rows(key[0], key[1], key[2], events)
                columns = build_columns([RawSession(key[2], key[0], key[1], {}, updated, events)], self.column_style())
                return ids, plans[1].rows(columns.events)

            ahead = asyncio.ensure_future(asyncio.to_thread(group))
            try:
                while (got := await ahead) is not None:
                    ahead = asyncio.ensure_future(asyncio.to_thread(group))
                    ids, event_rows = got
                    async with self._short_write() as conn:
                        await still_free(conn)
                        if plans is None:
                            await self._insert_event_rows(conn, event_rows)
                        elif not await plans[1].insert(conn, event_rows):
                            raise RuntimeError(f"internal: no open transaction for the insert into {plans[1].table}")
                    written.extend(ids)
                    pending.events += len(ids)
                    collect_young()
            finally:
                if not ahead.done():
                    ahead.cancel()
                    with contextlib.suppress(BaseException):
                        await ahead
            # 4. the session row and the state, once the key holds exactly the events written here
            async with self._short_write() as conn:
                await still_free(conn)
                have = (await conn.execute(select(func.count()).select_from(t.events).where(*events_of))).scalar_one()
                if have != len(written):
                    raise StoreError(
                        f"session {'/'.join(key)}: {have:,} events under its key where {len(written):,} were written "
                        "(another writer changed them meanwhile); its session row was not written",
                        hint="run the import again",
                    )
                await self._merge_states(conn, {key[0]: dict(app_part)}, {(key[0], key[1]): dict(user_part)})
                await self._insert_session_row(conn, key, own, created, updated, plans)
            pending.sessions = 1
            return pending

        try:
            return await rest()
        except _Taken:
            staging.clear()
            for i in range(0, len(written), BATCH):  # the other writer's session, as it wrote it
                async with self._short_write() as conn:
                    await conn.execute(delete(t.events).where(*events_of, e.id.in_(written[i : i + BATCH])))
            raise StoreError(
                f"session {name} was created by another writer while it was being imported; left as that writer has it",
                hint="import the file again (with --force to write the file's version over it)",
            ) from None
        finally:
            if pending.sessions:
                staging.clear()

    async def _write_records(self, conn: AsyncConnection, batch: _Batch, pending: ImportReport, *, force: bool) -> None:
        from sqlalchemy import insert

        t = self.db.tables
        heads = [r for r in batch.records if not isinstance(r, dict)]
        # the last record of a key wins, as when they were written one after the other
        sessions: dict[tuple[str, str, str], int] = {(h[0], h[1], h[2]): i for i, h in enumerate(heads)}
        stored = await self._stored_times(conn, list(sessions))
        if not force:
            for key, i in list(sessions.items()):
                if key in stored and _newer(stored[key], heads[i][3]):
                    pending.skipped.append("/".join(key))
                    del sessions[key]  # an agent wrote to it after the file was made: keep its events
        kept = [sessions.get((h[0], h[1], h[2])) == i for i, h in enumerate(heads)]
        app_parts: dict[str, dict[str, Any]] = defaultdict(dict)
        user_parts: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
        index = 0
        for record in batch.records:  # merged in file order, as when records were written one by one
            if not isinstance(record, dict):
                app_part, user_part, _ = batch.splits[index]
                index += 1
                if not kept[index - 1]:
                    continue  # skipped, or an earlier copy of a key written again later in the batch
                app_parts[record[0]].update(app_part)
                user_parts[(record[0], record[1])].update(user_part)
            elif record.get("kind") == "app_state":
                app_parts[record["appName"]].update(record["state"])
                pending.app_states += 1
            else:
                user_parts[(record["appName"], record["userId"])].update(record["state"])
                pending.user_states += 1
        await self._merge_states(conn, app_parts, user_parts)
        existing = [k for k in sessions if k in stored]
        await self._delete_stored(conn, existing)
        for i in sessions.values():
            pending.sessions += 1
            pending.events += heads[i][5]
        pending.replaced += len(existing)
        if batch.sessions is None:
            await self._insert_prepared(conn, batch, heads, kept)
            return
        session_rows: list[dict[str, Any]] = []
        event_rows: list[dict[str, Any]] = []
        for (app, user, sid), i in sessions.items():
            session, head = batch.sessions[i], heads[i]
            session_rows.append(
                {
                    "app_name": app,
                    "user_id": user,
                    "id": sid,
                    "state": batch.splits[i][2],
                    "create_time": stored_time(t, head[4]),
                    "update_time": stored_time(t, head[3]),
                }
            )
            event_rows += self._event_rows(app, user, sid, session.events)
        for i in range(0, len(session_rows), BATCH):
            await conn.execute(insert(t.sessions), session_rows[i : i + BATCH])
        await self._insert_event_rows(conn, event_rows)

    async def _delete_stored(self, conn: AsyncConnection, existing: list[tuple[str, str, str]]) -> None:
        """Delete these stored sessions and their events (an import writes them over)."""
        from sqlalchemy import and_, delete, or_

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        for i in range(0, len(existing), BATCH):
            groups: dict[tuple[str, str], list[str]] = defaultdict(list)
            for app, user, sid in existing[i : i + BATCH]:
                groups[(app, user)].append(sid)
            await conn.execute(
                delete(t.events).where(
                    or_(
                        *[
                            and_(e.app_name == a, e.user_id == u, e.session_id.in_(ids))
                            for (a, u), ids in groups.items()
                        ]
                    )
                )
            )
            await conn.execute(
                delete(t.sessions).where(
                    or_(
                        *[
                            and_(self.db.key_eq(s.app_name, a), self.db.key_eq(s.user_id, u), s.id.in_(ids))
                            for (a, u), ids in groups.items()
                        ]
                    )
                )
            )

    def _event_rows(self, app: str, user: str, sid: str, events: list[RawEvent]) -> list[dict[str, Any]]:
        """The events' rows for SQLAlchemy's insert (the path without driver plans); notes fields a v0 table drops."""
        t = self.db.tables
        if not t.missing:
            return [event_row(t, app, user, sid, event) for event in events]
        rows: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        for event in events:
            rows.append(event_row(t, app, user, sid, event, counts))
            for name in counts:
                self._dropped.setdefault(name, set()).add((app, user, sid, event.id))
            counts.clear()
        return rows

    async def _insert_event_rows(self, conn: AsyncConnection, event_rows: list[dict[str, Any]]) -> None:
        from sqlalchemy import insert

        t = self.db.tables
        stmt = insert(t.events)
        if t.layout is Layout.V0 and self.db.dialect == "mysql":
            # aiomysql cannot bind bytes with PyMySQL 1.2: send the pickle as hex, UNHEX() it in SQL
            from sqlalchemy import bindparam, func

            stmt = stmt.values(actions=func.unhex(bindparam("actions_hex")))
            for row in event_rows:
                row["actions_hex"] = row.pop("actions").hex()
        for i in range(0, len(event_rows), BATCH * 2):
            await conn.execute(stmt, event_rows[i : i + BATCH * 2])

    def _insert_plans(self) -> tuple[InsertPlan, InsertPlan] | None:
        """Driver plans for the sessions and events tables (ADK 2.x or SqliteSessionService tables), else None."""
        from veadk_mem.sessions.driver import InsertPlan

        if "insert_plans" not in self.db.stmts:
            t = self.db.tables
            plans = None
            if t.layout in (Layout.V1, Layout.SQLITE):
                sessions, events = (InsertPlan.make(table, self.db.engine.dialect) for table in (t.sessions, t.events))
                plans = None if sessions is None or events is None else (sessions, events)
            self.db.stmts["insert_plans"] = plans
        cached: tuple[InsertPlan, InsertPlan] | None = self.db.stmts["insert_plans"]
        return cached

    def _prepare(
        self, records: list[RawSession | dict[str, Any]], plans: tuple[InsertPlan, InsertPlan] | None
    ) -> _Batch:
        """`records` as a batch: with driver plans, every row built; else the sessions kept for `event_row`.

        Runs in the reading thread: building the rows (JSON text, times) is most of a write's
        Python work, and here it overlaps the database's own work on the previous batch.
        """
        if plans is not None:
            return _rows_batch(build_columns(records, self.column_style()), plans)
        mixed, splits = heads_of(records)
        return _Batch(mixed, splits, [r for r in records if not isinstance(r, dict)])

    async def _insert_prepared(self, conn: AsyncConnection, batch: _Batch, heads: list[Head], kept: list[bool]) -> None:
        """Insert the built rows of the sessions `kept` says are written, and their events."""
        session_rows, event_rows = batch.session_rows, batch.event_rows
        if not all(kept):
            session_rows = [row for row, keep in zip(session_rows, kept, strict=True) if keep]
            wanted: list[tuple[Any, ...]] = []
            start = 0
            for head, keep in zip(heads, kept, strict=True):
                end = start + head[5]
                if keep:
                    wanted += event_rows[start:end]
                start = end
            event_rows = wanted
        plans = self._insert_plans()
        assert plans is not None
        for plan, rows in zip(plans, (session_rows, event_rows), strict=True):
            if rows and not await plan.insert(conn, rows):
                raise RuntimeError(f"internal: no open transaction for the insert into {plan.table}")

    async def _stored_times(self, conn: AsyncConnection, keys: list[tuple[str, str, str]]) -> dict[Any, float]:
        """The stored update time of each of `keys` that exists (rows locked on PostgreSQL/MySQL).

        One statement, built once, which the primary key index answers: the keys as three
        arrays joined through unnest() on PostgreSQL (it plans a long IN list of row values
        as one slow probe per row), as one JSON array through json_each() on sqlite (one
        call into aiosqlite's thread per batch: each call waits for the GIL behind the
        thread reading the next batch), and `(app_name, user_id, id) IN (...)` lists of
        `LOCKING_IN_KEYS` on MySQL.
        """
        from sqlalchemy import bindparam, func, select, tuple_

        stmt = self.db.stmts.get("stored_times")
        if stmt is None:
            s = self.db.tables.sessions.c
            if self.db.dialect == "postgresql":
                from sqlalchemy import Text
                from sqlalchemy.dialects.postgresql import ARRAY

                arrays = [bindparam(n, type_=ARRAY(Text)) for n in ("k_apps", "k_users", "k_ids")]
                k = func.unnest(*arrays).table_valued("a", "u", "i").render_derived()
                stmt = (
                    select(s.app_name, s.user_id, s.id, s.update_time)
                    .join_from(
                        self.db.tables.sessions, k, (s.app_name == k.c.a) & (s.user_id == k.c.u) & (s.id == k.c.i)
                    )
                    .with_for_update(of=self.db.tables.sessions)
                )
            elif self.db.dialect == "sqlite":
                j = func.json_each(bindparam("k_json")).table_valued("value")
                stmt = select(s.app_name, s.user_id, s.id, s.update_time).join_from(
                    self.db.tables.sessions,
                    j,
                    (s.app_name == func.json_extract(j.c.value, "$[0]"))
                    & (s.user_id == func.json_extract(j.c.value, "$[1]"))
                    & (s.id == func.json_extract(j.c.value, "$[2]")),
                )
            else:
                stmt = self.db.for_update(
                    select(s.app_name, s.user_id, s.id, s.update_time).where(
                        tuple_(s.app_name, s.user_id, s.id).in_(bindparam("k_keys", expanding=True))
                    ),
                    self.db.tables.sessions,
                )
            self.db.stmts["stored_times"] = stmt
        wanted = set(keys)
        found: dict[Any, float] = {}
        step = max(len(keys), 1) if self.db.dialect in ("postgresql", "sqlite") else LOCKING_IN_KEYS
        for i in range(0, len(keys), step):
            params = self.db.key_params(keys[i : i + step])  # the bound names `key_match` uses too
            for app, user, sid, stamp in await conn.execute(stmt, params):
                if (app, user, sid) in wanted:  # exact: MySQL's collation matches more
                    found[(app, user, sid)] = to_epoch(stamp)
        return found

    async def _merge_states(
        self,
        conn: AsyncConnection,
        app_parts: dict[str, dict[str, Any]],
        user_parts: dict[tuple[str, str], dict[str, Any]],
    ) -> None:
        """Merge app and user state into their rows: create missing rows, update changed ones, skip the rest."""
        from sqlalchemy import bindparam, insert, select, update

        t = self.db.tables
        stamp = stored_time(t, time.time())
        a, u = t.app_states, t.user_states
        apps = sorted(app_parts)
        current_app: dict[str, dict[str, Any]] = {}
        current_user: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(0, len(apps), BATCH):
            stmt = self.db.for_update(select(a.c.app_name, a.c.state).where(a.c.app_name.in_(apps[i : i + BATCH])), a)
            for name, state in await conn.execute(stmt):
                if name in app_parts:
                    current_app[name] = dict(state or {})
        pairs = sorted(user_parts)
        for i in range(0, len(pairs), BATCH):
            chunk = pairs[i : i + BATCH]
            by_user = select(u.c.app_name, u.c.user_id, u.c.state).where(
                u.c.app_name.in_(sorted({p[0] for p in chunk})), u.c.user_id.in_(sorted({p[1] for p in chunk}))
            )
            by_user = self.db.for_update(by_user, u)
            for row in await conn.execute(by_user):
                if (row.app_name, row.user_id) in user_parts:
                    current_user[(row.app_name, row.user_id)] = dict(row.state or {})
        new_apps = [
            {"app_name": name, "state": dict(part), "update_time": stamp}
            for name, part in app_parts.items()
            if name not in current_app
        ]
        changed_apps = [
            {"b_app": name, "state": {**current_app[name], **part}, "update_time": stamp}
            for name, part in app_parts.items()
            if name in current_app and {**current_app[name], **part} != current_app[name]
        ]
        new_users = [
            {"app_name": app, "user_id": user, "state": dict(part), "update_time": stamp}
            for (app, user), part in user_parts.items()
            if (app, user) not in current_user
        ]
        changed_users = [
            {"b_app": app, "b_user": user, "state": {**current_user[(app, user)], **part}, "update_time": stamp}
            for (app, user), part in user_parts.items()
            if (app, user) in current_user and {**current_user[(app, user)], **part} != current_user[(app, user)]
        ]
        if new_apps:
            await conn.execute(insert(a), new_apps)
        if changed_apps:
            await conn.execute(update(a).where(self.db.key_eq(a.c.app_name, bindparam("b_app"))), changed_apps)
        if new_users:
            await conn.execute(insert(u), new_users)
        if changed_users:
            await conn.execute(
                update(u).where(
                    self.db.key_eq(u.c.app_name, bindparam("b_app")), self.db.key_eq(u.c.user_id, bindparam("b_user"))
                ),
                changed_users,
            )


class _Taken(Exception):
    """The key of a session being written in short transactions was taken by another writer meanwhile."""


@dataclass(slots=True)
class _Batch:
    """Records for one transaction: session heads and state records in file order, and the rows.

    On the driver path the rows are built (`session_rows`, `event_rows`: one per session, then
    their events session after session); otherwise `sessions` keeps the sessions for `event_row`.
    """

    records: list[Head | dict[str, Any]]
    splits: list[Split]  # split_state of each session, in order
    sessions: list[RawSession] | None = None
    session_rows: list[tuple[Any, ...]] = field(default_factory=list)
    event_rows: list[tuple[Any, ...]] = field(default_factory=list)
    big: BigSession | None = None  # or, alone, a session of a long line, streamed as it is written


def _rows_batch(columns: Columns, plans: tuple[InsertPlan, InsertPlan]) -> _Batch:
    """A batch of `columns` with its rows built by the driver plans (times converted, tuples in column order)."""
    session_plan, event_plan = plans
    return _Batch(
        columns.records,
        columns.splits,
        None,
        session_plan.rows(columns.sessions) if columns.sessions.get("id") else [],
        event_plan.rows(columns.events) if columns.events.get("id") else [],
    )


Take = Callable[[], "tuple[_Batch, bool]"]  # the next batch and whether the input ended, read in a thread


def _take_batch(records: Iterator[Any], seconds: float, max_rows: int) -> tuple[list[Any], bool]:
    """The next records, up to `max_rows` rows or `seconds` of reading, or up to a BigSession: (batch, input ended)."""
    batch: list[Any] = []
    started, rows = time.monotonic(), 0
    while rows < max_rows and len(batch) < 5000 and time.monotonic() - started < seconds:
        record = next(records, None)
        if record is None:
            return batch, True
        batch.append(record)
        if isinstance(record, BigSession):  # written alone, streamed (`Writes._write_big`)
            return batch, False
        rows += 1 + (0 if isinstance(record, dict) else len(record.events))
    return batch, False


def _staged_note(staging: list[str]) -> str:
    """What an error message says of a session left part-written in short transactions (none: "")."""
    if not staging:
        return ""
    return f" ({staging[0]}: its events so far have no session row, so no reader sees them; a re-run replaces them)"


def _nothing(staging: list[str]) -> str:
    """The end of the message of an import stopped before its first commit."""
    return f"no session was written{_staged_note(staging)}" if staging else "nothing was written"


def _newer(stored: float, file_time: float) -> bool:
    """True when a stored update time is later than the file's (beyond the columns' microseconds)."""
    return stored > file_time + 1e-3


def _add(report: ImportReport, batch: ImportReport) -> None:
    report.sessions += batch.sessions
    report.events += batch.events
    report.app_states += batch.app_states
    report.user_states += batch.user_states
    report.replaced += batch.replaced
    report.skipped += batch.skipped
