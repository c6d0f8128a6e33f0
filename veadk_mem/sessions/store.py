"""An async store over ADK's own session tables (sqlite, PostgreSQL, MySQL/MariaDB).

`SessionStore` reads and writes the database in the layout it already has (see
`layout.py`), through SQLAlchemy Core: listings are one aggregate query, events are
streamed, deletes are one transaction, imports are one transaction per session.

    async with SessionStore.from_settings(settings) as store:
        summaries = await store.list_sessions(SessionFilter(app="my_app"), limit=20)
        session = await store.get_session("my_app", "u1", "s1")
        async for session in store.iter_sessions(SessionFilter(user="u1")): ...
        report = await store.delete_sessions(SessionFilter(app="my_app", until=cutoff), dry_run=True)
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import from_json

from veadk_mem.bulk import bulk_objects
from veadk_mem.config import mask_url, redact
from veadk_mem.errors import BadInput, NotFound, StoreError, VmemError
from veadk_mem.sessions.codec import camel_event, dumps, event_from_row, event_row
from veadk_mem.sessions.driver import DriverPlan, skip_idle_rollback
from veadk_mem.sessions.importer import (  # noqa: F401  (re-exported: the import API lived here)
    FileKey,
    ImportReport,
    file_update_time,
    iter_import_records,
    validate_import,
)
from veadk_mem.sessions.layout import (
    LATEST_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    Layout,
    Tables,
    build_tables,
    detect_layout,
    stored_time,
    to_epoch,
)
from veadk_mem.sessions.url import sqlite_file

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from veadk_mem import events as ev
    from veadk_mem.config import VmemSettings
    from veadk_mem.sessions.limits import Limits

Progress = Callable[[int], None]
APP_PREFIX, USER_PREFIX, TEMP_PREFIX = "app:", "user:", "temp:"
_BATCH = 500


def _noop(n: int = 1) -> None:
    """A progress callback that does nothing."""


@dataclass(frozen=True)
class SessionKey:
    """What identifies a session in ADK: app, user and session id."""

    app_name: str
    user_id: str
    id: str

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}/{self.id}"


@dataclass
class SessionFilter:
    """Which sessions: by app, user, and update time.

    since / until are epoch seconds (since inclusive, until exclusive); older_than is a
    number of seconds, meaning "not updated since that long ago", resolved when used.
    """

    app: str | None = None
    user: str | None = None
    since: float | None = None
    until: float | None = None
    older_than: float | None = None

    def resolved(self) -> SessionFilter:
        """The same filter with older_than folded into until, against the clock now."""
        if self.older_than is None:
            return self
        cutoff = time.time() - self.older_than
        until = cutoff if self.until is None else min(self.until, cutoff)
        return SessionFilter(app=self.app, user=self.user, since=self.since, until=until)


@dataclass
class SessionSummary:
    """One session without its events: merged state, event count and times (epoch seconds)."""

    app_name: str
    user_id: str
    id: str
    state: dict[str, Any]
    event_count: int
    create_time: float
    update_time: float
    session_state_keys: int = 0

    @property
    def key(self) -> SessionKey:
        return SessionKey(self.app_name, self.user_id, self.id)

    def to_json(self) -> dict[str, Any]:
        """ADK's list_sessions item (no events) plus eventCount and createTime (epoch seconds)."""
        return {
            "id": self.id,
            "appName": self.app_name,
            "userId": self.user_id,
            "state": self.state,
            "lastUpdateTime": self.update_time,
            "eventCount": self.event_count,
            "createTime": self.create_time,
        }


@dataclass
class DeleteReport:
    """What a delete removed (or, with dry_run, would remove)."""

    sessions: list[SessionSummary]
    events: int
    app_states: list[str] = field(default_factory=list)
    user_states: list[tuple[str, str]] = field(default_factory=list)
    dry_run: bool = False
    skipped: list[SessionKey] = field(default_factory=list)  # changed since listed: kept

    def to_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "sessions": [{"appName": s.app_name, "userId": s.user_id, "id": s.id} for s in self.sessions],
            "sessionCount": len(self.sessions),
            "eventCount": self.events,
            "appStates": self.app_states,
            "userStates": [{"appName": a, "userId": u} for a, u in self.user_states],
            "skipped": [{"appName": k.app_name, "userId": k.user_id, "id": k.id} for k in self.skipped],
        }


def merge_state(app: dict[str, Any], user: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    """A session's full state as ADK shows it: session keys, then app: and user: keys."""
    merged = dict(session)
    for k, v in app.items():
        merged[APP_PREFIX + k] = v
    for k, v in user.items():
        merged[USER_PREFIX + k] = v
    return merged


def _decode_json(raw: Any, cache: dict[Any, Any] | None) -> dict[str, Any]:
    """A state column's text as a dict (None -> {}); `cache` shares one decode among equal texts (read only)."""
    if raw is None:
        return {}
    if not isinstance(raw, (str, bytes)):
        if not isinstance(raw, dict):
            raise TypeError(f"a JSON {type(raw).__name__}, not an object")
        return dict(raw)
    if cache is not None:
        found = cache.get(raw)
        if found is None:
            found = cache[raw] = _object(from_json(raw))
        return found
    return dict(_object(from_json(raw)))


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"a JSON {type(value).__name__}, not an object")
    return value


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Merged state -> (app, user, session) parts; temp: keys are dropped, as ADK never stores them."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for k, v in state.items():
        if k.startswith(APP_PREFIX):
            app[k[len(APP_PREFIX) :]] = v
        elif k.startswith(USER_PREFIX):
            user[k[len(USER_PREFIX) :]] = v
        elif not k.startswith(TEMP_PREFIX):
            session[k] = v
    return app, user, session


# --- errors -----------------------------------------------------------------------------

_AUTH_HINTS = ("password authentication failed", "access denied", "invalidpassword", "authentication failed")


def describe_db_error(exc: BaseException, url: str, password: str = "", busy_timeout: float = 0) -> VmemError:
    """A one-line, secret-free VmemError for a driver or connection failure."""
    if isinstance(exc, VmemError):
        return exc
    orig = getattr(exc, "orig", None) or exc
    text = " ".join(str(orig).split()) or type(orig).__name__
    if password:
        text = text.replace(password, "****")
    text = redact(text)[:300]
    where = mask_url(url)
    low = text.lower()
    if "database is locked" in low or "database table is locked" in low:
        return StoreError(
            f"{where}: database is locked by another writer (waited {busy_timeout:g} s); nothing was changed",
            hint="an agent is writing to it: retry, or raise the wait with VMEM_SQLITE_BUSY_TIMEOUT (seconds)",
        )
    if "max_allowed_packet" in low or "packet bigger" in low or "packet too large" in low:
        return StoreError(
            f"{where}: the server refused a statement larger than its max_allowed_packet: {text}",
            hint="raise max_allowed_packet on the MariaDB/MySQL server",
        )
    if "during query" in low or "server has gone away" in low:  # connected, then dropped mid-statement
        return StoreError(
            f"{where}: the server closed the connection during a statement: {text}",
            hint="MariaDB/MySQL does this for a statement larger than its max_allowed_packet; "
            "else check the server's log",
        )
    if any(h in low for h in _AUTH_HINTS) or type(orig).__name__ == "InvalidPasswordError":
        return StoreError(f"{where}: authentication failed: {text}", hint="check the user and password")
    if isinstance(orig, OSError) or "connect" in low or "refused" in low or "name or service" in low:
        return StoreError(f"{where}: cannot connect: {text}", hint="is the database server running and reachable?")
    return StoreError(f"{where}: {type(orig).__name__}: {text}")


# --- the store --------------------------------------------------------------------------


class SessionStore:
    """ADK session tables in one database; use as `async with SessionStore(url) as store`."""

    def __init__(
        self,
        url: str,
        *,
        create: bool = False,
        busy_timeout: float | None = None,
        schema: str = "",
        password: str = "",
    ) -> None:
        from veadk_mem.sessions.url import to_async_url

        self.url = to_async_url(url)
        self.create = create
        env_timeout = os.environ.get("VMEM_SQLITE_BUSY_TIMEOUT", "") or "10"
        try:
            self.busy_timeout = busy_timeout if busy_timeout is not None else float(env_timeout)
        except ValueError:
            raise BadInput(f"VMEM_SQLITE_BUSY_TIMEOUT: expected seconds, got {env_timeout!r}") from None
        self.schema = schema
        self._password = password
        self._engine: AsyncEngine | None = None
        self._reader: AsyncEngine | None = None
        self._tables: Tables | None = None
        self._stmts: dict[Any, Any] = {}
        self._plans: dict[Any, DriverPlan | None] = {}
        self._state_rows: set[tuple[str, str | None]] = set()
        self.layout: Layout = Layout.EMPTY
        self.warnings: list[str] = []
        self.damaged: list[str] = []  # sessions skipped because a stored row could not be read

    @classmethod
    def from_settings(cls, settings: VmemSettings, *, create: bool = False) -> SessionStore:
        """The store VeADK's ShortTermMemory would use under these settings (NotSupported for 'local')."""
        from veadk_mem.sessions.url import session_db_url

        url = session_db_url(settings)
        password = ""
        schema = ""
        if not settings.short_term_memory.db_url.get_secret_value():
            backend = settings.short_term_memory.backend
            if backend == "postgresql":
                password = settings.database.postgresql.password.get_secret_value()
                schema = settings.database.postgresql.schema_
            elif backend == "mysql":
                password = settings.database.mysql.password.get_secret_value()
        else:
            from sqlalchemy.engine import make_url

            try:
                password = str(make_url(url).password or "")
            except Exception:
                password = ""
        return cls(url, create=create, schema=schema, password=password)

    # lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> SessionStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def dialect(self) -> str:
        return self.url.split("+", 1)[0].split(":", 1)[0]

    @property
    def display_url(self) -> str:
        """The database URL with its password masked."""
        return mask_url(self.url)

    def _sqlite_path(self) -> str | None:
        return sqlite_file(self.url)

    async def open(self) -> None:
        """Connect, and detect the layout; a database with no ADK tables is an error unless create=True."""
        from sqlalchemy import event
        from sqlalchemy.ext.asyncio import create_async_engine

        kwargs: dict[str, Any] = {}
        path = self._sqlite_path()
        if self.dialect == "sqlite":
            if path is not None and Path(path).is_dir():
                raise BadInput(f"{path}: is a directory, expected a sqlite file", hint="check --db-url")
            if path is not None and not Path(path).exists():
                if not self.create:
                    raise StoreError(
                        f"{path}: no such sqlite file",
                        hint="check short_term_memory.local_database_path or --db-url; VeADK creates it on first use",
                    )
                from veadk_mem.sessions.files import create_private

                create_private(Path(path))  # mode 0600, like the long-term store: sessions hold chat text
            kwargs["connect_args"] = {"timeout": self.busy_timeout}
            kwargs["pool_reset_on_return"] = None  # see driver.skip_idle_rollback
        elif self.dialect == "postgresql" and self.schema:
            kwargs["connect_args"] = {"server_settings": {"search_path": self.schema}}
        try:
            engine = create_async_engine(self.url, **kwargs)
        except Exception as exc:
            raise BadInput(
                f"{self.display_url}: invalid database URL ({type(exc).__name__})",
                hint="URL-encode special characters in the user and password: p@ss:word -> p%40ss%3Aword",
            ) from None
        if self.dialect == "sqlite":
            # Own the transactions: BEGIN (IMMEDIATE for writers) so a write waits on the
            # busy timeout up front instead of failing half-way through.
            @event.listens_for(engine.sync_engine, "connect")
            def _connect(dbapi_conn: Any, record: Any) -> None:
                dbapi_conn.isolation_level = None

            @event.listens_for(engine.sync_engine, "begin")
            def _begin(conn: Any) -> None:
                # Readers run each statement on its own (autocommit); writers take the write
                # lock first, so a busy database makes them wait or fail before any change.
                if conn.get_execution_options().get("vmem_write"):
                    conn.exec_driver_sql("BEGIN IMMEDIATE")

            event.listen(engine.sync_engine, "reset", skip_idle_rollback)

        self._engine = engine
        try:
            async with engine.connect() as conn:
                self.layout = await conn.run_sync(detect_layout)
        except ValueError as exc:
            await self.close()
            raise StoreError(f"{self.display_url}: {exc}") from None
        except Exception as exc:
            await self.close()
            raise describe_db_error(exc, self.url, self._password, self.busy_timeout) from None
        if self.layout is Layout.EMPTY and not self.create:
            await self.close()
            raise StoreError(
                f"{self.display_url}: no ADK session tables (sessions, events) in this database",
                hint="is this the database your agent uses? ADK creates the tables on first use",
            )
        self._tables = build_tables(self.layout)

    async def close(self) -> None:
        self._reader = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    @property
    def tables(self) -> Tables:
        if self._tables is None:
            raise RuntimeError("SessionStore is not open")
        return self._tables

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("SessionStore is not open")
        return self._engine

    def _fail(self, exc: BaseException) -> VmemError:
        return describe_db_error(exc, self.url, self._password, self.busy_timeout)

    # queries -------------------------------------------------------------------------

    def _session_where(self, flt: SessionFilter | None, keys: Sequence[SessionKey] | None = None) -> list[Any]:
        from sqlalchemy import and_, or_

        s = self.tables.sessions.c
        conds: list[Any] = []
        if flt is not None:
            flt = flt.resolved()
            if flt.app is not None:
                conds.append(self.key_eq(s.app_name, flt.app))
            if flt.user is not None:
                conds.append(self.key_eq(s.user_id, flt.user))
            if flt.since is not None:
                conds.append(s.update_time >= stored_time(self.tables, flt.since))
            if flt.until is not None:
                conds.append(s.update_time < stored_time(self.tables, flt.until))
        if keys is not None:
            groups: dict[tuple[str, str], list[str]] = defaultdict(list)
            for k in keys:
                groups[(k.app_name, k.user_id)].append(k.id)
            conds.append(or_(*[and_(s.app_name == a, s.user_id == u, s.id.in_(ids)) for (a, u), ids in groups.items()]))
        return conds

    async def _states(
        self, conn: AsyncConnection, apps: Iterable[str], pairs: Iterable[tuple[str, str]]
    ) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
        from sqlalchemy import select

        t = self.tables
        app_list = sorted(set(apps))
        pair_set = set(pairs)
        app_states: dict[str, dict[str, Any]] = {}
        user_states: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(0, len(app_list), _BATCH):
            chunk = app_list[i : i + _BATCH]
            rows = await conn.execute(
                select(t.app_states.c.app_name, t.app_states.c.state).where(t.app_states.c.app_name.in_(chunk))
            )
            for row in rows:
                app_states[row.app_name] = dict(row.state or {})
            users = sorted({u for a, u in pair_set if a in chunk})
            for j in range(0, len(users), _BATCH):
                rows = await conn.execute(
                    select(t.user_states.c.app_name, t.user_states.c.user_id, t.user_states.c.state).where(
                        t.user_states.c.app_name.in_(chunk), t.user_states.c.user_id.in_(users[j : j + _BATCH])
                    )
                )
                for row in rows:
                    if (row.app_name, row.user_id) in pair_set:
                        user_states[(row.app_name, row.user_id)] = dict(row.state or {})
        return app_states, user_states

    async def _summaries(
        self,
        conn: AsyncConnection,
        flt: SessionFilter | None,
        keys: Sequence[SessionKey] | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        oldest_first: bool = False,
        one: tuple[str, str, str] | None = None,
    ) -> list[SessionSummary]:
        """Summaries with merged state and event counts, from ONE query (no event is loaded)."""
        from sqlalchemy import and_, bindparam, func, select

        t = self.tables
        s, e = t.sessions.c, t.events.c
        a, u = t.app_states.c, t.user_states.c
        if one is not None and "one" in self._stmts:
            return await self._rows_to_summaries(
                conn, self._stmts["one"], {"k_app": one[0], "k_user": one[1], "k_id": one[2]}, "one"
            )
        shape: tuple[Any, ...] | None = None
        params: dict[str, Any] = {}
        if keys is None and one is None:  # filters: one prepared statement per shape, reused
            f = (flt or SessionFilter()).resolved()
            values = {"f_app": f.app, "f_user": f.user, "f_since": f.since, "f_until": f.until}
            params = {k: v for k, v in values.items() if v is not None}
            for k in ("f_since", "f_until"):
                if k in params:
                    params[k] = stored_time(t, params[k])
            if limit:
                params["f_limit"] = limit
            if offset:
                params["f_offset"] = offset
            shape = ("filter", *sorted(params), oldest_first)
            if shape in self._stmts:
                return await self._rows_to_summaries(conn, self._stmts[shape], params, shape)
        count = (
            select(func.count())
            .where(e.app_name == s.app_name, e.user_id == s.user_id, e.session_id == s.id)
            .scalar_subquery()
            .label("event_count")
        )
        stmt = select(
            s.app_name,
            s.user_id,
            s.id,
            self._raw_json(s.state, "state"),
            self._raw_time(s.create_time, "create_time"),
            self._raw_time(s.update_time, "update_time"),
            count,
            self._raw_json(a.state, "app_state"),
            self._raw_json(u.state, "user_state"),
        ).select_from(
            t.sessions.outerjoin(t.app_states, a.app_name == s.app_name).outerjoin(
                t.user_states, and_(u.app_name == s.app_name, u.user_id == s.user_id)
            )
        )
        if one is not None:  # the hot path of get: one prepared statement, reused
            cached = self._stmts.get("one")
            if cached is None:
                cached = self._stmts["one"] = stmt.where(
                    self.key_eq(s.app_name, bindparam("k_app")),
                    self.key_eq(s.user_id, bindparam("k_user")),
                    self.key_eq(s.id, bindparam("k_id")),
                )
            stmt = cached
            params = {"k_app": one[0], "k_user": one[1], "k_id": one[2]}
        elif shape is not None:
            conds = []
            for key, column, op in (
                ("f_app", s.app_name, "eq"),
                ("f_user", s.user_id, "eq"),
                ("f_since", s.update_time, "ge"),
                ("f_until", s.update_time, "lt"),
            ):
                if key in params:
                    bound = bindparam(key, type_=column.type)
                    conds.append(
                        self.key_eq(column, bound) if op == "eq" else column >= bound if op == "ge" else column < bound
                    )
            stmt = stmt.where(*conds)
        else:
            stmt = stmt.where(*self._session_where(flt, keys))
        if oldest_first:
            stmt = stmt.order_by(s.update_time.asc(), s.app_name, s.user_id, s.id)
        else:
            stmt = stmt.order_by(s.update_time.desc(), s.app_name, s.user_id, s.id)
        if limit:
            stmt = stmt.limit(bindparam("f_limit") if shape is not None else limit)
        if offset:
            stmt = stmt.offset(bindparam("f_offset") if shape is not None else offset)
            if not limit and self.dialect in ("sqlite", "mysql"):
                stmt = stmt.limit(-1 if self.dialect == "sqlite" else 2**63 - 1)
        if shape is not None:
            self._stmts[shape] = stmt
        return await self._rows_to_summaries(conn, stmt, params, "one" if one is not None else shape)

    async def _rows_to_summaries(
        self, conn: AsyncConnection, stmt: Any, params: dict[str, Any], key: Any = None
    ) -> list[SessionSummary]:
        out = []
        shared: dict[Any, Any] = {}  # app and user state repeat on many rows: decode each once
        rows = await self._fetch_all(conn, stmt, params, key)
        with bulk_objects():
            for r in rows:
                try:
                    session_state = _decode_json(r.state, None)
                    app_state, user_state = _decode_json(r.app_state, shared), _decode_json(r.user_state, shared)
                except (ValueError, TypeError) as exc:  # one corrupt row must not hide every other session
                    self.damaged.append(f"{r.app_name}/{r.user_id}/{r.id}")
                    self.warnings.append(
                        f"session {r.app_name}/{r.user_id}/{r.id}: stored state is not readable JSON "
                        f"({' '.join(str(exc).split())[:100]}); skipped"
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

    async def _fetch_all(self, conn: AsyncConnection, stmt: Any, params: dict[str, Any], key: Any) -> Sequence[Any]:
        """Every row of the cached statement `key`, in one driver call where the types allow (driver.py)."""
        if key is not None:
            if key not in self._plans:
                self._plans[key] = DriverPlan.make(stmt, self.engine.dialect)
            plan = self._plans[key]
            if plan is not None:
                return await plan.fetch_all(conn, params)
        return (await conn.execute(stmt, params)).all()

    def _raw_json(self, column: Any, name: str) -> Any:
        """A JSON state column selected as text, decoded by `_decode_json` (with a cache) instead of per row."""
        from sqlalchemy import Text, cast, type_coerce

        if self.dialect == "postgresql":
            return cast(column, Text).label(name)
        return type_coerce(column, Text).label(name)

    def _raw_time(self, column: Any, name: str) -> Any:
        """On sqlite, DATETIME text parsed by datetime.fromisoformat: much faster than the generic processor."""
        from sqlalchemy import Text, type_coerce

        if self.dialect == "sqlite" and not self.tables.epoch_times:
            return type_coerce(column, Text).label(name)
        return column.label(name)

    @property
    def reader(self) -> AsyncEngine:
        """The engine for reads: autocommit on PostgreSQL (no BEGIN/ROLLBACK round trips), else the engine."""
        if self._reader is None:
            self._reader = (
                self.engine.execution_options(isolation_level="AUTOCOMMIT")
                if self.dialect == "postgresql"
                else self.engine
            )
        return self._reader

    async def list_sessions(
        self, flt: SessionFilter | None = None, *, limit: int | None = None, offset: int = 0, oldest_first: bool = False
    ) -> list[SessionSummary]:
        """Sessions matching `flt`, newest update first, without loading any event."""
        try:
            async with self.reader.connect() as conn:
                return await self._summaries(conn, flt, limit=limit, offset=offset, oldest_first=oldest_first)
        except Exception as exc:
            raise self._fail(exc) from None

    async def get_summary(self, app: str, user: str, session_id: str) -> SessionSummary:
        """One session's summary; NotFound (exit 3) when it does not exist."""
        try:
            async with self.reader.connect() as conn:
                return await self._one_summary(conn, app, user, session_id)
        except VmemError:
            raise
        except Exception as exc:
            raise self._fail(exc) from None

    async def _one_summary(self, conn: AsyncConnection, app: str, user: str, session_id: str) -> SessionSummary:
        found = await self._summaries(conn, None, None, one=(app, user, session_id))
        if not found and f"{app}/{user}/{session_id}" in self.damaged:
            raise StoreError(self.warnings[-1].removesuffix("; skipped"))
        if not found:
            raise NotFound(f"session {app}/{user}/{session_id}: not found in {self.display_url}")
        return found[0]

    def _events_stmt(self, keys_where: list[Any], last: int | None, by_session: bool = False) -> Any:
        from sqlalchemy import literal_column, select

        e = self.tables.events
        sqlite_service = self.tables.layout is Layout.SQLITE
        tie: Any = literal_column("events.rowid").label("_tie") if sqlite_service else None
        cols: list[Any] = []
        for col in e.c:
            if col.name == "event_data" and not sqlite_service:
                cols.append(self._raw_json(col, "event_data"))  # decoded by pydantic-core in codec
            elif col.name == "timestamp":
                cols.append(self._raw_time(col, "timestamp"))
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

    async def _stream_event_rows(self, conn: AsyncConnection, stmt: Any) -> AsyncIterator[Any]:
        result = await conn.stream(stmt)
        async for partition in result.partitions(_BATCH):
            for row in partition:
                yield row

    async def _event_data(
        self, conn: AsyncConnection, app: str, user: str, session_id: str, last: int | None, expected: int = -1
    ) -> AsyncIterator[dict[str, Any]]:
        from sqlalchemy import bindparam

        name = "events" if last is None else "events_last"
        stmt = self._stmts.get(name)
        if stmt is None:
            e = self.tables.events.c
            where = [
                e.app_name == bindparam("k_app"),
                e.user_id == bindparam("k_user"),
                e.session_id == bindparam("k_id"),
            ]
            stmt = self._stmts[name] = self._events_stmt(where, None if last is None else -1)
        params: dict[str, Any] = {"k_app": app, "k_user": user, "k_id": session_id}
        if last is not None:
            params["k_last"] = last
        tables, warnings = self.tables, self.warnings

        def decode(row: Any) -> dict[str, Any]:
            try:
                return event_from_row(tables, row, warnings)
            except (ValueError, TypeError, AttributeError) as exc:
                raise StoreError(
                    f"session {app}/{user}/{session_id}: event {row.id} is not readable "
                    f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]})"
                ) from None

        if 0 <= expected <= _BATCH:  # small: one round trip beats a server-side cursor
            for row in await self._fetch_all(conn, stmt, params, name):
                yield decode(row)
            return
        # Large: stream through a server-side cursor, which PostgreSQL only allows in a transaction.
        async with self.engine.connect() as streaming:
            result = await streaming.stream(stmt, params)
            async for partition in result.partitions(_BATCH):
                for row in partition:
                    yield decode(row)

    async def iter_event_data(
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """A session's events as ADK stored them (snake_case data), oldest first, streamed."""
        try:
            async with self.engine.connect() as conn:
                async for data in self._event_data(conn, app, user, session_id, last):
                    yield data
        except VmemError:
            raise
        except Exception as exc:
            raise self._fail(exc) from None

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
            async with self.reader.connect() as conn:
                summary = await self._one_summary(conn, app, user, session_id)
                return await self._load_session(conn, summary, last)
        except VmemError:
            raise
        except Exception as exc:
            raise self._fail(exc) from None

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
        self, app: str, user: str, session_id: str, *, last: int | None = None
    ) -> AsyncIterator[str]:
        """The ADK session JSON of one session in text pieces, events streamed one per piece."""
        try:
            async with self.reader.connect() as conn:
                summary = await self._one_summary(conn, app, user, session_id)
                yield _session_head(summary)
                sep = "\n"
                async for data in self._event_data(conn, app, user, session_id, last, summary.event_count):
                    yield sep + dumps(camel_event(data))
                    sep = ",\n"
                yield "\n" + _session_tail(summary) + "\n"
        except VmemError:
            raise
        except Exception as exc:
            raise self._fail(exc) from None

    async def iter_sessions(self, flt: SessionFilter | None = None) -> AsyncIterator[ev.Session]:
        """Every matching session with its events, oldest update first, one at a time.

        Each session is read by its own short query, so a slow consumer (embedding, an LTM
        backend) never holds a read lock that would keep the agent from writing.
        """
        for summary in await self.list_sessions(flt, oldest_first=True):
            try:
                async with self.reader.connect() as conn:
                    session = await self._load_session(conn, summary, None)
            except VmemError:
                raise
            except Exception as exc:
                raise self._fail(exc) from None
            yield session

    def _batch_events_stmt(self, keys: Sequence[SessionKey]) -> Any:
        """Every event of these sessions, ordered by session then time."""
        from sqlalchemy import and_, or_

        e = self.tables.events.c
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for k in keys:
            groups[(k.app_name, k.user_id)].append(k.id)
        where = or_(*[and_(e.app_name == a, e.user_id == u, e.session_id.in_(ids)) for (a, u), ids in groups.items()])
        return self._events_stmt([where], None, by_session=True)

    async def _export_batch(self, batch: Sequence[SessionSummary]) -> list[str]:
        """The JSONL lines of these sessions, read in ONE short transaction, fully, before returning.

        Rows and events come from the same snapshot (a session's events match its row), and
        no lock is held while the caller writes them out: a slow reader (`export | less`)
        never keeps the agent from writing for longer than one batch takes to read.
        """
        keys = [s.key for s in batch]
        tables, warnings = self.tables, self.warnings
        engine = self.engine
        if self.dialect == "postgresql":
            engine = engine.execution_options(isolation_level="REPEATABLE READ")
        async with engine.connect() as conn, conn.begin():
            if self.dialect == "sqlite":
                await conn.exec_driver_sql("BEGIN")  # one snapshot for both reads (autocommit otherwise)
            fresh = {x.key: x for x in await self._summaries(conn, None, keys)}
            rows = (await conn.execute(self._batch_events_stmt(keys))).all()
        events: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        broken: set[tuple[str, str, str]] = set()
        for row in rows:
            where = (row.app_name, row.user_id, row.session_id)
            try:
                text = dumps(camel_event(event_from_row(tables, row, warnings)))
            except (ValueError, TypeError, AttributeError) as exc:
                if where not in broken:
                    broken.add(where)
                    self.damaged.append("/".join(where))
                    warnings.append(
                        f"session {'/'.join(where)}: event {row.id} is not readable "
                        f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]}); session not exported"
                    )
                continue
            events[where].append(text)
        out: list[str] = []
        for key in keys:
            summary = fresh.get(key)
            if summary is None or (key.app_name, key.user_id, key.id) in broken:
                continue  # deleted since it was listed, or damaged (named in a warning)
            body = ",".join(events.get((key.app_name, key.user_id, key.id), ()))
            out.append(_session_head(summary) + body + _session_tail(summary) + "\n")
        return out

    async def export_jsonl(
        self, flt: SessionFilter | None = None, *, progress: Progress = _noop, batch_events: int = 5000
    ) -> AsyncIterator[str]:
        """The export file in text pieces: app_state and user_state records, then one session per line.

        Sessions are read in batches of about `batch_events` events, each in its own short
        transaction (see `_export_batch`); a session larger than that is a batch of its own.
        """
        summaries = await self.list_sessions(flt, oldest_first=True)
        apps = sorted({s.app_name for s in summaries})
        pairs = sorted({(s.app_name, s.user_id) for s in summaries})
        try:
            async with self.reader.connect() as conn:
                app_states, user_states = await self._states(conn, apps, pairs)
        except Exception as exc:
            raise self._fail(exc) from None
        for app in apps:
            if app in app_states:
                yield dumps({"kind": "app_state", "appName": app, "state": app_states[app]}) + "\n"
        for app, user in pairs:
            if (app, user) in user_states:
                state = user_states[(app, user)]
                yield dumps({"kind": "user_state", "appName": app, "userId": user, "state": state}) + "\n"
        batch: list[SessionSummary] = []
        size = 0
        for index, summary in enumerate(summaries):
            batch.append(summary)
            size += summary.event_count + 1
            if size < batch_events and len(batch) < _BATCH and index + 1 < len(summaries):
                continue
            try:
                lines = await self._export_batch(batch)
            except VmemError:
                raise
            except Exception as exc:
                raise self._fail(exc) from None
            yield "".join(lines)
            progress(len(batch))
            batch, size = [], 0

    async def count_sessions(self, flt: SessionFilter | None = None) -> int:
        """How many sessions match."""
        from sqlalchemy import func, select

        try:
            async with self.reader.connect() as conn:
                stmt = select(func.count()).select_from(self.tables.sessions).where(*self._session_where(flt))
                return int((await conn.execute(stmt)).scalar_one())
        except Exception as exc:
            raise self._fail(exc) from None

    # delete --------------------------------------------------------------------------

    async def find_sessions(self, keys: Sequence[SessionKey]) -> list[SessionSummary]:
        """Summaries of the named sessions; NotFound naming every one that does not exist."""
        found: list[SessionSummary] = []
        try:
            async with self.reader.connect() as conn:
                for i in range(0, len(keys), _BATCH):
                    found += await self._summaries(conn, None, keys[i : i + _BATCH])
        except Exception as exc:
            raise self._fail(exc) from None
        wanted = set(keys)
        found = [s for s in found if s.key in wanted]  # MySQL's collation matches more than the exact key
        missing = [str(k) for k in keys if k not in {s.key for s in found}]
        if missing:
            raise NotFound(f"session not found: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        return found

    async def delete_sessions(
        self,
        target: SessionFilter | Sequence[SessionKey] | Sequence[SessionSummary],
        *,
        purge_state: bool = False,
        dry_run: bool = False,
        recheck: bool | None = None,
    ) -> DeleteReport:
        """Delete sessions and their events in one transaction, never relying on ON DELETE CASCADE.

        `target` is a filter, session keys, or summaries already shown to the user (only
        those are deleted). With `recheck` (the default for a filter with a time bound), a
        session whose update time changed since it was listed (an agent resumed it while the
        prompt waited) is kept: the check runs inside the deleting transaction, on locked
        rows, and the kept ones are in `report.skipped`. With purge_state, a user's
        user_state goes when that user has no session left in the app, and an app's
        app_state when the app has none left.
        """
        if isinstance(target, SessionFilter):
            if recheck is None:
                recheck = any(v is not None for v in (target.since, target.until, target.older_than))
            summaries = await self.list_sessions(target, oldest_first=True)
        elif target and isinstance(target[0], SessionSummary):
            summaries = list(target)  # type: ignore[arg-type]
        else:
            summaries = await self.find_sessions(list(target))  # type: ignore[arg-type]
        report = DeleteReport(sessions=summaries, events=sum(s.event_count for s in summaries), dry_run=dry_run)
        if not summaries:
            return report
        from sqlalchemy import delete

        t = self.tables
        try:
            async with self.engine.connect() as conn:
                conn = await conn.execution_options(vmem_write=True)
                async with conn.begin():
                    if recheck and not dry_run:
                        summaries = await self._unchanged(conn, summaries, report)
                    by_pair: dict[tuple[str, str], list[str]] = defaultdict(list)
                    for summary in summaries:
                        by_pair[(summary.app_name, summary.user_id)].append(summary.id)
                    if purge_state and by_pair:
                        report.app_states, report.user_states = await self._orphaned_states(conn, by_pair)
                    if dry_run:
                        await conn.rollback()
                        return report
                    events = 0
                    for (app, user), ids in by_pair.items():
                        for i in range(0, len(ids), _BATCH):
                            chunk = ids[i : i + _BATCH]
                            res = await conn.execute(
                                delete(t.events).where(
                                    self.key_eq(t.events.c.app_name, app),
                                    self.key_eq(t.events.c.user_id, user),
                                    t.events.c.session_id.in_(chunk),
                                )
                            )
                            events += max(res.rowcount or 0, 0)
                            await conn.execute(
                                delete(t.sessions).where(
                                    self.key_eq(t.sessions.c.app_name, app),
                                    self.key_eq(t.sessions.c.user_id, user),
                                    t.sessions.c.id.in_(chunk),
                                )
                            )
                    for app in report.app_states:
                        await conn.execute(delete(t.app_states).where(t.app_states.c.app_name == app))
                    for app, user in report.user_states:
                        await conn.execute(
                            delete(t.user_states).where(
                                t.user_states.c.app_name == app, t.user_states.c.user_id == user
                            )
                        )
                    report.events = events
        except VmemError:
            raise
        except Exception as exc:
            raise self._fail(exc) from None
        return report

    async def _unchanged(
        self, conn: AsyncConnection, summaries: list[SessionSummary], report: DeleteReport
    ) -> list[SessionSummary]:
        """The summaries whose session still has the update time it was listed with (rows locked).

        The others (resumed, or deleted meanwhile) go to report.skipped and out of report.sessions.
        """
        from sqlalchemy import select

        s = self.tables.sessions.c
        current: dict[tuple[str, str, str], float] = {}
        by_pair: dict[tuple[str, str], list[str]] = defaultdict(list)
        for summary in summaries:
            by_pair[(summary.app_name, summary.user_id)].append(summary.id)
        for (app, user), ids in by_pair.items():
            for i in range(0, len(ids), _BATCH):
                stmt = select(s.app_name, s.user_id, s.id, s.update_time).where(
                    s.app_name == app, s.user_id == user, s.id.in_(ids[i : i + _BATCH])
                )
                if self.dialect != "sqlite":  # sqlite: BEGIN IMMEDIATE already holds the write lock
                    stmt = stmt.with_for_update()
                for a, u, sid, stamp in await conn.execute(stmt):
                    current[(a, u, sid)] = to_epoch(stamp)
        kept: list[SessionSummary] = []
        for summary in summaries:
            now = current.get((summary.app_name, summary.user_id, summary.id))
            if now is not None and abs(now - summary.update_time) <= 1e-6:
                kept.append(summary)
            else:
                report.skipped.append(summary.key)
        report.sessions = kept
        report.events = sum(x.event_count for x in kept)
        return kept

    async def _orphaned_states(
        self, conn: AsyncConnection, by_pair: dict[tuple[str, str], list[str]]
    ) -> tuple[list[str], list[tuple[str, str]]]:
        """The app/user state rows left without any session once these sessions go."""
        from sqlalchemy import func, select

        s = self.tables.sessions.c
        apps = sorted({a for a, _ in by_pair})
        totals: dict[tuple[str, str], int] = {}
        for i in range(0, len(apps), _BATCH):
            rows = await conn.execute(
                select(s.app_name, s.user_id, func.count())
                .where(s.app_name.in_(apps[i : i + _BATCH]))
                .group_by(s.app_name, s.user_id)
            )
            for a, u, n in rows:
                totals[(a, u)] = int(n)
        remaining = {pair: n - len(by_pair.get(pair, [])) for pair, n in totals.items()}
        users = sorted(pair for pair in by_pair if remaining.get(pair, 0) <= 0)
        app_left: dict[str, int] = defaultdict(int)
        for (a, _u), n in remaining.items():
            app_left[a] += max(n, 0)
        app_list = [a for a in apps if app_left.get(a, 0) == 0]
        return app_list, users

    # import --------------------------------------------------------------------------

    async def _ensure_tables(self) -> bool:
        """Create ADK's v1 tables exactly as ADK 2.x does when the database has none.

        Another creator (a second import, the agent's first start) may be creating them at
        the same moment: MySQL's DDL commits at once, so its CREATE TABLE can fail with
        "already exists" half-way. Then the layout is read again and the missing tables
        created, a few times, instead of failing.
        """
        if self.layout is not Layout.EMPTY:
            return False
        from sqlalchemy import insert, select

        tables = build_tables(Layout.EMPTY)
        for attempt in range(5):
            try:
                async with self.engine.connect() as conn:
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
                break
            except Exception as exc:
                if attempt == 4 or not _concurrent_ddl(exc):
                    raise self._fail(exc) from None
                await asyncio.sleep(0.05 * (attempt + 1))
        self._tables = tables
        self._stmts.clear()
        self.layout = Layout.V1
        return True

    def offline_limits(self) -> Limits | None:
        """The limits of a sqlite file that does not exist yet (known without creating it), else None."""
        from veadk_mem.sessions.limits import Limits

        path = self._sqlite_path()
        if self.dialect == "sqlite" and path is not None and not Path(path).exists():
            return Limits("sqlite", Layout.V1)
        return None

    async def limits(self) -> Limits:
        """What this database accepts (column sizes, time range, MariaDB's max_allowed_packet)."""
        from veadk_mem.sessions.limits import Limits

        packet = 0
        if self.dialect == "mysql":
            from sqlalchemy import text

            try:
                async with self.engine.connect() as conn:
                    packet = int((await conn.execute(text("SELECT @@max_allowed_packet"))).scalar_one())
            except Exception as exc:
                raise self._fail(exc) from None
        return Limits(self.dialect, Layout.V1 if self.layout is Layout.EMPTY else self.layout, packet)

    async def key_collisions(self, keys: Sequence[FileKey]) -> list[str]:
        """Distinct session keys the database's collation takes for one (MySQL/MariaDB only).

        Under MariaDB's default utf8mb4_general_ci, "Order-1", "order-1" and "order-1 " are the
        same primary key: writing them would merge sessions. The keys are compared by the
        database itself, in a temporary table with the sessions table's own collations, with
        each other and with the stored sessions. Returns one description per collision.
        """
        if self.dialect != "mysql" or not keys:
            return []
        from sqlalchemy import text

        out: list[str] = []
        try:
            async with self.engine.connect() as conn:
                if self.layout is Layout.EMPTY:  # the columns ADK will create get the database default
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
                    for i in range(0, len(keys), _BATCH):
                        chunk = keys[i : i + _BATCH]
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
                    if self.layout is not Layout.EMPTY:
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
            raise self._fail(exc) from None
        return out

    async def newer_sessions(self, keys: Sequence[FileKey]) -> list[str]:
        """The sessions of `keys` stored with an update time later than the file's."""
        if self.layout is Layout.EMPTY or not keys:
            return []
        from sqlalchemy import select

        s = self.tables.sessions.c
        wanted = {(k.app_name, k.user_id, k.id): k for k in keys}
        out: list[str] = []
        try:
            async with self.reader.connect() as conn:
                groups: dict[tuple[str, str], list[str]] = defaultdict(list)
                for k in keys:
                    groups[(k.app_name, k.user_id)].append(k.id)
                for (a, u), ids in groups.items():
                    for j in range(0, len(ids), _BATCH):
                        rows = await conn.execute(
                            select(s.app_name, s.user_id, s.id, s.update_time).where(
                                s.app_name == a, s.user_id == u, s.id.in_(ids[j : j + _BATCH])
                            )
                        )
                        for app, user, sid, stamp in rows:
                            key = wanted.get((app, user, sid))
                            if key is not None and _newer(to_epoch(stamp), key.update_time):
                                out.append(f"{key} ({key.where})")
        except Exception as exc:
            raise self._fail(exc) from None
        return out

    async def import_records(
        self,
        records: Iterable[ev.Session | dict[str, Any]],
        *,
        force: bool = True,
        progress: Progress | None = None,
        batch_seconds: float = 0.5,
        batch_rows: int = 20_000,
    ) -> ImportReport:
        """Upsert sessions and state records (validated input), committing in batches.

        Each session is written whole or not at all. A batch commits after `batch_seconds`
        or `batch_rows` rows, so a failure loses at most the open batch; the error says how
        many sessions were committed before it, and a re-run is idempotent. Without `force`,
        a session stored with a newer update time than the record's is left alone and named
        in `report.skipped`.
        """

        advance = progress or _noop
        report = ImportReport()
        report.created_tables = await self._ensure_tables()
        report.layout = self.layout.value
        records_iter = iter(records)
        done = False
        try:
            while not done:
                batch: list[ev.Session | dict[str, Any]] = []
                for attempt in range(5):
                    try:
                        pending, done = await self._write_batch(
                            records_iter, batch, force=force, batch_seconds=batch_seconds, batch_rows=batch_rows
                        )
                        break
                    except Exception as exc:
                        # Another writer (a second import, the agent) deadlocked with this batch:
                        # the database rolled it back whole; write the same records again.
                        if attempt == 4 or not _retryable(exc):
                            raise
                        self._state_rows.clear()
                        await asyncio.sleep(0.05 * (attempt + 1))
                _add(report, pending)
                advance(len(batch))
        except Exception as exc:
            error = exc if isinstance(exc, VmemError) else self._fail(exc)
            if report.sessions or report.app_states or report.user_states:
                error.message = (
                    f"{error.message} -- {report.sessions:,} session(s) before it were written and committed; "
                    "re-running the import is safe"
                ).replace("; nothing was changed", "")
            else:
                error.message = error.message.replace("; nothing was changed", "") + " -- nothing was written"
            error.args = (error.message,)
            raise error from None
        return report

    async def _write_batch(
        self,
        records: Iterator[ev.Session | dict[str, Any]],
        batch: list[ev.Session | dict[str, Any]],
        *,
        force: bool,
        batch_seconds: float,
        batch_rows: int,
    ) -> tuple[ImportReport, bool]:
        """Write `batch` (a retry) or the next records into it, in ONE transaction: (counts, input ended)."""
        from veadk_mem import events as ev

        pending = ImportReport()
        done = False
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                started, rows, index = time.monotonic(), 0, 0
                while True:
                    if index < len(batch):
                        record: ev.Session | dict[str, Any] | None = batch[index]
                    else:
                        if index > 0 and (rows >= batch_rows or time.monotonic() - started >= batch_seconds):
                            break
                        record = next(records, None)
                        if record is None:
                            done = True
                            break
                        batch.append(record)
                    index += 1
                    if isinstance(record, ev.Session):
                        written = await self._write_session(conn, record, force=force)
                        if written is None:
                            pending.skipped.append(str(SessionKey(record.app_name, record.user_id, record.id)))
                        else:
                            events, existed = written
                            pending.events += events
                            pending.sessions += 1
                            pending.replaced += existed
                            rows += events + 1
                    elif record is not None and record.get("kind") == "app_state":
                        await self._put_state(conn, record["appName"], None, record["state"], replace=False)
                        pending.app_states += 1
                        rows += 1
                    elif record is not None:
                        await self._put_state(conn, record["appName"], record["userId"], record["state"], replace=False)
                        pending.user_states += 1
                        rows += 1
        return pending, done

    async def _put_state(
        self, conn: AsyncConnection, app: str, user: str | None, state: dict[str, Any], *, replace: bool
    ) -> None:
        """Create the app or user state row, or merge (replace=False) / set (replace=True) its state.

        A row whose state would not change is not touched, so a second import changes nothing.
        """
        from sqlalchemy import insert, select, update

        marker = (app, user)
        if not replace and not state and marker in self._state_rows:
            return  # the row exists (seen in this run) and there is nothing to merge: skip two round trips
        t = self.tables
        table = t.app_states if user is None else t.user_states
        where = [table.c.app_name == app] + ([table.c.user_id == user] if user is not None else [])
        stmt = select(table.c.state).where(*where)
        if self.dialect != "sqlite":
            stmt = stmt.with_for_update()
        row = (await conn.execute(stmt)).first()
        self._state_rows.add(marker)
        now = stored_time(t, time.time())
        if row is None:
            values: dict[str, Any] = {"app_name": app, "state": dict(state), "update_time": now}
            if user is not None:
                values["user_id"] = user
            await conn.execute(insert(table).values(**values))
            return
        current = dict(row.state or {})
        new = dict(state) if replace else {**current, **state}
        if new != current:
            await conn.execute(update(table).where(*where).values(state=new, update_time=now))

    async def _write_session(
        self, conn: AsyncConnection, session: ev.Session, *, force: bool = True
    ) -> tuple[int, bool] | None:
        """Write `session` over any stored one with its key: (events written, whether it existed).

        None, with nothing written, when the stored session is newer than `session` and not `force`.
        """
        from sqlalchemy import delete, insert, select

        t = self.tables
        app, user, sid = session.app_name, session.user_id, session.id
        stamps = [e.timestamp for e in session.events]
        updated = session.last_update_time or (max(stamps) if stamps else time.time())
        where = [self.key_eq(t.sessions.c.app_name, app), self.key_eq(t.sessions.c.user_id, user)]
        where.append(self.key_eq(t.sessions.c.id, sid))
        query = select(t.sessions.c.update_time).where(*where)
        if self.dialect != "sqlite":
            query = query.with_for_update()
        stored = (await conn.execute(query)).first()
        if stored is not None and not force and _newer(to_epoch(stored[0]), updated):
            return None  # an agent wrote to it after the file was made: its newer events would go
        app_part, user_part, session_part = split_state(session.state)
        await self._put_state(conn, app, None, app_part, replace=False)
        await self._put_state(conn, app, user, user_part, replace=False)
        if stored is not None:
            await conn.execute(
                delete(t.events).where(
                    t.events.c.app_name == app, t.events.c.user_id == user, t.events.c.session_id == sid
                )
            )
            await conn.execute(delete(t.sessions).where(*where))
        created = min([*stamps, updated])
        await conn.execute(
            insert(t.sessions).values(
                app_name=app,
                user_id=user,
                id=sid,
                state=session_part,
                create_time=stored_time(t, created),
                update_time=stored_time(t, updated),
            )
        )
        rows = [event_row(t, app, user, sid, event) for event in session.events]
        stmt = insert(t.events)
        if t.layout is Layout.V0 and self.dialect == "mysql":
            # aiomysql cannot bind bytes with PyMySQL 1.2: send the pickle as hex, UNHEX() it in SQL
            from sqlalchemy import bindparam, func

            stmt = stmt.values(actions=func.unhex(bindparam("actions_hex")))
            for row in rows:
                row["actions_hex"] = row.pop("actions").hex()
        for i in range(0, len(rows), _BATCH):
            await conn.execute(stmt, rows[i : i + _BATCH])
        return len(rows), stored is not None

    def key_eq(self, column: Any, value: Any) -> Any:
        """column == value, exactly: on MySQL/MariaDB also byte for byte, not by the column's collation.

        A case-insensitive, PAD SPACE collation (utf8mb4_general_ci, MariaDB's default) takes
        "Order-1", "order-1" and "order-1 " for one id; get and delete by id must not.
        """
        from sqlalchemy import LargeBinary, String, and_, cast, literal

        if self.dialect != "mysql":
            return column == value
        typed = literal(value, String()) if isinstance(value, str) else value
        return and_(column == value, cast(column, LargeBinary) == cast(typed, LargeBinary))


def _retryable(exc: BaseException) -> bool:
    """True for a deadlock or serialization failure: the transaction was rolled back whole."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).lower()
    code = str(getattr(orig, "sqlstate", "") or getattr(orig, "pgcode", "") or "")
    return "deadlock" in text or "1213" in text or "could not serialize" in text or code in ("40001", "40P01")


def _concurrent_ddl(exc: BaseException) -> bool:
    """True for the errors of a table, index or metadata row another creator just made."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return any(
        hint in text
        for hint in ("already exists", "duplicate key", "duplicate entry", "unique constraint", "1050", "1061")
    )


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


def _session_head(summary: SessionSummary) -> str:
    head = dumps({"id": summary.id, "appName": summary.app_name, "userId": summary.user_id, "state": summary.state})
    return head[:-1] + ',"events":['


def _session_tail(summary: SessionSummary) -> str:
    return '],"lastUpdateTime":' + dumps(summary.update_time) + "}"
