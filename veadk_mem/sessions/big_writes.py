"""Sessions of a long line (a `bigline.BigSession`), written on their own, their events read from
the spool a chunk at a time: in one transaction (PostgreSQL, MySQL), or on sqlite in short
ones with the session row last (`_write_big_staged`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from veadk_mem.errors import StoreError
from veadk_mem.sessions.bigline import event_chunks
from veadk_mem.sessions.engine import sqlite_gap
from veadk_mem.sessions.preflight import newer as _newer
from veadk_mem.sessions.records import ImportReport
from veadk_mem.sessions.upsert import Done, Upsert

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.bigline import BigSession

T = TypeVar("T")


class ReadAhead(Generic[T]):
    """What `produce` gives until it gives None, each next one built in a thread while the caller
    works on this one: `async with ReadAhead(produce) as items: async for item in items: ...`.

    At the end, a read still in flight is abandoned when the work was cancelled (Ctrl-C), and
    waited for after an error, so that the thread is done with its input before that is dropped.
    """

    def __init__(self, produce: Callable[[], T | None]) -> None:
        self._produce = produce
        self._ahead: asyncio.Future[T | None] | None = None

    async def __aenter__(self) -> ReadAhead[T]:
        return self

    def __aiter__(self) -> ReadAhead[T]:
        return self

    async def __anext__(self) -> T:
        ahead = self._ahead or asyncio.ensure_future(asyncio.to_thread(self._produce))
        self._ahead = None
        got = await ahead
        if got is None:
            raise StopAsyncIteration
        self._ahead = asyncio.ensure_future(asyncio.to_thread(self._produce))  # read on meanwhile
        return got

    async def __aexit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead.done():
            return
        if kind is not None and not issubclass(kind, Exception):  # cancelled, Ctrl-C
            ahead.cancel()
        with contextlib.suppress(BaseException):
            await ahead


async def uncancelled(work: Awaitable[T]) -> T:
    """`work` run to its end even when Ctrl-C cancels the caller meanwhile, then the cancellation.

    Cancelled at the await of its COMMIT, a transaction still commits (in aiosqlite's thread, in
    the server), but the code after it never ran: the batch was in the database and not in the
    count the message gave ("nothing was written" with 200 sessions committed, issue #41 item 3).
    The wait is one short transaction; a second Ctrl-C (Python's KeyboardInterrupt) still stops
    at once.
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task  # its failure, if any, is not what stopped the import
        raise


class _Taken(Exception):
    """The key of a session being written in short transactions was taken by another writer meanwhile."""


class BigWrites:
    """The two writers of a long line's session; the rows and state go through `Upsert`'s helpers."""

    def __init__(self, upsert: Upsert, batch_rows: Callable[[], int]) -> None:
        self.db = upsert.db
        self.upsert = upsert
        self.batch_rows = batch_rows
        # the names `_write_big_staged` (moved from writes.py as it was) calls them by
        self._stored_times = upsert.stored_times
        self._delete_stored = upsert.delete_stored
        self._merge_states = upsert.merge_states
        self._insert_session_row = upsert.insert_session_row
        self._event_rows = upsert.event_rows
        self._insert_event_rows = upsert.insert_event_rows
        self.held = 0.0  # seconds the last short transaction held sqlite's write lock, its COMMIT included
        self.swaps: list[tuple[int, float]] = []  # (events moved, seconds held) of each final transaction

    async def write(self, big: BigSession, *, force: bool, staging: list[str], done: Done | None) -> ImportReport:
        """Write `big`: on sqlite in short transactions (`_write_big_staged`), else in one (`_write_big`)."""
        if self.db.dialect == "sqlite":
            return await self._write_big_staged(big, force=force, staging=staging, done=done)
        return await self._write_big(big, force=force, done=done)

    def _chunk_rows(self, big: BigSession) -> Callable[[], tuple[list[str], list[Any]] | None]:
        """A reader of `big`'s next spool chunk as (event ids, rows), or None at its end; run in a thread."""
        chunks = event_chunks(big)

        def rows() -> tuple[list[str], list[Any]] | None:
            events = next(chunks, None)
            if events is None:
                return None
            return [event.id for event in events], self.upsert.event_rows(big.app_name, big.user_id, big.id, events)

        return rows

    async def _write_big(self, big: BigSession, *, force: bool, done: Done | None = None) -> ImportReport:
        """Write the session of a long line in ONE transaction, its events read and inserted a chunk at a time.

        All or nothing, as every session: a failure or Ctrl-C part-way rolls the whole
        session back, and a re-run writes it again (the same upsert as any session). The
        transaction is as long as the session is: on PostgreSQL / MySQL it holds the lock on
        that session's row (and its app / user state rows) meanwhile, nothing else.
        """
        from veadk_mem.sessions.state_scopes import split_state

        pending = ImportReport()
        key = (big.app_name, big.user_id, big.id)
        now = time.time()
        updated, created = big.update_time(now), big.create_time(now)
        app_part, user_part, own = split_state(big.state)
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin() as transaction:
                stored = await self.upsert.stored_times(conn, [key])
                if not force and key in stored and _newer(stored[key], updated):
                    pending.skipped.append("/".join(key))
                    return pending
                await self.upsert.merge_states(conn, {key[0]: dict(app_part)}, {(key[0], key[1]): dict(user_part)})
                if key in stored:
                    await self.upsert.delete_stored(conn, [key])
                    pending.replaced = 1
                await self.upsert.insert_session_row(conn, key, own, created, updated)
                async with ReadAhead(self._chunk_rows(big)) as chunks:
                    async for ids, event_rows in chunks:
                        # a Ctrl-C waits for the chunk's INSERT: cancelled inside the driver's
                        # exchange, the connection never answered the ROLLBACK (the import hung)
                        await uncancelled(self.upsert.insert_event_rows(conn, event_rows))
                        pending.events += len(ids)
                pending.sessions = 1

                async def commit() -> None:
                    await transaction.commit()
                    if done is not None:
                        done(pending)

                await uncancelled(commit())  # a Ctrl-C at the COMMIT: committed, and counted
        return pending

    @contextlib.asynccontextmanager
    async def _short_write(self) -> AsyncIterator[AsyncConnection]:
        """One write transaction (BEGIN IMMEDIATE on sqlite), then `sqlite_gap` for as long as it held the lock."""
        started = time.monotonic()
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                yield conn
        self.held = time.monotonic() - started
        await sqlite_gap(self.db.dialect, self.held)

    async def _clear(self, app: str, user: str, sid: str, step: int) -> None:
        """Delete the events under (app, user, sid), `step` rows a short transaction."""
        from sqlalchemy import delete, literal_column, select

        e = self.db.tables.events
        while True:
            async with self._short_write() as conn:
                where = (e.c.app_name == app, e.c.user_id == user, e.c.session_id == sid)
                some = select(literal_column("rowid")).where(*where).limit(step).scalar_subquery()
                gone = (await conn.execute(delete(e).where(literal_column("rowid").in_(some)))).rowcount
            if gone < step:
                return

    async def _swap(
        self,
        key: tuple[str, str, str],
        seen: Any,
        written: int,
        pending: ImportReport,
        parts: tuple[Any, Any, Any, float, float],
    ) -> None:
        """The staged writer's last transaction: when the key's row is as `seen` (its update time, or
        None) and the staging key holds the `written` events, the stored version out (its events to
        `replaced_id`), the staged events in under the key, the states merged and the row written."""
        from sqlalchemy import delete, func, select, update

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        app_part, user_part, own, created, updated = parts
        session_is = (s.app_name == key[0], s.user_id == key[1], s.id == key[2])

        def events_of(sid: str) -> tuple[Any, ...]:
            return (e.app_name == key[0], e.user_id == key[1], e.session_id == sid)

        async with self._short_write() as conn:
            if (await conn.execute(select(s.update_time).where(*session_is))).first() != seen:
                raise _Taken
            staged = staging_id(key[2])
            have = (
                await conn.execute(select(func.count()).select_from(t.events).where(*events_of(staged)))
            ).scalar_one()
            if have != written:
                raise StoreError(
                    f"session {'/'.join(key)}: {have:,} events under its staging key where {written:,} were written "
                    "(another writer changed them meanwhile); its session row was not written",
                    hint="run the import again",
                )
            if seen is not None:
                await conn.execute(update(t.events).where(*events_of(key[2])).values(session_id=replaced_id(key[2])))
                await conn.execute(delete(t.sessions).where(*session_is))
                pending.replaced = 1
            await conn.execute(update(t.events).where(*events_of(staged)).values(session_id=key[2]))
            await self._merge_states(conn, {key[0]: dict(app_part)}, {(key[0], key[1]): dict(user_part)})
            await self._insert_session_row(conn, key, own, created, updated)
        pending.sessions = 1

    async def _write_big_staged(
        self, big: BigSession, *, force: bool, staging: list[str], done: Done | None = None
    ) -> ImportReport:
        """sqlite: the session of a long line in short transactions under a staging key, moved to its
        own key with its session row in one short transaction at the end.

        sqlite has one writer for the whole file: `_write_big`'s one transaction kept every
        agent of the file waiting for the whole session, past ADK's busy timeout for a long
        one. Here each transaction writes `batch_rows()` events and commits,
        with `sqlite_gap`'s pause after it. The events go under the session id `staging_id(id)`
        (same app and user), which no ADK reader matches: ADK reads events by (app, user,
        session id), and an agent that creates the session meanwhile (`get_session() or
        create_session()`) would otherwise pick them up. The last transaction, when the key's
        session row is still as the first one saw it (none, or the stored version unchanged),
        moves the stored version's events (if any) to `replaced_id(id)`, its row out, the staged
        events to the session's key (one UPDATE each) and writes the row with the app and user
        state; the replaced events are deleted afterwards in short transactions. Readers see
        the stored version whole, then the new one whole. sqlite's foreign keys stay off on
        vmem's connections (`engine.Database.open`), so the staged events need no row.

        A failure, Ctrl-C or kill -9 part-way leaves rows under the staging keys only, read by
        no agent; `doctor` counts them, `session delete` / `forget` remove them by key, and the
        next import of the session deletes them first. Meanwhile `staging` holds what the
        import's error message says of it.
        """
        from sqlalchemy import select

        from veadk_mem.sessions.state_scopes import split_state

        t = self.db.tables
        s = t.sessions.c
        pending = ImportReport()
        key = (big.app_name, big.user_id, big.id)
        now = time.time()
        updated, created = big.update_time(now), big.create_time(now)
        app_part, user_part, own = split_state(big.state)
        staged_key = (key[0], key[1], staging_id(key[2]))
        session_is = (s.app_name == key[0], s.user_id == key[1], s.id == key[2])

        step = self.batch_rows()
        written = 0

        async def row_time(conn: AsyncConnection) -> Any:
            """The key's session row's update time as stored, None without a row."""
            return (await conn.execute(select(s.update_time).where(*session_is))).first()

        async def clear(sid: str) -> None:
            await self._clear(key[0], key[1], sid, step)

        # 1. the stored version, checked as in `_write_big`; it stays as it is until the last step
        async with self._short_write() as conn:
            stored = await self._stored_times(conn, [key])
            skip = not force and key in stored and _newer(stored[key], updated)
            seen = await row_time(conn)
        if skip:  # the stored version stays; what an interrupted import of this key staged goes
            pending.skipped.append("/".join(key))
            await clear(staging_id(key[2]))
            await clear(replaced_id(key[2]))
            return pending
        name = "/".join(key)
        staging.append(f"session {name} was not written")

        async def rest() -> ImportReport:
            nonlocal written
            # 2. an interrupted import's rows of this key: staged, replaced, and (written by vmem
            #    before #41 staged under its own key) events under the key without a session row
            await clear(staging_id(key[2]))
            await clear(replaced_id(key[2]))
            if seen is None:
                await clear(key[2])
            # 3. the events, `step` at a time, under the staging key, each group read and built in a
            #    thread while the last is written
            produce = _regrouped(event_chunks(big), step, lambda events: self._event_rows(*staged_key, events))
            async with ReadAhead(produce) as groups:
                async for ids, event_rows in groups:
                    async with self._short_write() as conn:
                        await self._insert_event_rows(conn, event_rows)
                    written += len(ids)
                    pending.events += len(ids)

            # 4. one transaction: the stored version out, the staged events in under the key, the row
            swap = self._swap(key, seen, written, pending, (app_part, user_part, own, created, updated))
            await uncancelled(swap)  # a Ctrl-C at its COMMIT: committed, and counted
            self.swaps.append((written, self.held))
            staging.clear()
            if done is not None:
                done(pending)
            if seen is not None:
                await clear(replaced_id(key[2]))  # after a kill -9 here: doctor counts them, a re-run deletes them
            return pending

        try:
            return await rest()
        except _Taken:
            staging.clear()
            await clear(staging_id(key[2]))
            raise StoreError(
                f"session {name} was created or changed by another writer while it was being imported; "
                "left as that writer has it",
                hint="import the file again (with --force to write the file's version over it)",
            ) from None
        finally:
            if pending.sessions:
                staging.clear()


def _regrouped(
    chunks: Iterator[list[Any]], step: int, rows_of: Callable[[list[Any]], list[Any]]
) -> Callable[[], tuple[list[str], list[Any]] | None]:
    """A reader of the next `step` events' ids and rows (`rows_of` a chunk), None at the end: spool
    chunks (2,000 events) split or joined into the staged writer's transactions."""
    left: list[tuple[list[str], list[Any]]] = []  # a chunk's ids and rows beyond the last group

    def group() -> tuple[list[str], list[Any]] | None:
        ids: list[str] = []
        rows: list[Any] = []
        while len(ids) < step:
            if not left:
                events = next(chunks, None)
                if events is None:
                    break
                left.append(([event.id for event in events], rows_of(events)))
            more_ids, more_rows = left.pop()
            take = step - len(ids)
            ids += more_ids[:take]
            rows += more_rows[:take]
            if len(more_ids) > take:
                left.append((more_ids[take:], more_rows[take:]))
        return (ids, rows) if ids else None

    return group


STAGING = "\x1dvmem-staging\x1d"  # a group separator: no id an agent or ADK (uuid4) chooses starts with it
REPLACED = "\x1dvmem-replaced\x1d"


def staging_id(session_id: str) -> str:
    """The session id a long session's events are staged under on sqlite until its row is written (no ADK read)."""
    return STAGING + session_id


def replaced_id(session_id: str) -> str:
    """The session id a written-over version's events are moved to, in the swap, before they are deleted."""
    return REPLACED + session_id


def staged_of(session_id: str) -> str | None:
    """The session id whose staging (or replaced) rows `session_id` holds, None for an ordinary id."""
    for prefix in (STAGING, REPLACED):
        if session_id.startswith(prefix):
            return session_id[len(prefix) :]
    return None
