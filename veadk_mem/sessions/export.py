"""Export framing: JSONL of state records and sessions, read in bounded batches."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.adkjson import printed_event
from veadk_mem.errors import NotFound, StoreError
from veadk_mem.jsonio import compact_json_out as dumps
from veadk_mem.sessions.codec import event_from_row
from veadk_mem.sessions.pages import Frame, PagedReads, session_head, session_tail, times_line
from veadk_mem.sessions.read_queries import FIRST_PAGE, MEMORY_FACTOR, Listings
from veadk_mem.sessions.records import (
    BATCH,
    PAGED_EVENTS,
    Progress,
    SessionFilter,
    SessionKey,
    SessionSummary,
    batch_bytes,
    noop,
)
from veadk_mem.sessions.statements import Statements

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.notes import Notes


class Export:
    """`export_jsonl`: one short read transaction per batch, nothing held while the caller writes."""

    def __init__(self, db: Database, notes: Notes) -> None:
        self.db = db
        self.sql = Statements(db)
        self.listings = Listings(db, notes)
        self.pages = PagedReads(db, notes)
        self.notes = notes  # the sessions left out, and why: handed back with the stream (store.py)

    async def _read_batch(self, batch: Sequence[SessionSummary]) -> tuple[dict[SessionKey, SessionSummary], list[Any]]:
        """These sessions' rows and events, read in ONE short transaction, fully, before returning.

        Rows and events come from the same snapshot (a session's events match its row), and
        no lock is held while the caller writes them out: a slow reader (`export | less`)
        never keeps the agent from writing for longer than one batch takes to read.
        """
        keys = [s.key for s in batch]
        engine = self.db.engine
        if self.db.dialect == "postgresql":
            engine = engine.execution_options(isolation_level="REPEATABLE READ")
        with self.db.failures():
            async with engine.connect() as conn, conn.begin():
                if self.db.dialect == "sqlite":
                    await conn.exec_driver_sql("BEGIN")  # one snapshot for both reads (autocommit otherwise)
                fresh = {x.key: x for x in await self.sql.summaries(conn, None, keys, notes=self.notes)}
                params = self.db.key_params([(k.app_name, k.user_id, k.id) for k in keys])
                rows = list((await conn.execute(self.sql.batch_events_stmt(), params)).all())
        return fresh, rows

    async def _batch_lines(
        self, batch: Sequence[SessionSummary], fresh: dict[SessionKey, SessionSummary], rows: list[Any]
    ) -> list[str]:
        """The JSONL lines of a batch read by `_read_batch`; hands the event loop over every
        200 events, so the next batch's read goes on meanwhile."""
        import asyncio

        tables, warnings = self.db.tables, self.notes.warnings
        events: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        broken: set[tuple[str, str, str]] = set()
        for n, row in enumerate(rows, 1):
            where = (row.app_name, row.user_id, row.session_id)
            try:
                text = dumps(printed_event(event_from_row(tables, row, warnings)))
            except (ValueError, TypeError, AttributeError) as exc:
                if where not in broken:
                    broken.add(where)
                    self.notes.damaged.append("/".join(where))
                    warnings.append(
                        f"session {'/'.join(where)}: event {row.id} is not readable "
                        f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]}); session not exported"
                    )
                continue
            events[where].append(text)
            if n % 200 == 0:  # the read ahead advances only when the loop yields to it
                await asyncio.sleep(0)
        out: list[str] = []
        for summary in batch:
            key = summary.key
            now = fresh.get(key)
            if now is None or (key.app_name, key.user_id, key.id) in broken:
                continue  # deleted since it was listed, or damaged (named in a warning)
            body = ",".join(events.get((key.app_name, key.user_id, key.id), ()))
            out.append(times_line(now) + session_head(now) + body + session_tail(now) + "\n")
        return out

    async def _paged_line(self, listed: SessionSummary) -> AsyncIterator[str]:
        """The export line of a session too large to read whole, read a page at a time (as `get --json`
        reads one: `PagedReads.session_text`) into a private temporary file, then handed out from it in
        pieces: memory holds a page whatever the session's size, and a session found damaged
        part-way, or deleted since it was listed, is left out whole (named in a warning)."""

        key = listed.key
        name = f"{key.app_name}/{key.user_id}/{key.id}"
        pieces = self.pages.session_text(key.app_name, key.user_id, key.id, EXPORT_FRAME, spool=True)
        try:
            first = await anext(pieces)
        except StopAsyncIteration:
            return
        except NotFound:
            return  # deleted since it was listed
        except StoreError as exc:
            if "is not readable" not in exc.message:
                raise
            self.notes.damaged.append(name)
            self.notes.warnings.append(f"{exc.message}; session not exported")
            return
        yield first
        async for piece in pieces:
            yield piece

    async def _probe(self, summaries: Sequence[SessionSummary]) -> float | None:
        """Bytes per event of the first listed session's first events, as stored (None: no JSON column,
        or no event): what the first batches are cut by, before any batch was read."""
        from sqlalchemy import Text, cast, func, select

        first = next((s for s in summaries if s.event_count), None)
        if first is None or "event_data" not in self.db.tables.events.c:
            return None
        e = self.db.tables.events.c
        sample = (
            select(e.event_data)
            .where(e.app_name == first.app_name, e.user_id == first.user_id, e.session_id == first.id)
            .limit(FIRST_PAGE)
            .subquery()
        )
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                found = (await conn.execute(select(func.max(func.length(cast(sample.c.event_data, Text)))))).scalar()
        return float(found) if found else None

    async def export_jsonl(
        self,
        flt: SessionFilter | None = None,
        *,
        progress: Progress = noop,
        batch_events: int = 5000,
        paged_events: int = PAGED_EVENTS,
    ) -> AsyncIterator[str]:
        """The export file in text pieces: app_state and user_state records, then one session per line.

        Sessions are read in batches of about `batch_events` events and about `batch_bytes()` of
        memory (shared with the batches read ahead), each in its own short transaction (see `_read_batch`); a
        session larger than a batch is a batch of its own, and one of more than `paged_events`
        events, or too heavy to read whole (`Batches`), is read a page at a time (`_paged_line`).
        """
        summaries = await self.listings.list_sessions(flt, oldest_first=True)
        apps = sorted({s.app_name for s in summaries})
        pairs = sorted({(s.app_name, s.user_id) for s in summaries})
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                app_states, user_states = await self.listings.states(conn, apps, pairs)
        for app in apps:
            if app in app_states:
                yield dumps({"kind": "app_state", "appName": app, "state": app_states[app]}) + "\n"
        for app, user in pairs:
            if (app, user) in user_states:
                state = user_states[(app, user)]
                yield dumps({"kind": "user_state", "appName": app, "userId": user, "state": state}) + "\n"
        # Batches read ahead: the database reads the next batch (PostgreSQL and MariaDB in
        # their own processes, sqlite in aiosqlite's thread) while this one is converted, so an
        # export takes about the longer of the two rather than their sum. Each read-ahead is a
        # short transaction of its own, ended before its rows are used: nothing is held while
        # the caller stalls. Two ahead on MySQL, one elsewhere (on sqlite, reads overlapping
        # each other would keep a writer waiting for the later one as well).
        import asyncio
        from collections import deque

        ahead = 2 if self.db.dialect == "mysql" else 1
        cutter = Batches(summaries, batch_events, paged_events, batch_bytes() // (MEMORY_FACTOR * (1 + ahead)))
        cutter.per_event = await self._probe(summaries)
        batches: list[tuple[list[SessionSummary], bool]] = []

        def batch_at(index: int) -> tuple[list[SessionSummary], bool] | None:
            while len(batches) <= index:
                cut = cutter.next()
                if cut is None:
                    return None
                batches.append(cut)
            return batches[index]

        pending: deque[asyncio.Task[tuple[dict[SessionKey, SessionSummary], list[Any]]]] = deque()
        try:
            index = 0
            while (cut := batch_at(index)) is not None:
                batch, paged = cut
                batches[index] = ([], False)  # read: not held past its turn
                if paged:  # never read ahead: pending holds only the batches before it, all used
                    size = 0
                    async for piece in self._paged_line(batch[0]):
                        size += len(piece)
                        yield piece
                    cutter.measured(batch, size)
                    progress(1)
                    index += 1
                    continue
                # the next read starts once this one is done: on sqlite, reads overlapping each
                # other would keep a writer waiting for the later one as well
                current = pending.popleft() if pending else asyncio.ensure_future(self._read_batch(batch))
                fresh, rows = await current
                while len(pending) < ahead and (following := batch_at(index + 1 + len(pending))) is not None:
                    if following[1]:
                        break
                    pending.append(asyncio.ensure_future(self._read_batch(following[0])))
                    await asyncio.sleep(0)  # let it send its first statement before the work below
                lines = await self._batch_lines(batch, fresh, rows)
                del rows, current  # the task holds the rows too
                cutter.measured(batch, sum(len(line) for line in lines))
                yield "".join(lines)
                progress(len(batch))
                index += 1
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


EXPORT_FRAME = Frame(lambda s: times_line(s) + session_head(s), "", ",", lambda s: session_tail(s) + "\n")


class Batches:
    """The listed sessions cut into read batches as the export goes: by events and sessions, and by
    the bytes their events are estimated to take (from the batches read so far), so a run of big
    events is read a few at a time. A session whose events would not fit one batch is read a page
    at a time, alone: past `paged_events` events, or past `budget` bytes by the estimate (the first
    listed session's first events, `Export._probe`, until batches were read)."""

    def __init__(self, summaries: Sequence[SessionSummary], batch_events: int, paged_events: int, budget: int) -> None:
        from collections import deque

        self.left = deque(summaries)
        self.batch_events = batch_events
        self.paged_events = paged_events
        self.budget = max(budget, 1)
        self.per_event: float | None = None  # bytes of exported text per event, the highest seen lately

    def _heavy(self, summary: SessionSummary) -> bool:
        n = summary.event_count
        return n > self.paged_events or (self.per_event is not None and n * self.per_event > self.budget)

    def next(self) -> tuple[list[SessionSummary], bool] | None:
        """The next batch and whether it is one session read a page at a time; None at the end."""
        if not self.left:
            return None
        if self._heavy(self.left[0]):
            return [self.left.popleft()], True
        cap = FIRST_PAGE if self.per_event is None else max(1, int(self.budget // self.per_event))
        cap = min(cap, self.batch_events)
        batch: list[SessionSummary] = []
        size = 0
        while self.left and not self._heavy(self.left[0]):
            if batch and (size >= cap or len(batch) >= BATCH):
                break
            summary = self.left.popleft()
            batch.append(summary)
            size += summary.event_count + 1
        return batch, False

    def measured(self, batch: Sequence[SessionSummary], size: int) -> None:
        """Learn the bytes per event from a batch's `size` of text, forgetting a heavier past by halves."""
        events = sum(s.event_count for s in batch) + len(batch)
        if not events or not size:
            return
        seen = max(size / events, 1.0)
        self.per_event = seen if self.per_event is None else max(seen, self.per_event / 2)
