"""Small reads in one driver call: aiosqlite's execute_fetchall, asyncpg's fetch.

SQLAlchemy's aiosqlite adapter makes a worker-thread round trip for each of cursor(),
execute(), fetchall() and close(); aiosqlite's `execute_fetchall` does all four in one. A
get of a 20-event session is two small queries, so those hops were most of its time. On
asyncpg the round trips are the same, and the call skips the adapter's per-call Python.

Statements are still built and compiled by SQLAlchemy Core. A plan is made only for a
statement whose binds and result columns need no type processing on the dialect, so the
rows are exactly what SQLAlchemy would have returned; any other statement (v0's pickled
`actions`, expanding IN lists, DateTime binds) keeps the normal path.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_DRIVERS = {("aiosqlite", "qmark"), ("asyncpg", "numeric_dollar")}


@dataclass(frozen=True)
class DriverPlan:
    """A compiled select run straight on the driver: SQL text, bind order and a row maker."""

    sql: str
    compiled: Any
    names: tuple[str, ...]
    make_row: Callable[[Sequence[Any]], Any]
    driver: str

    @classmethod
    def make(cls, stmt: Any, dialect: Any) -> DriverPlan | None:
        """A plan for `stmt` on `dialect`, or None when it needs SQLAlchemy's type processing."""
        if (dialect.driver, dialect.paramstyle) not in _DRIVERS:
            return None
        compiled = stmt.compile(dialect=dialect)
        if compiled.positiontup is None or compiled.literal_execute_params or compiled.post_compile_params:
            return None
        for bind in compiled.binds.values():
            if bind.expanding or bind.type.dialect_impl(dialect).bind_processor(dialect) is not None:
                return None
        columns = stmt.selected_columns
        for column in columns:
            if column.type.dialect_impl(dialect).result_processor(dialect, None) is not None:
                return None
        row = namedtuple("Row", list(columns.keys()), rename=True)  # type: ignore[misc]
        return cls(compiled.string, compiled, tuple(compiled.positiontup), row._make, dialect.driver)

    def args(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """Positional bind values, literal ones (LIMIT -1, ...) included."""
        values = self.compiled.construct_params(dict(params))
        return tuple(values[name] for name in self.names)

    async def fetch_all(self, conn: Any, params: Mapping[str, Any]) -> list[Any]:
        """All rows, as named tuples, on the driver connection behind an AsyncConnection."""
        raw = (await conn.get_raw_connection()).driver_connection
        if self.driver == "asyncpg":
            rows = await raw.fetch(self.sql, *self.args(params))
        else:
            rows = await raw.execute_fetchall(self.sql, self.args(params))
        make = self.make_row
        return [make(r) for r in rows]


def skip_idle_rollback(dbapi_conn: Any, record: Any, state: Any) -> None:
    """Pool `reset` hook for sqlite: roll back only a connection that holds a transaction.

    vmem's sqlite readers run in autocommit, so most connections come back with nothing to
    undo, and a blind rollback would cost one more worker-thread hop per read.
    """
    if state.asyncio_safe and dbapi_conn.driver_connection.in_transaction:
        dbapi_conn.rollback()


@dataclass(frozen=True)
class InsertPlan:
    """A multi-row INSERT run straight on the driver's executemany.

    SQLAlchemy's executemany builds, type-processes and checks every row in Python, which
    was most of an import's time. The plan keeps SQLAlchemy's compiled SQL and each
    column's own bind processor, applies them in one pass, and hands the rows to
    aiosqlite's or asyncpg's executemany. JSON columns are encoded with the fast encoder
    the rest of vmem writes with (`codec.dumps`).
    """

    sql: str
    names: tuple[str, ...]
    processors: tuple[Callable[[Any], Any] | None, ...]
    driver: str
    table: str
    schema: str | None

    @classmethod
    def make(cls, table: Any, dialect: Any) -> InsertPlan | None:
        """A plan inserting every column of `table`, or None on a driver it does not cover."""
        from sqlalchemy import insert

        from veadk_mem.sessions.codec import dumps
        from veadk_mem.sessions.layout import AdkJSON, AdkTimestamp

        if (dialect.driver, dialect.paramstyle) not in _DRIVERS:
            return None
        compiled = insert(table).compile(dialect=dialect, column_keys=[c.key for c in table.columns])
        if compiled.positiontup is None:
            return None
        names = tuple(compiled.positiontup)
        processors: list[Callable[[Any], Any] | None] = []
        for name in names:
            column_type = table.c[name].type
            if isinstance(column_type, AdkJSON):
                processors.append(lambda v: None if v is None else dumps(v))
            elif isinstance(column_type, AdkTimestamp) and dialect.name == "sqlite":
                # SQLAlchemy's sqlite DATETIME text ("2026-11-30 12:00:00.000000"), twice as fast
                processors.append(lambda v: None if v is None else v.isoformat(" ", "microseconds"))
            else:
                processors.append(column_type._cached_bind_processor(dialect))
        return cls(compiled.string, names, tuple(processors), dialect.driver, table.name, table.schema)

    def rows(self, values: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """Driver-ready tuples of `values` (each a column -> value mapping)."""
        make = self._row_maker()
        return [make(v) for v in values]

    def _row_maker(self) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
        # One expression per row instead of a generator over the columns: a third of the time.
        ns: dict[str, Any] = {}
        items = []
        for i, (name, processor) in enumerate(zip(self.names, self.processors, strict=True)):
            ns[f"N{i}"] = name
            if processor is None:
                items.append(f"v[N{i}]")
            else:
                ns[f"P{i}"] = processor
                items.append(f"P{i}(v[N{i}])")
        maker: Callable[[Mapping[str, Any]], tuple[Any, ...]] = eval(f"lambda v: ({', '.join(items)},)", ns)
        return maker

    async def run(self, conn: Any, values: Sequence[Mapping[str, Any]]) -> bool:
        """Insert `values` inside `conn`'s open transaction; False (nothing done) when it has none."""
        if not values or set(values[0]) != set(self.names):
            return False
        raw = (await conn.get_raw_connection()).driver_connection
        if self.driver == "asyncpg":
            if not raw.is_in_transaction():
                return False
            # COPY: the server parses no statement per row, about twice as fast as executemany
            await raw.copy_records_to_table(
                self.table, records=self.rows(values), columns=list(self.names), schema_name=self.schema
            )
        else:
            if not raw.in_transaction:
                return False
            await raw.executemany(self.sql, self.rows(values))
        return True
