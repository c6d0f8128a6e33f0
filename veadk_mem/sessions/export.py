"""Export framing: JSONL of state records and sessions, read in bounded batches."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.adkjson import printed_event
from veadk_mem.errors import VmemError
from veadk_mem.jsonio import compact_json_out as dumps
from veadk_mem.sessions.codec import event_from_row
from veadk_mem.sessions.read_queries import session_head, session_tail, times_line
from veadk_mem.sessions.records import BATCH, PAGED_EVENTS, Progress, SessionFilter, SessionKey, SessionSummary, noop

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.notes import Notes
    from veadk_mem.sessions.read_queries import Reads
    from veadk_mem.sessions.statements import Statements


class Export:
    """`export_jsonl`: one short read transaction per batch, nothing held while the caller writes."""

    def __init__(self, db: Database, sql: Statements, reads: Reads, notes: Notes) -> None:
        self.db = db
        self.sql = sql
        self.reads = reads
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
        try:
            async with engine.connect() as conn, conn.begin():
                if self.db.dialect == "sqlite":
                    await conn.exec_driver_sql("BEGIN")  # one snapshot for both reads (autocommit otherwise)
                fresh = {x.key: x for x in await self.sql.summaries(conn, None, keys, notes=self.notes)}
                params = self.db.key_params([(k.app_name, k.user_id, k.id) for k in keys])
                rows = await self.sql.batch_event_rows(conn, params, sum(s.event_count for s in batch))
        except VmemError:
            raise
        except Exception as exc:
            raise self.db.fail(exc) from None
        return fresh, rows

    async def _batch_lines(
        self, batch: Sequence[SessionSummary], fresh: dict[SessionKey, SessionSummary], rows: list[Any]
    ) -> list[str]:
        """The JSONL lines of a batch read by `_read_batch`; hands the event loop over every
        200 events, so the next batch's read goes on meanwhile."""
        import asyncio

        from veadk_mem.gc_pause import bulk_objects, collect_young

        tables, warnings = self.db.tables, self.notes.warnings
        events: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        broken: set[tuple[str, str, str]] = set()
        with bulk_objects():  # acyclic dicts by the thousand: 30 µs an event with the collector, 24 without
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
                if n % 200 == 0:  # the read ahead advances only when the loop runs: every 1,000
                    await asyncio.sleep(0)  # events left PostgreSQL's export waiting 2.4 s on it, 200: 0.7 s
        collect_young()
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
        """The export line of a session larger than a batch, read a page of events at a time (as
        `get --json` reads one) into a private temporary file, then handed out from it in pieces:
        memory holds a page whatever the session's size, and a session found damaged part-way, or
        deleted since it was listed, is left out whole (named in a warning), never half a line."""
        import tempfile

        from veadk_mem.errors import NotFound, StoreError
        from veadk_mem.jsonio import escape_terminal

        key = listed.key
        name = f"{key.app_name}/{key.user_id}/{key.id}"
        with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:  # unnamed: nothing is left if vmem dies
            try:
                pages = self.reads.session_pages(key.app_name, key.user_id, key.id)
                summary = await anext(pages)
                assert isinstance(summary, SessionSummary)
                spool.write(times_line(summary) + session_head(summary))
                sep = ""
                async for pieces in pages:
                    assert isinstance(pieces, list)
                    if pieces:
                        spool.write(escape_terminal(sep + ",".join(pieces)))
                        sep = ","
                spool.write(session_tail(summary) + "\n")
            except NotFound:
                return  # deleted since it was listed
            except StoreError as exc:
                if "is not readable" not in exc.message:
                    raise
                self.notes.damaged.append(name)
                self.notes.warnings.append(f"{exc.message}; session not exported")
                return
            spool.seek(0)
            while piece := spool.read(1 << 20):
                yield piece

    async def export_jsonl(
        self,
        flt: SessionFilter | None = None,
        *,
        progress: Progress = noop,
        batch_events: int = 5000,
        paged_events: int = PAGED_EVENTS,
    ) -> AsyncIterator[str]:
        """The export file in text pieces: app_state and user_state records, then one session per line.

        Sessions are read in batches of about `batch_events` events, each in its own short
        transaction (see `_read_batch`); a session larger than that is a batch of its own, and one of
        more than `paged_events` is read a page at a time (`_paged_line`).
        """
        summaries = await self.reads.list_sessions(flt, oldest_first=True)
        apps = sorted({s.app_name for s in summaries})
        pairs = sorted({(s.app_name, s.user_id) for s in summaries})
        try:
            async with self.db.reader.connect() as conn:
                app_states, user_states = await self.reads.states(conn, apps, pairs)
        except Exception as exc:
            raise self.db.fail(exc) from None
        for app in apps:
            if app in app_states:
                yield dumps({"kind": "app_state", "appName": app, "state": app_states[app]}) + "\n"
        for app, user in pairs:
            if (app, user) in user_states:
                state = user_states[(app, user)]
                yield dumps({"kind": "user_state", "appName": app, "userId": user, "state": state}) + "\n"
        batches: list[list[SessionSummary]] = [[]]
        size = 0
        for summary in summaries:
            alone = summary.event_count > paged_events  # read a page at a time, in a batch of its own
            if size >= batch_events or len(batches[-1]) >= BATCH or (alone and batches[-1]):
                batches.append([])
                size = 0
            batches[-1].append(summary)
            size += summary.event_count + 1
            if alone:
                batches.append([])
                size = 0
        # Batches read ahead: the database reads the next batch (PostgreSQL and MariaDB in
        # their own processes, sqlite in aiosqlite's thread) while this one is converted, so an
        # export takes about the longer of the two rather than their sum. Each read-ahead is a
        # short transaction of its own, ended before its rows are used: nothing is held while
        # the caller stalls. MySQL builds a batch's rows (`select_joined`) about as long as
        # the conversion takes, so one read ahead left the export waiting on it: two there.
        import asyncio
        from collections import deque

        batches = [b for b in batches if b]
        ahead = 2 if self.db.dialect == "mysql" else 1

        def paged(batch: list[SessionSummary]) -> bool:  # a session larger than a batch: read a page at a time
            return len(batch) == 1 and batch[0].event_count > paged_events

        pending: deque[asyncio.Task[tuple[dict[SessionKey, SessionSummary], list[Any]]]] = deque()
        try:
            for index, batch in enumerate(batches):
                if paged(batch):  # never read ahead: pending holds only the batches before it, all used
                    async for piece in self._paged_line(batch[0]):
                        yield piece
                    progress(1)
                    continue
                # the next read starts once this one is done: on sqlite, reads overlapping each
                # other would keep a writer waiting for the later one as well
                current = pending.popleft() if pending else asyncio.ensure_future(self._read_batch(batch))
                fresh, rows = await current
                while len(pending) < ahead and index + 1 + len(pending) < len(batches):
                    if paged(batches[index + 1 + len(pending)]):
                        break
                    pending.append(asyncio.ensure_future(self._read_batch(batches[index + 1 + len(pending)])))
                    await asyncio.sleep(0)  # let it send its first statement before the work below
                yield "".join(await self._batch_lines(batch, fresh, rows))
                progress(len(batch))
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
