"""`session vacuum`: the disk back after deletes and trims, the way each database gives it.

sqlite: `VACUUM` (or `PRAGMA incremental_vacuum` in a file made with auto_vacuum=INCREMENTAL),
with free pages and bytes before and after; an agent holding the file is named, and nothing
is changed. PostgreSQL: `VACUUM (ANALYZE)` of ADK's four tables, their table and index sizes
before and after (VACUUM makes dead rows' space reusable; only VACUUM FULL, which locks the
table, returns it to the OS). MySQL/MariaDB: `OPTIMIZE TABLE`, which rebuilds each table, so
only when asked (`yes`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, StoreError

if TYPE_CHECKING:
    from veadk_mem.sessions.engine import Database


@dataclass
class Size:
    """One table's size: `table` its data bytes, `index` its indexes', `free` space it holds unused."""

    name: str
    table: int = 0
    index: int = 0
    free: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "table_bytes": self.table, "index_bytes": self.index, "free_bytes": self.free}


@dataclass
class VacuumReport:
    """What a vacuum found and did: sizes before and after (after is None on a dry run)."""

    dialect: str
    dry_run: bool
    action: str  # the statement run (or, on a dry run, that would be run)
    before: list[Size]
    after: list[Size] | None = None
    notes: list[str] = field(default_factory=list)

    @staticmethod
    def _total(sizes: list[Size] | None) -> int | None:
        return None if sizes is None else sum(s.table + s.index for s in sizes)

    @property
    def reclaimed(self) -> int | None:
        """Bytes the database takes less after it (None on a dry run)."""
        after = self._total(self.after)
        before = self._total(self.before)
        return None if after is None or before is None else before - after

    def to_json(self) -> dict[str, Any]:
        """`session vacuum --json`: vmem's own report, snake_case."""
        return {
            "dialect": self.dialect,
            "dry_run": self.dry_run,
            "action": self.action,
            "before": [s.to_json() for s in self.before],
            "after": None if self.after is None else [s.to_json() for s in self.after],
            "bytes_before": self._total(self.before),
            "bytes_after": self._total(self.after),
            "reclaimed_bytes": self.reclaimed,
            "notes": self.notes,
        }


def holders(path: str) -> list[str]:
    """Other processes that have the sqlite file open ("pid 123 (python agent.py)"), from /proc; [] elsewhere."""
    target = os.path.realpath(path)
    found: list[str] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.path.realpath(fd) == target:
                    cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                    found.append(f"pid {entry.name} ({cmd[:80]})")
                    break
            except OSError:
                continue
    return found


async def vacuum(db: Database, *, dry_run: bool = False, yes: bool = False) -> VacuumReport:
    """Return the disk the session tables no longer use (see the module's docstring)."""
    if db.dialect == "sqlite":
        return await _sqlite(db, dry_run)
    if db.dialect == "postgresql":
        return await _postgresql(db, dry_run)
    return await _mysql(db, dry_run, yes)


async def _sqlite(db: Database, dry_run: bool) -> VacuumReport:
    async def sizes() -> tuple[list[Size], int]:
        async with db.engine.connect() as conn:
            page = int((await conn.exec_driver_sql("PRAGMA page_size")).scalar_one())
            pages = int((await conn.exec_driver_sql("PRAGMA page_count")).scalar_one())
            free = int((await conn.exec_driver_sql("PRAGMA freelist_count")).scalar_one())
            mode = int((await conn.exec_driver_sql("PRAGMA auto_vacuum")).scalar_one())
            await conn.rollback()
        return [Size("file", table=(pages - free) * page, index=0, free=free * page)], mode

    with db.failures():
        before, mode = await sizes()
    action = "PRAGMA incremental_vacuum" if mode == 2 else "VACUUM"
    # the file's size is what the OS sees: the pages in use plus the free ones
    for s in before:
        s.table += s.free
    report = VacuumReport("sqlite", dry_run, action, before)
    report.notes.append(f"{before[0].free:,} bytes in free pages; {action} returns them to the file system")
    if dry_run:
        return report
    path = db.sqlite_path() or ""
    try:
        async with db.engine.connect() as conn:
            await conn.exec_driver_sql(action)
            await conn.commit()
        after, _ = await sizes()
    except Exception as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            who = holders(path) if path else []
            named = f" (held by {', '.join(who)})" if who else ""
            raise StoreError(
                f"{db.display_url}: locked by another connection{named}: vacuum needs the file to itself; "
                "nothing was changed",
                hint="run it when the agent is stopped or idle",
            ) from None
        raise db.fail(exc) from None
    for s in after:
        s.table += s.free
    report.after = after
    return report


def _tables(db: Database) -> list[Any]:
    t = db.tables
    return [t.sessions, t.events, t.app_states, t.user_states]


async def _postgresql(db: Database, dry_run: bool) -> VacuumReport:
    names = [tbl.name for tbl in _tables(db)]
    quote = db.engine.dialect.identifier_preparer.format_table

    async def sizes() -> list[Size]:
        out = []
        async with db.reader.connect() as conn:
            for tbl in _tables(db):
                q = quote(tbl)
                row: Any = (await conn.exec_driver_sql(f"SELECT pg_table_size('{q}'), pg_indexes_size('{q}')")).one()
                out.append(Size(tbl.name, int(row[0]), int(row[1]), 0))
        return out

    action = f"VACUUM (ANALYZE) {', '.join(names)}"
    with db.failures():
        report = VacuumReport("postgresql", dry_run, action, await sizes())
        report.notes.append(
            "VACUUM makes dead rows' space reusable by new rows; only VACUUM FULL (which locks each table "
            "for its whole rewrite, stopping the agent) returns it to the operating system"
        )
        if dry_run:
            return report
        async with db.reader.connect() as conn:  # autocommit: VACUUM cannot run in a transaction
            await conn.exec_driver_sql(f"VACUUM (ANALYZE) {', '.join(quote(t) for t in _tables(db))}")
        report.after = await sizes()
    return report


async def _mysql(db: Database, dry_run: bool, yes: bool) -> VacuumReport:
    from sqlalchemy import bindparam, text

    names = [tbl.name for tbl in _tables(db)]

    async def sizes() -> list[Size]:
        stmt = text(
            "SELECT TABLE_NAME, DATA_LENGTH, INDEX_LENGTH, DATA_FREE FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN :names"
        ).bindparams(bindparam("names", expanding=True))
        async with db.engine.connect() as conn:
            await conn.exec_driver_sql(f"ANALYZE TABLE {', '.join(names)}")  # fresh figures, not InnoDB's estimate
            rows = {r[0]: r for r in await conn.execute(stmt, {"names": names})}
            await conn.rollback()
        return [Size(n, int(rows[n][1] or 0), int(rows[n][2] or 0), int(rows[n][3] or 0)) for n in names if n in rows]

    action = f"OPTIMIZE TABLE {', '.join(names)}"
    with db.failures():
        before = await sizes()
    report = VacuumReport("mysql", dry_run, action, before)
    report.notes.append("OPTIMIZE TABLE rebuilds each table (a copy of it, then a swap): it takes time and disk")
    if dry_run:
        return report
    if not yes:
        raise BadInput(f"vacuum: {action} rebuilds each table (a copy, then a swap); pass --yes to run it")
    with db.failures():
        async with db.engine.connect() as conn:
            await conn.exec_driver_sql(action)
            await conn.commit()
        report.after = await sizes()
    return report
