"""A session's events a page at a time: keyset pages read in one snapshot (short reads on sqlite),
handed out as pages or framed as the session's JSON text (`get --json`, `--jsonl`, export's long lines)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veadk_mem.adkjson import printed_event
from veadk_mem.errors import NotFound, StoreError
from veadk_mem.jsonio import compact_json as dumps
from veadk_mem.jsonio import compact_json_out as dumps_escaped
from veadk_mem.jsonio import dumps as jsonl_text
from veadk_mem.jsonio import escape_terminal
from veadk_mem.sessions.codec import event_from_row
from veadk_mem.sessions.layout import Layout
from veadk_mem.sessions.read_queries import FIRST_PAGE, MEMORY_FACTOR, READ_ATTEMPTS, Listings, SessionChanged
from veadk_mem.sessions.records import SessionSummary, batch_bytes
from veadk_mem.sessions.statements import Statements

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.notes import Notes


@dataclass(frozen=True)
class Frame:
    """The text around a session's events: `head` before them, `first` before the first event,
    `between` two events, `tail` after them."""

    head: Callable[[SessionSummary], str]
    first: str
    between: str
    tail: Callable[[SessionSummary], str]


def _span(summary: SessionSummary, last: int | None) -> int:
    """How many events a read of `summary`'s session gives (the last `last`, or all)."""
    return summary.event_count if last is None else min(last, summary.event_count)


def _printed_line(data: dict[str, Any]) -> str:
    """An event's line in `get --jsonl`: its printed JSON with json's separators (`, `), as every
    `--jsonl` record vmem prints is written."""
    return jsonl_text(printed_event(data)) + "\n"


@contextlib.asynccontextmanager
async def _same(conn: AsyncConnection) -> AsyncIterator[AsyncConnection]:
    yield conn


def session_head(summary: SessionSummary) -> str:
    fields = {"id": summary.id, "appName": summary.app_name, "userId": summary.user_id, "state": summary.state}
    head = dumps_escaped(fields)
    return head[:-1] + ',"events":['


def session_tail(summary: SessionSummary) -> str:
    return '],"lastUpdateTime":' + dumps_escaped(summary.update_time) + "}"


def times_line(summary: SessionSummary) -> str:
    """The export's line before a session's: its create time, which a restore gives back."""
    from veadk_mem.events import TIMES_KIND

    fields = {"kind": TIMES_KIND, "appName": summary.app_name, "userId": summary.user_id, "sessionId": summary.id}
    return dumps_escaped({**fields, "createTime": summary.create_time}) + "\n"


JSONL_FRAME = Frame(lambda s: "", "", "", lambda s: "")  # `get --jsonl`: each event's text ends its line
JSON_FRAME = Frame(session_head, "\n", ",\n", lambda s: "\n" + session_tail(s) + "\n")  # `get --json`


class EventPages:
    """The statements of one session's event pages (keyset on ADK's events index), and a page's rows
    decoded: what `PagedReads` and `changes.Changes` read a session's events by."""

    def __init__(self, db: Database, notes: Notes) -> None:
        self.db = db
        self.sql = Statements(db)
        self.notes = notes

    def one_session_events(self) -> list[Any]:
        """WHERE terms for one session's events, bound as k_app, k_user, k_id."""
        from sqlalchemy import bindparam

        e = self.db.tables.events.c
        return [
            e.app_name == bindparam("k_app"),
            e.user_id == bindparam("k_user"),
            e.session_id == bindparam("k_id"),
        ]

    async def page_rows(self, conn: AsyncConnection, stmt: Any, params: dict[str, Any], count: int) -> list[Any]:
        if count <= 0:
            return []
        return list((await conn.execute(stmt, {**params, "k_limit": count})).all())

    def decoded_page(
        self,
        app: str,
        user: str,
        session_id: str,
        rows: list[Any],
        convert: Callable[[dict[str, Any]], Any] | None,
    ) -> tuple[list[Any], int, tuple[Any, Any] | None]:
        """(events encoded or converted, their stored bytes about, keyset cursor after them) of a page."""
        tables, warnings = self.db.tables, self.notes.warnings
        items: list[Any] = []
        weight = 0
        for row in rows:
            try:
                data = event_from_row(tables, row, warnings)
                item = dumps(printed_event(data)) if convert is None else convert(data)
            except (ValueError, TypeError, AttributeError) as exc:
                raise StoreError(
                    f"session {app}/{user}/{session_id}: event {row.id} is not readable "
                    f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]})"
                ) from None
            items.append(item)
            raw = getattr(row, "event_data", None)
            weight += len(raw) if isinstance(raw, (str, bytes)) else len(item) if isinstance(item, str) else 512
        cursor = None
        if rows:
            tail = rows[-1]
            cursor = (self.sql.cursor_time(tail.timestamp), tail._tie if tables.layout is Layout.SQLITE else tail.id)
        return items, weight, cursor

    def keyset_terms(self) -> tuple[Any, Any]:
        """(timestamp, tie-breaker) expressions events are ordered by, as `_events_stmt` selects them."""
        from sqlalchemy import Text, literal_column, type_coerce

        e = self.db.tables.events.c
        ts: Any = e.timestamp
        if self.db.dialect == "sqlite" and not self.db.tables.epoch_times:
            ts = type_coerce(e.timestamp, Text)  # compared as the stored text, as it is selected and ordered
        tie: Any = literal_column("events.rowid") if self.db.tables.layout is Layout.SQLITE else e.id
        return ts, tie

    def page_stmt(self, after: bool, index: str | None = None) -> Any:
        """One page of a session's events: the first ones, or those after the bound (k_ts, k_tie);
        on MySQL through `index` when given (see `_mysql_events_index`)."""
        from sqlalchemy import Integer, and_, bindparam, or_

        name = ("events_after" if after else "events_first", index)
        stmt = self.db.stmts.get(name)
        if stmt is None:
            where = self.one_session_events()
            if after:
                ts, tie = self.keyset_terms()
                b_ts, b_tie = bindparam("k_ts", type_=ts.type), bindparam("k_tie", type_=tie.type)
                # `ts >= t` is the index range; the OR only sorts out the rows that tie on t
                where += [ts >= b_ts, or_(ts > b_ts, and_(ts == b_ts, tie > b_tie))]
            stmt = self.sql.events_stmt(where, None).limit(bindparam("k_limit", type_=Integer))
            if index is not None:
                stmt = stmt.with_hint(self.db.tables.events, f"FORCE INDEX ({index})", "mysql")
            self.db.stmts[name] = stmt
        return stmt

    async def mysql_events_index(self, conn: AsyncConnection) -> str | None:
        """ADK's (app, user, session, timestamp, id) index on events, when this MySQL database has it.

        MariaDB reads a keyset page by the index's first three columns only (`ref`), from the
        session's first event: each page of a 200,000-event session re-read the events before
        it (`get --json` at 14,000 events/s). Named, the index serves the page as a range on
        the timestamp too. Looked up once a store; None elsewhere and on tables without it.
        """
        if self.db.dialect != "mysql":
            return None
        if "mysql_events_index" not in self.db.stmts:
            from sqlalchemy import text

            from veadk_mem.sessions.layout import EVENTS_INDEX

            found = await conn.execute(
                text(
                    "SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = :t AND INDEX_NAME = :i LIMIT 1"
                ),
                {"t": self.db.tables.events.name, "i": EVENTS_INDEX},
            )
            self.db.stmts["mysql_events_index"] = EVENTS_INDEX if found.first() is not None else None
        index: str | None = self.db.stmts["mysql_events_index"]
        return index

    def start_stmt(self) -> Any:
        """The (timestamp, tie) of the k_nth-newest event: where `--events N` starts (an index-only read)."""
        from sqlalchemy import Integer, bindparam, select

        stmt = self.db.stmts.get("events_start")
        if stmt is None:
            ts, tie = self.keyset_terms()
            stmt = self.db.stmts["events_start"] = (
                select(ts.label("ts"), tie.label("tie"))
                .select_from(self.db.tables.events)
                .where(*self.one_session_events())
                .order_by(self.db.tables.events.c.timestamp.desc(), tie.desc())
                .limit(1)
                .offset(bindparam("k_nth", type_=Integer))
            )
        return stmt

    def page_from_stmt(self) -> Any:
        """As `_page_stmt(True)`, but including the bound event itself (the first page of `--events N`)."""
        from sqlalchemy import Integer, and_, bindparam, or_

        stmt = self.db.stmts.get("events_from")
        if stmt is None:
            ts, tie = self.keyset_terms()
            b_ts, b_tie = bindparam("k_ts", type_=ts.type), bindparam("k_tie", type_=tie.type)
            where = [*self.one_session_events(), ts >= b_ts, or_(ts > b_ts, and_(ts == b_ts, tie >= b_tie))]
            stmt = self.db.stmts["events_from"] = self.sql.events_stmt(where, None).limit(
                bindparam("k_limit", type_=Integer)
            )
        return stmt


class PagedReads:
    """One session as pages of events, or as its framed JSON text, in one snapshot (short reads on sqlite)."""

    def __init__(self, db: Database, notes: Notes) -> None:
        self.db = db
        self.notes = notes
        self.listings = Listings(db, notes)
        self.events = EventPages(db, notes)

    async def session_json(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> AsyncIterator[str]:
        """The ADK session JSON of one session in text pieces, a page of events a piece.

        Events are read a page at a time (`session_pages`) and encoded before they are handed
        out, so memory holds a page whatever the session's size. On PostgreSQL and MySQL every
        page comes from one read-only snapshot (writers never wait on it); on sqlite, whose
        rollback journal keeps a writer from committing while a read runs, a session of more
        than one page is read in short transactions into a private temporary file and printed
        from it once whole, read again when an agent changed it meanwhile (`session_text`).
        """
        async for piece in self.session_text(app, user, session_id, JSON_FRAME, last=last, page=page):
            yield piece

    async def session_jsonl(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> AsyncIterator[str]:
        """`get --jsonl`: each event's printed JSON on a line of its own, read as `session_json` reads
        (one snapshot; on sqlite, one version of a session an agent writes to meanwhile)."""
        async for piece in self.session_text(
            app, user, session_id, JSONL_FRAME, last=last, page=page, encode=_printed_line
        ):
            yield piece

    async def session_text(
        self,
        app: str,
        user: str,
        session_id: str,
        frame: Frame,
        *,
        last: int | None = None,
        page: int = 1000,
        spool: bool = False,
        encode: Callable[[dict[str, Any]], str] | None = None,
    ) -> AsyncIterator[str]:
        """One session as text framed by `frame`, its events encoded as `get --json` prints them
        (or by `encode`, from their stored data).

        Handed out as it is read when the read is one snapshot (PostgreSQL, MySQL, or a session
        of one page); else, or with `spool`, written to an unnamed temporary file first (nothing
        is left if vmem dies) and handed out from it once whole: a session found damaged or
        deleted part-way gives no text at all, never half of it.
        """
        import tempfile

        pages = self.session_pages(app, user, session_id, last=last, page=page, convert=encode)
        summary = await anext(pages)
        assert isinstance(summary, SessionSummary)
        if not spool and (self.db.dialect != "sqlite" or _span(summary, last) <= min(page, FIRST_PAGE)):
            async with aclosing(pages):
                yield frame.head(summary)
                sep = frame.first
                async for pieces in pages:
                    assert isinstance(pieces, list)
                    if pieces:  # a page a piece: one escape pass and one write for a thousand events
                        yield escape_terminal(sep + frame.between.join(pieces))
                        sep = frame.between
                yield frame.tail(summary)
            return
        with tempfile.TemporaryFile("w+", encoding="utf-8") as out:

            def begin(found: SessionSummary) -> None:
                out.seek(0)
                out.truncate()
                out.write(frame.head(found))
                state[0] = frame.first

            def add(pieces: list[Any]) -> None:
                if pieces:
                    out.write(escape_terminal(state[0] + frame.between.join(pieces)))
                    state[0] = frame.between

            state = [frame.first]
            opened = (summary, pages)
            summary = await self.read_pages(
                app, user, session_id, begin, add, last=last, page=page, convert=encode, opened=opened
            )
            out.write(frame.tail(summary))
            out.seek(0)
            while piece := out.read(1 << 20):
                yield piece

    async def read_pages(
        self,
        app: str,
        user: str,
        session_id: str,
        begin: Callable[[SessionSummary], None],
        add: Callable[[list[Any]], None],
        *,
        last: int | None = None,
        page: int = 1000,
        convert: Callable[[dict[str, Any]], Any] | None = None,
        opened: tuple[SessionSummary, AsyncGenerator[SessionSummary | list[Any]]] | None = None,
    ) -> SessionSummary:
        """Every page of the session handed to `add`, after `begin` got its summary; the summary.

        On sqlite a page that finds the session changed since the first (an agent appended)
        starts it over: `begin` again, then every page again, up to READ_ATTEMPTS reads; one
        version, never two, reaches `add` in the end. `opened`: the summary and pages of a read begun.
        """
        for attempt in range(1, READ_ATTEMPTS + 1):
            if opened is None:
                pages = self.session_pages(app, user, session_id, last=last, page=page, convert=convert)
                first: SessionSummary | list[Any] | None = None
            else:
                first, pages = opened
                opened = None
            try:
                async with aclosing(pages):
                    summary = first or await anext(pages)
                    assert isinstance(summary, SessionSummary)
                    begin(summary)
                    async for items in pages:
                        assert isinstance(items, list)
                        add(items)
                return summary
            except SessionChanged:
                if attempt == READ_ATTEMPTS:
                    raise StoreError(
                        f"session {app}/{user}/{session_id} changed {READ_ATTEMPTS} times while it was read "
                        "(an agent is writing to it)",
                        hint="run the command again when the agent is idle",
                    ) from None
        raise AssertionError("unreachable")

    async def session_pages(
        self,
        app: str,
        user: str,
        session_id: str,
        *,
        last: int | None = None,
        page: int = 1000,
        convert: Callable[[dict[str, Any]], Any] | None = None,
    ) -> AsyncGenerator[SessionSummary | list[Any]]:
        """The session's summary, then its events a page at a time: their JSON as `get --json` prints
        it (not yet escaped for a terminal), or `convert` of their stored data.

        Each page continues after the last `(timestamp, id)` read (keyset paging on ADK's events
        index, never OFFSET) up to the first page's event count, and holds at most `page` events
        and about `batch_bytes()` of memory (pages after a heavy one hold fewer events). On PostgreSQL and
        MySQL all pages are read in ONE read-only snapshot (REPEATABLE READ; MySQL's consistent
        snapshot), which no writer waits on. On sqlite each page is its own short transaction,
        which also reads the session's update time: changed since the first page, SessionChanged
        (the caller reads it again, `read_pages`); gone, NotFound.
        """
        if self.db.dialect == "sqlite":
            async for item in self._short_pages(app, user, session_id, last, page, convert):
                yield item
            return
        with self.db.failures():
            async with self._snapshot() as conn:
                async for item in self._pages_on(lambda: _same(conn), app, user, session_id, last, page, convert):
                    yield item

    async def _short_pages(
        self,
        app: str,
        user: str,
        session_id: str,
        last: int | None,
        page: int,
        convert: Callable[[dict[str, Any]], Any] | None,
    ) -> AsyncIterator[SessionSummary | list[Any]]:
        """sqlite's `session_pages`: each page a short read transaction (see `_short_read`)."""
        stamp: list[Any] = []

        @contextlib.asynccontextmanager
        async def each() -> AsyncIterator[AsyncConnection]:
            with self.db.failures(keep=(SessionChanged,)):
                async with self.db.engine.connect() as conn, conn.begin():
                    await conn.exec_driver_sql("BEGIN")  # one snapshot for the page and the check
                    now = await self._update_stamp(conn, app, user, session_id)
                    if not stamp:
                        stamp.append(now)
                    elif now is None:
                        raise NotFound(f"session {app}/{user}/{session_id}: deleted while it was read")
                    elif now != stamp[0]:
                        raise SessionChanged(f"{app}/{user}/{session_id}")
                    yield conn

        async for item in self._pages_on(each, app, user, session_id, last, page, convert):
            yield item

    async def _update_stamp(self, conn: AsyncConnection, app: str, user: str, session_id: str) -> Any:
        """The session row's update time as stored (None: no such row), which every change of it moves."""
        from sqlalchemy import select

        s = self.db.tables.sessions.c
        stmt = select(s.update_time).where(s.app_name == app, s.user_id == user, s.id == session_id)
        return (await conn.execute(stmt)).scalar()

    @contextlib.asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[AsyncConnection]:
        """A connection in one read-only snapshot: PostgreSQL's REPEATABLE READ READ ONLY, MySQL's
        START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY. Plain reads in it take no row lock."""
        if self.db.dialect == "postgresql":
            engine = self.db.engine.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            async with engine.connect() as conn, conn.begin():
                # asyncpg's adapter opens the transaction at its first statement: open it (and its
                # snapshot) here, before any read
                await conn.exec_driver_sql("SELECT 1")
                yield conn
            return
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")  # the transaction is ours
            await conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                yield conn
            finally:
                with contextlib.suppress(Exception):
                    await conn.exec_driver_sql("COMMIT")

    async def _pages_on(
        self,
        read: Callable[[], contextlib.AbstractAsyncContextManager[AsyncConnection]],
        app: str,
        user: str,
        session_id: str,
        last: int | None,
        page: int,
        convert: Callable[[dict[str, Any]], Any] | None,
    ) -> AsyncIterator[SessionSummary | list[Any]]:
        """The pages of `session_pages`, each read on the connection `read()` gives."""
        budget = batch_bytes() // MEMORY_FACTOR
        params: dict[str, Any] = {"k_app": app, "k_user": user, "k_id": session_id}
        limit = min(page, FIRST_PAGE)
        async with read() as conn:
            summary = await self.listings.one_summary(conn, app, user, session_id)
            end = _span(summary, last)
            count = min(limit, end)
            stmt = self.events.page_stmt(False)
            if last is not None and end < summary.event_count and count > 0:
                start = (await conn.execute(self.events.start_stmt(), {**params, "k_nth": end - 1})).first()
                if start is None:
                    end = count = 0
                else:  # the first page begins at that event, itself included
                    stmt = self.events.page_from_stmt()
                    params |= {"k_ts": start.ts, "k_tie": start.tie}
            rows = await self.events.page_rows(conn, stmt, params, count)
        yield summary
        done = 0
        while True:
            items, weight, cursor = self.events.decoded_page(app, user, session_id, rows, convert)
            rows = []
            yield items
            done += len(items)
            if done >= end:
                return
            if not items or cursor is None:
                raise StoreError(
                    f"session {app}/{user}/{session_id} changed while it was read (deleted, or events removed)",
                    hint="run the command again",
                )
            per_event = max(weight // len(items), 1)
            limit = max(1, min(page, limit * 2, budget // per_event))
            async with read() as conn:
                stmt = self.events.page_stmt(True, await self.events.mysql_events_index(conn))
                after = {**params, "k_ts": cursor[0], "k_tie": cursor[1]}
                rows = await self.events.page_rows(conn, stmt, after, min(limit, end - done))
