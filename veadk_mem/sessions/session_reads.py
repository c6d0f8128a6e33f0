"""Whole sessions read: a session with its events (models, or ADK's stored data), streamed or spooled to disk."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from veadk_mem.errors import NotFound, StoreError
from veadk_mem.sessions.codec import event_from_row
from veadk_mem.sessions.pages import EventPages, PagedReads
from veadk_mem.sessions.read_queries import Listings
from veadk_mem.sessions.records import BATCH, PAGED_EVENTS, SessionFilter, SessionSummary
from veadk_mem.sessions.spooled import SpooledEvents

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem import events as ev
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.notes import Notes


def _as_is(data: dict[str, Any]) -> dict[str, Any]:
    return data


def _session(make: Callable[..., ev.Session], summary: SessionSummary, events: Sequence[Any]) -> ev.Session:
    """A session model (made by `make`: validated, or constructed around spooled events) from its summary."""
    return make(
        id=summary.id,
        app_name=summary.app_name,
        user_id=summary.user_id,
        state=summary.state,
        events=cast("list[ev.Event]", events),  # read by passes and len(), as every memory path does
        last_update_time=summary.update_time,
    )


class SessionReads:
    """Sessions with their events: one (`get_session`), every one a filter matches (`iter_sessions`),
    or a session's events alone, streamed."""

    def __init__(self, db: Database, notes: Notes) -> None:
        self.db = db
        self.notes = notes  # what the reads met: handed back with their results (store.py)
        self.listings = Listings(db, notes)
        self.pages = PagedReads(db, notes)
        self.event_pages = EventPages(db, notes)

    async def _event_data(
        self, conn: AsyncConnection, app: str, user: str, session_id: str, last: int | None, expected: int = -1
    ) -> AsyncIterator[dict[str, Any]]:
        """The session's events' stored data (its last `last`), oldest first, read on `conn`; `expected`
        events, when known, read in one round trip when they are few, else through a server-side cursor."""
        name = "events" if last is None else "events_last"
        stmt = self.db.stmts.get(name)
        if stmt is None:
            where = self.event_pages.one_session_events()
            stmt = self.db.stmts[name] = self.event_pages.sql.events_stmt(where, None if last is None else -1)
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
            for row in (await conn.execute(stmt, params)).all():
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
        with self.db.failures():
            async with self.db.engine.connect() as conn:
                async for data in self._event_data(conn, app, user, session_id, last):
                    yield data

    async def iter_events(
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> AsyncIterator[ev.Event]:
        """A session's events as `events.Event` models, oldest first, streamed."""
        from veadk_mem import events as ev

        async for data in self.iter_event_data(app, user, session_id, last=last):
            yield ev.Event.model_validate(data)

    async def get_session(self, app: str, user: str, session_id: str, *, last: int | None = None) -> ev.Session:
        """The whole session (merged state, events oldest first); NotFound (exit 3) when missing.

        A session of more than PAGED_EVENTS events (and no `last`) comes with its events on disk
        (`spooled_session`), so its size never sits in memory."""
        with self.db.failures():
            async with self.db.reader.connect() as conn:
                summary = await self.listings.one_summary(conn, app, user, session_id)
                if last is None and summary.event_count > PAGED_EVENTS:
                    big = True
                else:
                    return await self._load_session(conn, summary, last)
        assert big
        return await self.spooled_session(app, user, session_id)

    async def spooled_session(self, app: str, user: str, session_id: str) -> ev.Session:
        """The session with its events in a private temporary file (`spooled.SpooledEvents`, read back an
        event at a time), read a page at a time as one version of it (`read_pages`)."""
        from veadk_mem import events as ev

        events = SpooledEvents()
        summary = await self.pages.read_pages(
            app, user, session_id, lambda _: events.reset(), events.add, convert=_as_is
        )
        events.done()
        return _session(ev.Session.model_construct, summary, events)

    async def _load_session(self, conn: AsyncConnection, summary: SessionSummary, last: int | None) -> ev.Session:
        """A session model from its summary and its (last) events, read on `conn`."""
        from veadk_mem import events as ev

        rows = self._event_data(conn, summary.app_name, summary.user_id, summary.id, last, summary.event_count)
        validate = ev.Event.model_validate
        return _session(ev.Session, summary, [validate(d) async for d in rows])

    async def iter_sessions(self, flt: SessionFilter | None = None) -> AsyncIterator[ev.Session]:
        """Every matching session with its events, oldest update first, one at a time.

        Each session is read by its own short query, so a slow consumer (embedding, an LTM
        backend) never holds a read lock that would keep the agent from writing; one of more than
        PAGED_EVENTS events comes with its events on disk (`spooled_session`).
        """
        for summary in await self.listings.list_sessions(flt, oldest_first=True):
            if summary.event_count > PAGED_EVENTS:
                try:
                    big = await self.spooled_session(summary.app_name, summary.user_id, summary.id)
                except NotFound:
                    continue  # deleted since it was listed
                yield big
                continue
            with self.db.failures():
                async with self.db.reader.connect() as conn:
                    session = await self._load_session(conn, summary, None)
            yield session
