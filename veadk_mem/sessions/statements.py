"""Statement building and caching: one prepared statement per query shape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.sessions.layout import (
    Layout,
    stored_time,
    to_epoch,
)
from veadk_mem.sessions.notes import Notes
from veadk_mem.sessions.records import SessionFilter, SessionKey, SessionSummary
from veadk_mem.sessions.state_scopes import decode_json, merge_state

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.engine import Database


class Statements:
    """The SQL of the read queries on `db`, built once per shape and cached in `db.stmts`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def session_where(self, flt: SessionFilter | None) -> list[Any]:

        s = self.db.tables.sessions.c
        conds: list[Any] = []
        if flt is not None:
            flt = flt.resolved()
            if flt.app is not None:
                conds.append(self.db.key_eq(s.app_name, flt.app))
            if flt.user is not None:
                conds.append(self.db.key_eq(s.user_id, flt.user))
            if flt.since is not None:
                conds.append(s.update_time >= stored_time(self.db.tables, flt.since))
            if flt.until is not None:
                conds.append(s.update_time < stored_time(self.db.tables, flt.until))
        return conds

    async def summaries(
        self,
        conn: AsyncConnection,
        flt: SessionFilter | None,
        keys: Sequence[SessionKey] | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        oldest_first: bool = False,
        one: tuple[str, str, str] | None = None,
        notes: Notes | None = None,
    ) -> list[SessionSummary]:
        """Summaries with merged state and event counts, from ONE query (no event is loaded): of
        the session `one`, of the sessions `keys`, or of those `flt` matches (a page of them).
        A session whose stored state cannot be read is skipped, and noted in `notes`.

        Each query shape is one statement, built once and cached, its values bound at execution.
        """
        notes = Notes() if notes is None else notes
        if one is not None:  # the hot path of get
            params = {"k_app": one[0], "k_user": one[1], "k_id": one[2]}
            return await self._cached_summaries(conn, "one", self._one_summary, params, notes)
        if keys is not None:  # the same statement for any key set (`key_match`)
            if flt is not None or limit or offset:
                raise ValueError("summaries: keys with a filter or a page")
            params = self.db.key_params([(k.app_name, k.user_id, k.id) for k in keys])
            return await self._cached_summaries(
                conn, ("keys", oldest_first), lambda: self._keys_summaries(oldest_first), params, notes
            )
        params = self._filter_params(flt, limit, offset)
        shape = ("filter", *sorted(params), oldest_first)
        return await self._cached_summaries(
            conn, shape, lambda: self._filter_summaries(params, oldest_first), params, notes
        )

    async def _cached_summaries(
        self, conn: AsyncConnection, shape: Any, build: Callable[[], Any], params: dict[str, Any], notes: Notes
    ) -> list[SessionSummary]:
        """The summaries of the statement cached as `shape` (built by `build` the first time)."""
        stmt = self.db.stmts.get(shape)
        if stmt is None:
            stmt = self.db.stmts[shape] = build()
        return await self.rows_to_summaries(conn, stmt, params, shape, notes)

    def _summary_select(self, sessions: Any = None) -> Any:
        """SELECT of a summary's columns from `sessions` (the sessions table, or a join of it)
        joined to the app and user state rows: the one column list and join every shape shares."""
        from sqlalchemy import and_, func, select

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        a, u = t.app_states.c, t.user_states.c
        count = (
            select(func.count())
            .where(e.app_name == s.app_name, e.user_id == s.user_id, e.session_id == s.id)
            .scalar_subquery()
            .label("event_count")
        )
        columns = (
            s.app_name,
            s.user_id,
            s.id,
            self.raw_json(s.state, "state"),
            self.session_time(s.create_time, "create_time"),
            self.session_time(s.update_time, "update_time"),
            count,
            self.raw_json(a.state, "app_state"),
            self.raw_json(u.state, "user_state"),
        )
        joined = (t.sessions if sessions is None else sessions).outerjoin(t.app_states, a.app_name == s.app_name)
        joined = joined.outerjoin(t.user_states, and_(u.app_name == s.app_name, u.user_id == s.user_id))
        return select(*columns).select_from(joined)

    def _summary_order(self, oldest_first: bool) -> tuple[Any, ...]:
        s = self.db.tables.sessions.c
        return (s.update_time.asc() if oldest_first else s.update_time.desc(), s.app_name, s.user_id, s.id)

    def _one_summary(self) -> Any:
        """The summary of the session bound as k_app, k_user, k_id."""
        from sqlalchemy import bindparam

        s = self.db.tables.sessions.c
        return self._summary_select().where(
            self.db.key_eq(s.app_name, bindparam("k_app")),
            self.db.key_eq(s.user_id, bindparam("k_user")),
            self.db.key_eq(s.id, bindparam("k_id")),
        )

    def _keys_summaries(self, oldest_first: bool) -> Any:
        """The summaries of the sessions bound by `key_params`."""
        s = self.db.tables.sessions.c
        where = self.db.key_match((s.app_name, s.user_id, s.id))
        return self._summary_select().where(where).order_by(*self._summary_order(oldest_first))

    def _filter_params(self, flt: SessionFilter | None, limit: int | None, offset: int) -> dict[str, Any]:
        """The bound values of a filter's statement: only those set, which also name its shape."""
        f = (flt or SessionFilter()).resolved()
        values: dict[str, Any] = {"f_app": f.app, "f_user": f.user, "f_since": f.since, "f_until": f.until}
        params = {k: v for k, v in values.items() if v is not None}
        for k in ("f_since", "f_until"):
            if k in params:
                params[k] = stored_time(self.db.tables, params[k])
        if limit:
            params["f_limit"] = limit
        if offset:
            params["f_offset"] = offset
        return params

    def _filter_summaries(self, params: dict[str, Any], oldest_first: bool) -> Any:
        """The summaries of the sessions a filter matches, newest (or oldest) first, a page of them.

        On sqlite, a page's keys first, from the sessions table alone, then the counts and
        states of that page only: otherwise sqlite computes the event count of every session it
        sorts past, while the read's lock keeps agents from committing.
        """
        from sqlalchemy import and_, bindparam, select

        t = self.db.tables
        s = t.sessions.c
        conds: list[Any] = []
        for key, column in (("f_app", s.app_name), ("f_user", s.user_id)):
            if key in params:
                conds.append(self.db.key_eq(column, bindparam(key, type_=column.type)))
        if "f_since" in params:
            conds.append(s.update_time >= bindparam("f_since", type_=s.update_time.type))
        if "f_until" in params:
            conds.append(s.update_time < bindparam("f_until", type_=s.update_time.type))
        order = self._summary_order(oldest_first)
        if self.db.dialect == "sqlite" and ("f_limit" in params or "f_offset" in params):
            keys_of = self._page(select(s.app_name, s.user_id, s.id).where(*conds), order, params).subquery("page")
            on_page = t.sessions.join(
                keys_of, and_(s.app_name == keys_of.c.app_name, s.user_id == keys_of.c.user_id, s.id == keys_of.c.id)
            )
            return self._summary_select(on_page).order_by(*order)
        return self._page(self._summary_select().where(*conds), order, params)

    def _page(self, stmt: Any, order: tuple[Any, ...], params: dict[str, Any]) -> Any:
        """`stmt` in `order`, limited and offset by the bound f_limit and f_offset when `params` has them."""
        from sqlalchemy import bindparam

        stmt = stmt.order_by(*order)
        if "f_limit" in params:
            stmt = stmt.limit(bindparam("f_limit"))
        if "f_offset" in params:
            stmt = stmt.offset(bindparam("f_offset"))
            if "f_limit" not in params and self.db.dialect in ("sqlite", "mysql"):  # no OFFSET without a LIMIT
                stmt = stmt.limit(-1 if self.db.dialect == "sqlite" else 2**63 - 1)
        return stmt

    async def count_compactions(self, conn: AsyncConnection, summaries: Sequence[SessionSummary]) -> None:
        """Set each summary's compaction_count (`compactions.count_compactions`)."""
        from veadk_mem.sessions.compactions import count_compactions

        await count_compactions(self.db, conn, summaries)

    async def rows_to_summaries(
        self, conn: AsyncConnection, stmt: Any, params: dict[str, Any], key: Any, notes: Notes
    ) -> list[SessionSummary]:
        """The summaries of `stmt`'s rows; one whose stored state is not JSON is skipped, noted in `notes`."""
        out = []
        shared: dict[Any, Any] = {}  # app and user state repeat on many rows: decode each once
        rows = (await conn.execute(stmt, params)).all()
        for r in rows:
            try:
                session_state = decode_json(r.state, None)
                app_state, user_state = decode_json(r.app_state, shared), decode_json(r.user_state, shared)
            except (ValueError, TypeError) as exc:  # one corrupt row must not hide every other session
                notes.skip(
                    f"{r.app_name}/{r.user_id}/{r.id}",
                    f"session {r.app_name}/{r.user_id}/{r.id}: stored state is not readable JSON "
                    f"({' '.join(str(exc).split())[:100]}); skipped",
                    (r.app_name, r.user_id, r.id),
                )
                continue
            out.append(
                SessionSummary(
                    app_name=r.app_name,
                    user_id=r.user_id,
                    id=r.id,
                    state=merge_state(app_state, user_state, session_state),
                    event_count=int(r.event_count or 0),
                    create_time=to_epoch(r.create_time),
                    update_time=to_epoch(r.update_time),
                    session_state_keys=len(session_state),
                )
            )
        return out

    def raw_json(self, column: Any, name: str) -> Any:
        """A JSON state column selected as text, decoded by `decode_json` (with a cache) instead of per row."""
        from sqlalchemy import Text, cast, type_coerce

        if self.db.dialect == "postgresql":
            return cast(column, Text).label(name)
        return type_coerce(column, Text).label(name)

    def raw_time(self, column: Any, name: str) -> Any:
        """On sqlite, DATETIME text parsed by datetime.fromisoformat rather than SQLAlchemy's generic processor."""
        from sqlalchemy import Text, type_coerce

        if self.db.dialect == "sqlite" and not self.db.tables.epoch_times:
            return type_coerce(column, Text).label(name)
        return column.label(name)

    def session_time(self, column: Any, name: str) -> Any:
        """A session's create or update time as a summary reads it (`to_epoch` takes either form).

        On MySQL as text: PyMySQL parses a DATETIME in Python, and an export reads each
        session's two times twice (its list, then its batch's fresh summaries).
        """
        if self.db.dialect == "mysql":
            from sqlalchemy import String, cast

            return cast(column, String).label(name)
        return self.raw_time(column, name)

    def event_time(self, column: Any) -> Any:
        """An event's time as events are read in order (export, get's pages), not re-sorted after.

        MySQL sends a DATETIME as text and PyMySQL parses it into a datetime, a third of the
        driver's work a row; vmem needs the column only where the event's JSON lacks its time
        (codec.to_epoch parses that text then) and for a keyset page's bound (`cursor_time`).
        """
        if self.db.dialect == "mysql":
            from sqlalchemy import String, cast

            return cast(column, String).label("timestamp")
        return self.raw_time(column, "timestamp")

    def cursor_time(self, value: Any) -> Any:
        """A keyset bound from an `event_time` value, as the column compares it."""
        if self.db.dialect == "mysql" and isinstance(value, str):
            from datetime import datetime

            return datetime.fromisoformat(value)
        return value

    def events_stmt(self, keys_where: list[Any], last: int | None, by_session: bool = False) -> Any:
        from sqlalchemy import literal_column, select

        e = self.db.tables.events
        sqlite_service = self.db.tables.layout is Layout.SQLITE
        tie: Any = literal_column("events.rowid").label("_tie") if sqlite_service else None
        cols: list[Any] = []
        for col in e.c:
            if col.name == "event_data" and not sqlite_service:
                cols.append(self.raw_json(col, "event_data"))  # decoded by pydantic-core in codec
            elif col.name == "timestamp":
                cols.append(self.event_time(col) if last is None else self.raw_time(col, "timestamp"))
            else:
                cols.append(col)
        if tie is not None:
            cols.append(tie)
        stmt = select(*cols).where(*keys_where)
        tie_col = literal_column("_tie") if sqlite_service else e.c.id
        if last is not None:
            from sqlalchemy import Integer, bindparam

            limit: Any = bindparam("k_last", type_=Integer) if last < 0 else last
            inner = stmt.order_by(e.c.timestamp.desc(), tie_col.desc()).limit(limit).subquery()
            inner_tie = inner.c._tie if sqlite_service else inner.c.id
            return select(inner).order_by(inner.c.timestamp.asc(), inner_tie.asc())
        lead = [e.c.app_name, e.c.user_id, e.c.session_id] if by_session else []
        return stmt.order_by(*lead, e.c.timestamp.asc(), tie_col.asc())

    def batch_events_stmt(self) -> Any:
        """Every event of the sessions bound by `key_params`, ordered by session then time (cached)."""
        stmt = self.db.stmts.get("batch_events")
        if stmt is None:
            e = self.db.tables.events.c
            where = self.db.key_match((e.app_name, e.user_id, e.session_id))
            stmt = self.db.stmts["batch_events"] = self.events_stmt([where], None, by_session=True)
        return stmt
