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

# The SQLAlchemy internals this module reads (and the only module that reads any): the
# compiled statement's `positiontup`, `literal_execute_params`, `post_compile_params` and
# `string`, and `TypeEngine._cached_bind_processor`. Written for these releases, [low, high):
# pyproject's bound says the same, and tests/test_private_internals.py checks both.
WRITTEN_FOR = ((2, 0, 50), (2, 2))
COMPILED_ATTRS = ("positiontup", "literal_execute_params", "post_compile_params", "string")


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

    async def not_begun(self, conn: Any) -> bool:
        """True when `conn` is in a transaction that the driver has not begun yet.

        SQLAlchemy's asyncpg adapter sends BEGIN with the first statement it runs itself, so a
        statement sent straight to the driver before it would run outside the transaction (its
        own snapshot, not the isolation level asked for): that first one goes through SQLAlchemy.
        """
        if self.driver != "asyncpg" or not conn.in_transaction():
            return False
        raw = (await conn.get_raw_connection()).driver_connection
        return not raw.is_in_transaction()

    async def fetch_all(self, conn: Any, params: Mapping[str, Any]) -> list[Any]:
        """All rows, as named tuples, on the driver connection behind an AsyncConnection."""
        raw = (await conn.get_raw_connection()).driver_connection
        if self.driver == "asyncpg":
            rows = await raw.fetch(self.sql, *self.args(params))
        else:
            rows = await raw.execute_fetchall(self.sql, self.args(params))
        make = self.make_row
        return [make(r) for r in rows]
