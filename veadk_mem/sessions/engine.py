"""The database a session store works on: its engine, sqlite's transaction discipline, the layout.

`Database` is what every part of the store is handed (store.py): the engine and the reader,
the dialect, the tables in their layout, the statement cache, and the one mapping of driver
failures to vmem's errors. It holds no result of any read: warnings go back with each result."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from veadk_mem.config import mask_url, tuning
from veadk_mem.errors import BadInput, StoreError, VmemError
from veadk_mem.jsonio import compact_json
from veadk_mem.sessions.dberrors import describe_db_error
from veadk_mem.sessions.files import create_private
from veadk_mem.sessions.layout import (
    Layout,
    Tables,
    build_tables,
    inspect_layout,
    inspect_tables,
)
from veadk_mem.sessions.url import sqlite_file

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from veadk_mem.config import VmemSettings


async def sqlite_gap(dialect: str, held: float) -> None:
    """On sqlite, after a write transaction that held the file's lock `held` s: leave it free a moment.

    An agent's write that found the lock taken waits in sqlite's busy handler, which sleeps and
    tries again (every 100 ms once it has waited a third of a second). A batch begun the instant
    the last one committed takes the lock again before the agent wakes up, so the agent waited
    for batch after batch, up to ADK's busy timeout. A pause as long as the batch held the lock,
    at most 100 ms, lets it in; the next batch is read meanwhile, so an import loses little.
    """
    if dialect == "sqlite" and held > 0:
        await asyncio.sleep(min(0.1, held))


class Database:
    """ADK session tables in one database: the engine and what every part of the store needs."""

    def __init__(
        self,
        url: str,
        *,
        create: bool = False,
        busy_timeout: float | None = None,
        schema: str = "",
        password: str = "",
    ) -> None:
        from veadk_mem.sessions.url import to_async_url, url_dialect

        self.url = to_async_url(url)
        self.dialect = url_dialect(self.url)  # sqlite, postgresql or mysql
        self.given_url = url  # as the user wrote it (a path, postgresql://): what messages name
        self.create = create
        self.busy_timeout = busy_timeout if busy_timeout is not None else tuning().sqlite_busy_timeout
        self.schema = schema
        self._password = password
        self._engine: AsyncEngine | None = None
        self._reader: AsyncEngine | None = None
        self._tables: Tables | None = None
        self._columns: frozenset[str] | None = None
        self.stmts: dict[Any, Any] = {}
        self.layout: Layout = Layout.EMPTY
        self.table_names: frozenset[str] = frozenset()  # every table the database had when opened

    @classmethod
    def from_settings(cls, settings: VmemSettings, *, create: bool = False) -> Self:
        """The database VeADK's ShortTermMemory would use under these settings (NotSupported for 'local')."""
        from veadk_mem.sessions.url import given_db_url, session_db_url

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
        db = cls(url, create=create, schema=schema, password=password)
        db.given_url = given_db_url(settings, url)
        return db

    async def health(self) -> StoreHealth:
        """Reachability, layout and size of the database, for `vmem doctor`, as the long-term
        backends' `health()` gives theirs.

        Works on a store that was not opened (an empty database or an unknown layout is a
        fact to report here, not an error), creates nothing, and lets the driver's own error
        out when the database cannot be reached: doctor names it.
        """
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        kwargs: dict[str, Any] = {}
        if self.dialect == "postgresql" and self.schema:
            kwargs["connect_args"] = {"server_settings": {"search_path": self.schema}}
        engine = create_async_engine(self.url, **kwargs)
        try:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
                return await conn.run_sync(_probe)
        finally:
            await engine.dispose()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def display_url(self) -> str:
        """The database as the user named it (a path, or a URL without the async driver vmem
        adds: postgresql://, not postgresql+asyncpg://), its password masked."""
        from veadk_mem.sessions.url import plain_url

        given = self.given_url
        if given == self.url:  # built by vmem from a config section: the driver is vmem's
            given = plain_url(given)
        return mask_url(given)

    def sqlite_path(self) -> str | None:
        return sqlite_file(self.url)

    def _engine_options(self) -> dict[str, Any]:
        """The engine's options for this database; a sqlite file checked (and, with create, made) first."""
        kwargs: dict[str, Any] = {}
        path = self.sqlite_path()
        if self.dialect == "sqlite":
            if path is not None and Path(path).exists() and not Path(path).is_file():  # a FIFO's open would block
                what = "is a directory" if Path(path).is_dir() else "is not a regular file"
                raise BadInput(f"{self.display_url}: {what}, expected a sqlite file", hint="check --db-url")
            if path is not None and not Path(path).exists():
                if not self.create:
                    raise StoreError(
                        f"{self.display_url}: no such sqlite file",  # as the user named it
                        hint="check short_term_memory.local_database_path or --db-url; VeADK creates it on first use",
                    )

                create_private(Path(path))  # mode 0600, like the long-term store: sessions hold chat text
            kwargs["connect_args"] = {"timeout": self.busy_timeout}
        elif self.dialect == "postgresql" and self.schema:
            kwargs["connect_args"] = {"server_settings": {"search_path": self.schema}}
        # Only JSONB (AdkJSON on PostgreSQL) binds through the serializer; JSONB stores the value, not
        # the text, so the fast compact writer stores what ADK's json.dumps does, NaN as null
        kwargs["json_serializer"] = compact_json
        return kwargs

    async def open(self) -> None:
        """Connect, and detect the layout; a database with no ADK tables is an error unless create=True."""
        from sqlalchemy.ext.asyncio import create_async_engine

        kwargs = self._engine_options()
        try:
            engine = create_async_engine(self.url, **kwargs)
        except Exception as exc:
            raise BadInput(
                f"{self.display_url}: invalid database URL ({type(exc).__name__})",
                hint="URL-encode special characters in the user and password: p@ss:word -> p%40ss%3Aword",
            ) from None
        _listen(engine.sync_engine, self.dialect)
        self._engine = engine
        try:
            async with engine.connect() as conn:
                self.layout, self._columns, self.table_names = await conn.run_sync(inspect_tables)
        except ValueError as exc:
            await self.close()
            raise StoreError(f"{self.display_url}: {exc}") from None
        except Exception as exc:
            await self.close()
            raise describe_db_error(exc, self.display_url, self._password, self.busy_timeout) from None
        if self.layout is Layout.EMPTY and not self.create:
            await self.close()
            raise StoreError(
                f"{self.display_url}: no ADK session tables (sessions, events) in this database",
                hint="is this the database your agent uses? ADK creates the tables on first use",
            )
        self._tables = build_tables(self.layout, self._columns)

    async def drop_connections(self) -> None:
        """A new pool after a failed read: the old one's connections may be dead, so they are dropped
        unclosed (closing a dead socket can hang); the next read connects anew."""
        await self.engine.dispose(close=False)

    async def close(self) -> None:
        self._reader = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    def use_tables(self, tables: Tables, layout: Layout) -> None:
        """Work on tables just created (an import into an empty database): statements built anew."""
        self._tables = tables
        self.stmts.clear()
        self.layout = layout

    @property
    def tables(self) -> Tables:
        if self._tables is None:
            raise RuntimeError("the session database is not open")
        return self._tables

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("the session database is not open")
        return self._engine

    def fail(self, exc: BaseException, *, unchanged: bool = True) -> VmemError:
        """`exc` as a one-line, secret-free error naming this database (`dberrors.describe_db_error`)."""
        return describe_db_error(exc, self.display_url, self._password, self.busy_timeout, unchanged=unchanged)

    def failures(self, *, unchanged: bool = True, keep: tuple[type[Exception], ...] = ()) -> Failures:
        """`with db.failures():` around a part's statements: vmem's own errors (and `keep`) pass as
        they are, any other exception leaves as `fail(exc)`; Ctrl-C and cancellation pass untouched.
        A sync context manager, so it also wraps awaits and an async generator's yields."""
        return Failures(self, unchanged, keep)

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

    def for_update(self, stmt: Any, table: Any) -> Any:
        """`stmt` locking the rows of `table` it reads, for a write transaction (sqlite: as it is).

        On MySQL/MariaDB the rows are reached through the primary key, never a scan: a locking
        read that scans a small table locks each row it passes, and one an agent held
        meanwhile stayed locked to the commit even under READ COMMITTED, the agent waiting
        behind the whole batch (its own session row).
        """
        if self.dialect == "sqlite":  # BEGIN IMMEDIATE already holds the write lock
            return stmt
        if self.dialect == "mysql":
            stmt = stmt.with_hint(table, "FORCE INDEX (PRIMARY)", "mysql")
        return stmt.with_for_update()

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

    def key_match(self, columns: tuple[Any, Any, Any]) -> Any:
        """`columns` (app, user, session id) equal to one of the keys bound at execution (`key_params`).

        The condition is the same whatever the keys, so a statement holding it is built and
        compiled once and cached: a condition of literal keys, built per export batch, was a
        quarter of an export's CPU. The keys go as three arrays through unnest() on PostgreSQL
        and as one JSON list through json_each() on sqlite, both joined on ADK's key index;
        as one expanding row-value `(app, user, id) IN (...)` on MySQL/MariaDB, which it reads
        as index ranges (an OR of (app, user) groups made MariaDB scan and sort the whole
        events table for each export batch: 945,529 rows examined for 3,237).
        """
        from sqlalchemy import bindparam, cast, func, literal_column, select, tuple_

        row = tuple_(*columns)
        if self.dialect == "postgresql":
            from sqlalchemy import Text
            from sqlalchemy.dialects.postgresql import ARRAY

            # typed by a cast, not by the bind: asyncpg takes a list for text[] as it is
            arrays = [cast(bindparam(n), ARRAY(Text)) for n in ("k_apps", "k_users", "k_ids")]
            k = func.unnest(*arrays).table_valued("a", "u", "i").render_derived()
            return row.in_(select(k.c.a, k.c.u, k.c.i))
        if self.dialect == "sqlite":
            j = func.json_each(bindparam("k_json")).table_valued("value")
            return row.in_(select(*(func.json_extract(j.c.value, literal_column(f"'$[{i}]'")) for i in range(3))))
        return row.in_(bindparam("k_keys", expanding=True))

    def key_params(self, keys: Sequence[tuple[str, str, str]]) -> dict[str, Any]:
        """The bound values of `key_match` for these (app, user, session id) keys."""
        if self.dialect == "postgresql":
            return {"k_apps": [k[0] for k in keys], "k_users": [k[1] for k in keys], "k_ids": [k[2] for k in keys]}
        if self.dialect == "sqlite":
            import json

            return {"k_json": json.dumps([list(k) for k in keys])}
        return {"k_keys": [tuple(k) for k in keys]}


class Failures:
    """The one mapping of a part's failures (`Database.failures`): re-raise ours, map the rest."""

    __slots__ = ("db", "keep", "unchanged")

    def __init__(self, db: Database, unchanged: bool, keep: tuple[type[Exception], ...]) -> None:
        self.db, self.unchanged, self.keep = db, unchanged, keep

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, (VmemError, *self.keep)):
            raise self.db.fail(exc, unchanged=self.unchanged) from None


def _listen(sync_engine: Any, dialect: str) -> None:
    """The transaction discipline of vmem's connections, set on the engine's events."""
    from sqlalchemy import event

    if dialect == "sqlite":
        # Own the transactions: BEGIN (IMMEDIATE for writers) so a write waits on the
        # busy timeout up front instead of failing half-way through.
        @event.listens_for(sync_engine, "connect")
        def _connect(dbapi_conn: Any, record: Any) -> None:
            dbapi_conn.isolation_level = None
            # Off, as sqlite has them unless a build turns them on: a big session's events
            # are written before its session row (`BigWrites._write_big_staged`), and every
            # vmem delete names the events it deletes (ADK's connections turn them on).
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA foreign_keys=OFF")
            cursor.close()

        @event.listens_for(sync_engine, "begin")
        def _begin(conn: Any) -> None:
            # Readers run each statement on its own (autocommit); writers take the write
            # lock first, so a busy database makes them wait or fail before any change.
            if conn.get_execution_options().get("vmem_write"):
                conn.exec_driver_sql("BEGIN IMMEDIATE")

    elif dialect == "mysql":
        # A write transaction locks the rows it matches, not every row a scan passes:
        # under REPEATABLE READ, InnoDB kept a lock on each row a locking read scanned, and
        # for an IN list over a small table MariaDB scans it whole, the agent's own session
        # and state rows included; the agent then waited for the batch's commit. READ
        # COMMITTED releases the rows a scan does not match and takes no gap locks, as
        # PostgreSQL's default does; a row an agent creates meanwhile is a duplicate key,
        # reported as on PostgreSQL.
        @event.listens_for(sync_engine, "begin")
        def _begin_mysql(conn: Any) -> None:
            if conn.get_execution_options().get("vmem_write"):
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")


@dataclass
class StoreHealth:
    """What `vmem doctor` says of a session database: its layout (None when unrecognised, with
    the reason as the description) and how many sessions and events it holds (None when empty)."""

    layout: str | None
    layout_description: str
    counts: dict[str, int] | None

    def as_facts(self) -> dict[str, Any]:
        """The figures `doctor --json` gives scripts."""
        return {"layout": self.layout, "layout_description": self.layout_description, "counts": self.counts}


def _probe(sync_conn: Any) -> StoreHealth:
    from sqlalchemy import func, select

    try:
        layout, columns = inspect_layout(sync_conn)
    except ValueError as exc:
        return StoreHealth(None, str(exc), None)
    tables = build_tables(layout, columns)
    counts = None
    if layout is not Layout.EMPTY:
        counts = {
            "sessions": int(sync_conn.execute(select(func.count()).select_from(tables.sessions)).scalar_one()),
            "events": int(sync_conn.execute(select(func.count()).select_from(tables.events)).scalar_one()),
        }
    return StoreHealth(layout.value, tables.describe(), counts)
