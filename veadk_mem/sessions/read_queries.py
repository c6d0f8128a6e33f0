"""Read queries: lists, summaries, one session and its events, streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.adkjson import printed_event
from veadk_mem.errors import NotFound, StoreError, VmemError
from veadk_mem.gc_pause import bulk_objects
from veadk_mem.jsonio import compact_json as dumps
from veadk_mem.jsonio import compact_json_out as dumps_escaped
from veadk_mem.jsonio import escape_terminal
from veadk_mem.sessions.codec import event_from_row
from veadk_mem.sessions.layout import Layout
from veadk_mem.sessions.records import BATCH, SessionFilter, SessionKey, SessionSummary

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem import events as ev
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.notes import Notes
    from veadk_mem.sessions.statements import Statements


class Reads:
    """Sessions, summaries and events, read in short autocommit statements."""

    def __init__(self, db: Database, sql: Statements, notes: Notes) -> None:
        self.db = db
        self.sql = sql
        self.notes = notes  # what the reads met: handed back with their results (store.py)

    async def states(
        self, conn: AsyncConnection, apps: Iterable[str], pairs: Iterable[tuple[str, str]]
    ) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
        from sqlalchemy import select

        t = self.db.tables
        app_list = sorted(set(apps))
        pair_set = set(pairs)
        app_states: dict[str, dict[str, Any]] = {}
        user_states: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(0, len(app_list), BATCH):
            chunk = app_list[i : i + BATCH]
            rows = await conn.execute(
                select(t.app_states.c.app_name, t.app_states.c.state).where(t.app_states.c.app_name.in_(chunk))
            )
            for row in rows:
                app_states[row.app_name] = dict(row.state or {})
            users = sorted({u for a, u in pair_set if a in chunk})
            for j in range(0, len(users), BATCH):
                rows = await conn.execute(
                    select(t.user_states.c.app_name, t.user_states.c.user_id, t.user_states.c.state).where(
                        t.user_states.c.app_name.in_(chunk), t.user_states.c.user_id.in_(users[j : j + BATCH])
                    )
                )
                for row in rows:
                    if (row.app_name, row.user_id) in pair_set:
                        user_states[(row.app_name, row.user_id)] = dict(row.state or {})
        return app_states, user_states

    async def list_sessions(
        self,
        flt: SessionFilter | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        oldest_first: bool = False,
        compactions: bool = False,
    ) -> list[SessionSummary]:
        """Sessions matching `flt`, newest update first, without loading any event.

        With `compactions`, each summary also counts its ADK context compactions (a scan of
        the stored events' JSON, so only for the listing that shows them).
        """
        try:
            async with self.db.reader.connect() as conn:
                found = await self.sql.summaries(
                    conn, flt, limit=limit, offset=offset, oldest_first=oldest_first, notes=self.notes
                )
                if compactions:
                    await self.sql.count_compactions(conn, found)
                return found
        except Exception as exc:
            raise self.db.fail(exc) from None

    async def count_sessions(self, flt: SessionFilter | None = None) -> int:
        """How many sessions match."""
        from sqlalchemy import func, select

        try:
            async with self.db.reader.connect() as conn:
                stmt = select(func.count()).select_from(self.db.tables.sessions).where(*self.sql.session_where(flt))
                return int((await conn.execute(stmt)).scalar_one())
        except Exception as exc:
            raise self.db.fail(exc) from None

    async def get_summary(self, app: str, user: str, session_id: str) -> SessionSummary:
        """One session's summary; NotFound (exit 3) when it does not exist."""
        try:
            async with self.db.reader.connect() as conn:
                return await self._one_summary(conn, app, user, session_id)
        except VmemError:
            raise
        except Exception as exc:
            raise self.db.fail(exc) from None

    async def _one_summary(self, conn: AsyncConnection, app: str, user: str, session_id: str) -> SessionSummary:
        found = await self.sql.summaries(conn, None, None, one=(app, user, session_id), notes=self.notes)
        if not found and f"{app}/{user}/{session_id}" in self.notes.damaged:
            raise StoreError(self.notes.warnings[-1].removesuffix("; skipped"))
        if not found:
            raise NotFound(f"session {app}/{user}/{session_id}: not found in {self.db.display_url}")
        return found[0]

    async def find_sessions(self, keys: Sequence[SessionKey]) -> list[SessionSummary]:
        """Summaries of the named sessions; NotFound naming every one that does not exist."""
        found: list[SessionSummary] = []
        try:
            async with self.db.reader.connect() as conn:
                for i in range(0, len(keys), BATCH):
                    found += await self.sql.summaries(conn, None, keys[i : i + BATCH], notes=self.notes)
        except Exception as exc:
            raise self.db.fail(exc) from None
        wanted = set(keys)
        found = [s for s in found if s.key in wanted]  # MySQL's collation matches more than the exact key
        missing = [str(k) for k in keys if k not in {s.key for s in found}]
        if missing:
            raise NotFound(f"session not found: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        return found

    async def _stream_event_rows(self, conn: AsyncConnection, stmt: Any) -> AsyncIterator[Any]:
        result = await conn.stream(stmt)
        async for partition in result.partitions(BATCH):
            for row in partition:
                yield row

    def _one_session_events(self) -> list[Any]:
        """WHERE terms for one session's events, bound as k_app, k_user, k_id."""
        from sqlalchemy import bindparam

        e = self.db.tables.events.c
        return [
            e.app_name == bindparam("k_app"),
            e.user_id == bindparam("k_user"),
            e.session_id == bindparam("k_id"),
        ]

    async def _event_data(
        self, conn: AsyncConnection, app: str, user: str, session_id: str, last: int | None, expected: int = -1
    ) -> AsyncIterator[dict[str, Any]]:

        name = "events" if last is None else "events_last"
        stmt = self.db.stmts.get(name)
        if stmt is None:
            stmt = self.db.stmts[name] = self.sql.events_stmt(self._one_session_events(), None if last is None else -1)
        params: dict[str, Any] = {"k_app": app, "k_user": user, "k_id": session_id}
        if last is not None:
            params["k_last"] = last
        tables, warnings = self.db.tables, self.notes.warnings

        def decode(row: Any) -> dict[str, Any]:
            try:
                return event_from_row(tables, row, warnings)
            except (ValueError, TypeError, AttributeError) as exc:
                raise StoreError(
                    f"session {app}/{user}/{session_id}: event {row.id} is not readable "
                    f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]})"
                ) from None

        if 0 <= expected <= BATCH:  # small: one round trip beats a server-side cursor
            for row in await self.sql.fetch_all(conn, stmt, params, name):
                yield decode(row)
            return
        # Large: stream through a server-side cursor, which PostgreSQL only allows in a transaction.
        async with self.db.engine.connect() as streaming:
            result = await streaming.stream(stmt, params)
            async for partition in result.partitions(BATCH):
                for row in partition:
                    yield decode(row)

    async def iter_event_data(
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """A session's events as ADK stored them (snake_case data), oldest first, streamed."""
        try:
            async with self.db.engine.connect() as conn:
                async for data in self._event_data(conn, app, user, session_id, last):
                    yield data
        except VmemError:
            raise
        except Exception as exc:
            raise self.db.fail(exc) from None

    async def iter_events(
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> AsyncIterator[ev.Event]:
        """A session's events as `events.Event` models, oldest first, streamed."""
        from veadk_mem import events as ev

        async for data in self.iter_event_data(app, user, session_id, last=last):
            yield ev.Event.model_validate(data)

    async def get_session(self, app: str, user: str, session_id: str, *, last: int | None = None) -> ev.Session:
        """The whole session (merged state, events oldest first); NotFound (exit 3) when missing."""
        try:
            async with self.db.reader.connect() as conn:
                summary = await self._one_summary(conn, app, user, session_id)
                return await self._load_session(conn, summary, last)
        except VmemError:
            raise
        except Exception as exc:
            raise self.db.fail(exc) from None

    async def _load_session(self, conn: AsyncConnection, summary: SessionSummary, last: int | None) -> ev.Session:
        """A session model from its summary and its (last) events, read on `conn`."""
        from veadk_mem import events as ev

        rows = self._event_data(conn, summary.app_name, summary.user_id, summary.id, last, summary.event_count)
        validate = ev.Event.model_validate
        with bulk_objects():
            events = [validate(d) async for d in rows]
        return ev.Session(
            id=summary.id,
            app_name=summary.app_name,
            user_id=summary.user_id,
            state=summary.state,
            events=events,
            last_update_time=summary.update_time,
        )

    async def session_json(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> AsyncIterator[str]:
        """The ADK session JSON of one session in text pieces, one event a piece.

        Events are read `page` at a time, each page in its own short read, encoded before
        its pieces are handed out: a stalled reader (`get --json | less`) holds no lock
        that would keep the agent from appending, and memory stays bounded by the page.
        Each page continues after the last `(timestamp, id)` seen (keyset paging, served by
        ADK's events index), never by OFFSET, which re-reads and sorts every earlier event
        of the session for each page. The session row and the first page come from one
        snapshot; later pages continue in the same order up to the event count of that
        snapshot, so an event appended meanwhile is not half in the output.
        """
        pages = self.session_pages(app, user, session_id, last=last, page=page)
        summary = await anext(pages)
        assert isinstance(summary, SessionSummary)
        yield session_head(summary)
        sep = "\n"
        async for pieces in pages:
            assert isinstance(pieces, list)
            if pieces:  # a page a piece: one escape pass and one write for a thousand events
                yield escape_terminal(sep + ",\n".join(pieces))
                sep = ",\n"
        yield "\n" + session_tail(summary) + "\n"

    async def session_pages(
        self, app: str, user: str, session_id: str, *, last: int | None = None, page: int = 1000
    ) -> AsyncIterator[SessionSummary | list[str]]:
        """The session's summary, then its events' JSON (not yet escaped for a terminal) a page at a
        time, as `session_json` reads them: the one paged read of a session that may not fit in memory."""
        summary, pieces, cursor, end = await self._json_page(app, user, session_id, last, page, None)
        yield summary
        done = 0
        while True:
            yield pieces
            done += len(pieces)
            if done >= end:
                return
            if not pieces or cursor is None:
                raise StoreError(
                    f"session {app}/{user}/{session_id} changed while it was read (deleted, or events removed)",
                    hint="run the command again",
                )
            _, pieces, cursor, _ = await self._json_page(
                app, user, session_id, None, page, (cursor, min(page, end - done))
            )

    def _keyset_terms(self) -> tuple[Any, Any]:
        """(timestamp, tie-breaker) expressions events are ordered by, as `_events_stmt` selects them."""
        from sqlalchemy import Text, literal_column, type_coerce

        e = self.db.tables.events.c
        ts: Any = e.timestamp
        if self.db.dialect == "sqlite" and not self.db.tables.epoch_times:
            ts = type_coerce(e.timestamp, Text)  # compared as the stored text, as it is selected and ordered
        tie: Any = literal_column("events.rowid") if self.db.tables.layout is Layout.SQLITE else e.id
        return ts, tie

    def _page_stmt(self, after: bool, index: str | None = None) -> Any:
        """One page of a session's events: the first ones, or those after the bound (k_ts, k_tie);
        on MySQL through `index` when given (see `_mysql_events_index`)."""
        from sqlalchemy import Integer, and_, bindparam, or_

        name = ("events_after" if after else "events_first", index)
        stmt = self.db.stmts.get(name)
        if stmt is None:
            where = self._one_session_events()
            if after:
                ts, tie = self._keyset_terms()
                b_ts, b_tie = bindparam("k_ts", type_=ts.type), bindparam("k_tie", type_=tie.type)
                # `ts >= t` is the index range; the OR only sorts out the rows that tie on t
                where += [ts >= b_ts, or_(ts > b_ts, and_(ts == b_ts, tie > b_tie))]
            stmt = self.sql.packed(self.sql.events_stmt(where, None).limit(bindparam("k_limit", type_=Integer)))
            if index is not None:
                stmt = stmt.with_hint(self.db.tables.events, f"FORCE INDEX ({index})", "mysql")
            self.db.stmts[name] = stmt
        return stmt

    async def _mysql_events_index(self, conn: AsyncConnection) -> str | None:
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

    def _start_stmt(self) -> Any:
        """The (timestamp, tie) of the k_nth-newest event: where `--events N` starts (an index-only read)."""
        from sqlalchemy import Integer, bindparam, select

        stmt = self.db.stmts.get("events_start")
        if stmt is None:
            ts, tie = self._keyset_terms()
            stmt = self.db.stmts["events_start"] = (
                select(ts.label("ts"), tie.label("tie"))
                .select_from(self.db.tables.events)
                .where(*self._one_session_events())
                .order_by(self.db.tables.events.c.timestamp.desc(), tie.desc())
                .limit(1)
                .offset(bindparam("k_nth", type_=Integer))
            )
        return stmt

    async def _json_page(
        self,
        app: str,
        user: str,
        session_id: str,
        last: int | None,
        page: int,
        after: tuple[tuple[Any, Any], int] | None,
    ) -> tuple[SessionSummary, list[str], tuple[Any, Any] | None, int]:
        """(summary, encoded events, cursor after them, event count) of one page, in ONE short transaction.

        Without `after`: the session row and the first page of its (last `last`) events,
        from one snapshot. With `after` ((timestamp, tie), count): the next `count` events.
        """
        tables, warnings = self.db.tables, self.notes.warnings
        engine = self.db.engine
        if after is None and self.db.dialect == "postgresql":
            engine = engine.execution_options(isolation_level="REPEATABLE READ")
        summary: Any = None
        params: dict[str, Any] = {"k_app": app, "k_user": user, "k_id": session_id}
        try:
            async with engine.connect() as conn, conn.begin():
                if after is None:
                    if self.db.dialect == "sqlite":
                        await conn.exec_driver_sql("BEGIN")  # one snapshot for both reads (autocommit otherwise)
                    elif self.db.dialect == "postgresql":
                        # asyncpg's adapter opens the transaction at its first statement; the
                        # summary may run straight on the driver, so open it (and the snapshot) here
                        await conn.exec_driver_sql("SELECT 1")
                    summary = await self._one_summary(conn, app, user, session_id)
                    end = summary.event_count if last is None else min(last, summary.event_count)
                    count = min(page, end)
                    stmt = self._page_stmt(False)
                    if last is not None and end < summary.event_count and count > 0:
                        start = (await conn.execute(self._start_stmt(), {**params, "k_nth": end - 1})).first()
                        if start is None:
                            end = count = 0
                        else:  # the first page begins at that event, itself included
                            stmt = self._page_from_stmt()
                            params |= {"k_ts": start.ts, "k_tie": start.tie}
                else:
                    (cursor_ts, cursor_tie), count = after
                    end = count
                    stmt = self._page_stmt(True, await self._mysql_events_index(conn))
                    params |= {"k_ts": cursor_ts, "k_tie": cursor_tie}
                rows = []
                if count > 0:
                    rows = self.sql.event_rows((await conn.execute(stmt, {**params, "k_limit": count})).all())
        except VmemError:
            raise
        except Exception as exc:
            raise self.db.fail(exc) from None
        pieces = []
        for row in rows:
            try:
                pieces.append(dumps(printed_event(event_from_row(tables, row, warnings))))  # escaped by the page
            except (ValueError, TypeError, AttributeError) as exc:
                raise StoreError(
                    f"session {app}/{user}/{session_id}: event {row.id} is not readable "
                    f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]})"
                ) from None
        cursor = None
        if rows:
            tail = rows[-1]
            cursor = (self.sql.cursor_time(tail.timestamp), tail._tie if tables.layout is Layout.SQLITE else tail.id)
        return summary, pieces, cursor, end

    def _page_from_stmt(self) -> Any:
        """As `_page_stmt(True)`, but including the bound event itself (the first page of `--events N`)."""
        from sqlalchemy import Integer, and_, bindparam, or_

        stmt = self.db.stmts.get("events_from")
        if stmt is None:
            ts, tie = self._keyset_terms()
            b_ts, b_tie = bindparam("k_ts", type_=ts.type), bindparam("k_tie", type_=tie.type)
            where = [*self._one_session_events(), ts >= b_ts, or_(ts > b_ts, and_(ts == b_ts, tie >= b_tie))]
            stmt = self.db.stmts["events_from"] = self.sql.packed(
                self.sql.events_stmt(where, None).limit(bindparam("k_limit", type_=Integer))
            )
        return stmt

    async def iter_sessions(self, flt: SessionFilter | None = None) -> AsyncIterator[ev.Session]:
        """Every matching session with its events, oldest update first, one at a time.

        Each session is read by its own short query, so a slow consumer (embedding, an LTM
        backend) never holds a read lock that would keep the agent from writing.
        """
        for summary in await self.list_sessions(flt, oldest_first=True):
            try:
                async with self.db.reader.connect() as conn:
                    session = await self._load_session(conn, summary, None)
            except VmemError:
                raise
            except Exception as exc:
                raise self.db.fail(exc) from None
            yield session


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
