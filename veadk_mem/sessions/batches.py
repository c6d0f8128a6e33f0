"""An import's batch pipeline: records cut into batches, each written in its own transaction
while the next is read in a thread, retried on a deadlock, and counted as each commits, so
that an error or Ctrl-C part-way says exactly what was committed before it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic.alias_generators import to_camel

from veadk_mem.errors import Interrupted, VmemError
from veadk_mem.sessions.big_writes import BigWrites, ReadAhead, uncancelled
from veadk_mem.sessions.bigline import BigSession
from veadk_mem.sessions.dberrors import concurrent_ddl, duplicate_in, partial, retry_db, retryable
from veadk_mem.sessions.engine import sqlite_gap
from veadk_mem.sessions.layout import LATEST_SCHEMA_VERSION, SCHEMA_VERSION_KEY, Layout, build_tables
from veadk_mem.sessions.rawsession import RawSession
from veadk_mem.sessions.read_queries import MEMORY_FACTOR
from veadk_mem.sessions.records import ImportReport, Progress, batch_bytes, noop
from veadk_mem.sessions.upsert import Batch, Done, Upsert

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.sessions.engine import Database

BATCH_ROWS = 20_000  # rows an import writes per transaction (`Batches.batch_rows`)
SQLITE_BATCH_ROWS = 5_000  # ... on sqlite, where every agent waits for the write lock meanwhile

Take = Callable[[], "tuple[Batch, bool]"]  # the next batch and whether the input ended, read in a thread


async def ensure_tables(db: Database) -> bool:
    """Create ADK's v1 tables exactly as ADK 2.x does when the database has none.

    Another creator (a second import, the agent's first start) may be creating them at
    the same moment: MySQL's DDL commits at once, so its CREATE TABLE can fail with
    "already exists" half-way. Then the layout is read again and the missing tables
    created, a few times, instead of failing.
    """
    if db.layout is not Layout.EMPTY:
        return False
    from sqlalchemy import insert, select

    tables = build_tables(Layout.EMPTY)

    async def create() -> None:
        assert tables.internal is not None
        # ADK's order: the metadata table first, its schema_version row last. On MySQL/MariaDB
        # each CREATE TABLE commits at once; a metadata table without its row then marks a
        # creation under way (or stopped), which `detect_layout` reads as empty, so a second
        # creator, or the next import, finishes it rather than failing
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                await conn.run_sync(tables.metadata.create_all)
                have = await conn.execute(
                    select(tables.internal.c.value).where(tables.internal.c.key == SCHEMA_VERSION_KEY)
                )
                if have.first() is None:
                    await conn.execute(
                        insert(tables.internal).values(key=SCHEMA_VERSION_KEY, value=LATEST_SCHEMA_VERSION)
                    )

    with db.failures():  # a short step, finished even when Ctrl-C comes meanwhile (a second one stops it)
        await uncancelled(retry_db(create, concurrent_ddl))
    db.use_tables(tables, Layout.V1)
    return True


class Batches:
    """`import_records`: the pipeline of an import's write pass."""

    def __init__(self, db: Database) -> None:
        self.db = db

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

        Each session is written whole or not at all. A batch commits after `batch_seconds`,
        `batch_rows` rows (default `batch_rows()`) or about `batch_bytes()` of memory (by its
        records' input lines, the batch read ahead included), so a failure loses at most the
        open batch; the error says how many sessions were committed before it, and a re-run is
        idempotent. Without `force`,
        a session stored with a newer update time than the record's is left alone and named
        in `report.skipped`.
        """
        from veadk_mem import events as ev
        from veadk_mem.sessions.rawsession import from_model

        records_iter = (from_model(r) if isinstance(r, ev.Session) else r for r in records)
        batch_rows = batch_rows or self.batch_rows()
        # a batch in memory several times over (decoded, prepared rows), the next read meanwhile
        max_bytes = batch_bytes() // (MEMORY_FACTOR * 2)

        def reader(upsert: Upsert) -> Take:
            first = [True]
            held: list[Any] = []  # a long line's session met while filling a batch: the next batch

            def take() -> tuple[Batch, bool]:
                if held:
                    return Batch([], [], big=held.pop()), False
                # the first batch is small: nothing is written while it is read, the rest overlap
                rows = min(batch_rows, 1000) if first[0] else batch_rows
                first[0] = False
                records, done = _take_batch(records_iter, batch_seconds, rows, max_bytes, upsert.prepared)
                if records and isinstance(records[-1], BigSession):
                    held.append(records.pop())
                    if not records:
                        return Batch([], [], big=held.pop()), done
                return upsert.prepare(records), done and not held

            return take

        return await self._import(reader, force, progress)

    def batch_rows(self) -> int:
        """Rows an import writes per transaction: fewer on sqlite, whose one write lock the agents wait for.

        On PostgreSQL and MySQL a batch locks only its own rows, and larger batches cost
        fewer round trips; a sqlite batch holds the whole file's write lock while it is
        written, and an agent's append waits that long.
        """
        return SQLITE_BATCH_ROWS if self.db.dialect == "sqlite" else BATCH_ROWS

    async def _import(self, reader: Callable[[Upsert], Take], force: bool, progress: Progress | None) -> ImportReport:
        """Create the tables if there are none, then write what `reader(upsert)` takes, batch by batch."""
        report = ImportReport()
        report.created_tables = await ensure_tables(self.db)
        report.layout = self.db.layout.value
        run = _Run(self.db, Upsert(self.db), report, force)
        run.big = BigWrites(run.upsert, self.batch_rows)
        take = reader(run.upsert)
        try:
            await run.write_all(take, progress or noop)
        finally:
            report.warnings = _dropped_warnings(self.db, run.upsert.dropped)
        return report


@dataclass
class _Run:
    """One import's write pass: its writers, its report, and the session being staged on sqlite."""

    db: Database
    upsert: Upsert
    report: ImportReport
    force: bool
    big: BigWrites | None = None
    staging: list[str] | None = None  # a session written in short transactions, while it is under way

    async def write_all(self, take: Take, advance: Progress) -> None:
        """Write the batches `take` gives, each in its own transaction.

        The next batch is read (and its rows built) in a thread while this one is written: the
        database works meanwhile, in its server or in sqlite's C code without the GIL.
        """
        self.staging = []
        ended = [False]

        def produce() -> Batch | None:
            if ended[0]:
                return None
            batch, ended[0] = take()
            return batch if batch.records or batch.big is not None else None

        try:
            async with ReadAhead(produce) as batches:
                async for batch in batches:
                    started = time.monotonic()
                    # Another writer (a second import, the agent) may deadlock with this batch or
                    # create a state row it meant to insert: the database rolled it back whole, so
                    # the same records are written again.
                    await retry_db(self._counted_attempt(batch), self._collided)
                    if not ended[0]:
                        await sqlite_gap(self.db.dialect, time.monotonic() - started)
                    advance(len(batch.sessions) if batch.big is None else 1)  # sessions, as the summary
        except (asyncio.CancelledError, KeyboardInterrupt):
            # Ctrl-C: say what was committed, as for any other failure part-way
            stopped = Interrupted(self._stopped("interrupted"))
            stopped.committed = self._committed()
            raise stopped from None
        except Exception as exc:
            error = exc if isinstance(exc, VmemError) else self.db.fail(exc, unchanged=False)
            error.message = self._stopped(partial(error.message))  # what was committed, said instead
            error.args = (error.message,)
            error.committed = self._committed()
            raise error from None

    def _collided(self, exc: BaseException) -> bool:
        """True when another writer collided with a batch, which was rolled back whole: a deadlock,
        or an app's or user's state row it created between the batch's look for the row and its
        INSERT (write batches run at READ COMMITTED, which locks out no row that does not exist
        yet: two first imports of an app at once, an agent's first session of it). Written again,
        the batch finds the row and merges into it. A session row another writer created meanwhile
        stops the import, naming it: that session is the agent's own."""
        t = self.db.tables
        return retryable(exc) or duplicate_in(exc) in (t.app_states.name, t.user_states.name)

    def _committed(self) -> dict[str, int]:
        """What the import had committed when it stopped, as the history records it."""
        r = self.report
        return {"sessions": r.sessions, "events": r.events, "app_states": r.app_states, "user_states": r.user_states}

    def _stopped(self, cause: str) -> str:
        """The message of an import stopped by `cause`: what was committed before it."""
        report, note = self.report, _staged_note(self.staging or [])
        if report.sessions or report.app_states or report.user_states:
            return (
                f"{cause} -- {report.sessions:,} session(s) before it were written and committed"
                f"{note}; re-running the import is safe"
            )
        return f"{cause} -- {'no session was written' + note if note else 'nothing was written'}"

    def _counted_attempt(self, batch: Batch) -> Callable[[], Awaitable[None]]:
        """One try at writing `batch`, for `retry_db`, adding its counts to the report.

        Counted the moment its transaction commits, before the connection goes back to the
        pool: a Ctrl-C landing later (in that release, or in tenacity's own bookkeeping after
        the try) must not lose a committed batch from the count the message gives. A batch
        committed and then failed on its way out is not written, or counted, again.
        """
        committed: list[ImportReport] = []

        def done(written: ImportReport) -> None:
            committed.append(written)
            _add(self.report, written)

        async def attempt() -> None:
            if committed:
                return
            written = await self._write_one(batch, done)
            if not committed:
                done(written)

        return attempt

    async def _write_one(self, batch: Batch, done: Done) -> ImportReport:
        """Write one batch, or the one long session it holds; `done` is told its counts as soon as
        its transaction has committed."""
        if batch.big is not None:  # its own final transaction is shielded (`BigWrites`)
            assert self.big is not None and self.staging is not None
            return await self.big.write(batch.big, force=self.force, staging=self.staging, done=done)
        return await uncancelled(self.upsert.write_batch(batch, force=self.force, done=done))


def _dropped_warnings(db: Database, dropped: dict[str, set[tuple[str, ...]]]) -> list[str]:
    """One warning per field an old v0 table had no column for, with how many events had it."""
    t = db.tables
    where = f"ADK {t.releases}" if t.releases else "this v0 database"
    return [
        f"{to_camel(name)} dropped from {len(keys):,} event(s): the tables of {where} have no {name} column"
        for name, keys in sorted(dropped.items())
    ]


def _take_batch(
    records: Iterator[Any],
    seconds: float,
    max_rows: int,
    max_bytes: int,
    prepared: Callable[[Any, float], Any] | None = None,
) -> tuple[list[Any], bool]:
    """The next records, up to `max_rows` rows, `max_bytes` of their input lines (`RawSession.size`) or
    `seconds` of reading, or up to a BigSession: (batch, input ended). Each session is taken as
    `prepared(session, now)` gives it, when given, as soon as it is read."""
    batch: list[Any] = []
    started, rows, size = time.monotonic(), 0, 0
    now = time.time()
    while rows < max_rows and size < max_bytes and len(batch) < 5000 and time.monotonic() - started < seconds:
        record = next(records, None)
        if record is None:
            return batch, True
        if isinstance(record, BigSession):  # written alone, streamed (`BigWrites.write`)
            batch.append(record)
            return batch, False
        if isinstance(record, dict):
            rows += 1
        else:
            rows += 1 + len(record.events)
            size += record.size
            if prepared is not None:
                record = prepared(record, now)
        batch.append(record)
    return batch, False


def _staged_note(staging: list[str]) -> str:
    """What an error message says of a session left part-written in short transactions (none: "")."""
    if not staging:
        return ""
    return (
        f" ({staging[0]}: its events so far are staged under a key no reader matches, so no reader sees them; "
        "a re-run replaces them)"
    )


def _add(report: ImportReport, batch: ImportReport) -> None:
    report.sessions += batch.sessions
    report.events += batch.events
    report.app_states += batch.app_states
    report.user_states += batch.user_states
    report.replaced += batch.replaced
    report.skipped += batch.skipped
