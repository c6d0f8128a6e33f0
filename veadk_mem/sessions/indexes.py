"""The indexes ADK's own queries need, read from the database's plans, and made when missing.

ADK (google-adk 2.13, `DatabaseSessionService`) reads a session with `get_session`: the
session row by its primary key, then `SELECT ... FROM events WHERE app_name = ? AND session_id
= ? AND user_id = ? ORDER BY timestamp DESC, id DESC`; and lists with `list_sessions`:
`SELECT ... FROM sessions WHERE app_name = ? [AND user_id = ?] ORDER BY update_time, user_id,
id`. The events query needs an index led by (app_name, user_id, session_id): the events
table's primary key starts with the event id, and the databases ADK 1.x made (VeADK's among
them) have no other index, so each `get_session` reads every event of every session. ADK 2.x
declares `idx_events_app_user_session_ts_id` and builds it when it starts on a database that
lacks it (a plain CREATE INDEX, blocking the agents' writes for the build); vmem builds that
same index, under ADK's name, without blocking them (`CREATE INDEX CONCURRENTLY` on
PostgreSQL, `ALGORITHM=INPLACE, LOCK=NONE` on MySQL/MariaDB), so ADK's own check finds it.
The list's filter is served by the sessions primary key; a sessions table without one gets
`vmem_idx_sessions_app_user_id`. Nothing else of ADK's schema changes.

Whether an index serves a query is read from the database's catalog (an index whose leading
columns are the columns the query matches: on PostgreSQL an "Index Scan" can walk a whole
index whose key leads with another column, so a plan's index name alone does not tell);
the plan of the query at the database's size now is read with EXPLAIN and reported beside it
(`scan`: the table read whole, `sort`). Whether the index is needed comes from the table's
size: below `[tuning] index_rows` rows a scan costs little, and doctor does not ask for one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veadk_mem.check_outcome import Check
from veadk_mem.config import tuning
from veadk_mem.sessions.engine import Database
from veadk_mem.sessions.layout import EVENTS_INDEX, Layout

if TYPE_CHECKING:
    from sqlalchemy import Index
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.config import VmemSettings

SESSIONS_INDEX = "vmem_idx_sessions_app_user_id"


@dataclass
class Finding:
    """One ADK query on one table: what its plan reads, and the index that serves it (or would)."""

    table: str
    query: str  # the ADK call the query belongs to
    rows: int  # the table's rows now
    index: str  # the index `session index --create` makes for it
    served_by: str | None = None  # the index the plan uses (or can use), None: a full scan
    scan: bool = False  # the plan at the table's size now reads it whole
    sort: bool = False  # the plan sorts the rows it read (ORDER BY not from an index)
    plan: list[str] = field(default_factory=list)
    invalid: bool = False  # PostgreSQL: an index of that name left INVALID by a failed build

    @property
    def missing(self) -> bool:
        """No index serves the query: the database reads the whole table for it."""
        return self.served_by is None

    @property
    def needed(self) -> bool:
        """Missing, at a size where the scan costs the agent ([tuning] index_rows)."""
        return self.missing and self.rows >= tuning().index_rows

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "query": self.query,
            "rows": self.rows,
            "served_by": self.served_by,
            "missing": self.missing,
            "needed": self.needed,
            "scan": self.scan,
            "sort": self.sort,
            "index": self.index,
            "invalid": self.invalid,
            "plan": self.plan,
        }


@dataclass
class IndexReport:
    """What `session index` (and doctor) found, what it ran, and ADK's list query's time."""

    dialect: str
    findings: list[Finding]
    list_app: str | None = None  # the app with most sessions, whose list was timed
    list_sessions: int = 0
    list_ms: float | None = None
    statements: list[str] = field(default_factory=list)  # run (or, on a dry run, to run)
    created: list[str] = field(default_factory=list)
    dry_run: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def needed(self) -> list[Finding]:
        return [f for f in self.findings if f.needed]

    @property
    def missing(self) -> list[Finding]:
        return [f for f in self.findings if f.missing]

    def to_json(self) -> dict[str, Any]:
        """`session index --json`: vmem's own report, snake_case."""
        return {
            "dialect": self.dialect,
            "index_rows": tuning().index_rows,
            "findings": [f.to_json() for f in self.findings],
            "list_sessions": {"app_name": self.list_app, "sessions": self.list_sessions, "ms": self.list_ms},
            "dry_run": self.dry_run,
            "statements": self.statements,
            "created": self.created,
            "notes": self.notes,
        }


def adk_queries(db: Database, app: str, user: str, session_id: str) -> list[tuple[str, str, Any]]:
    """(table, ADK call, statement): ADK's get_session events read and list_sessions, for this key."""
    from sqlalchemy import select

    t = db.tables
    e, s = t.events.c, t.sessions.c
    events = (
        select(t.events)
        .where(e.app_name == app, e.session_id == session_id, e.user_id == user)
        .order_by(e.timestamp.desc(), e.id.desc())
    )
    listing = select(t.sessions).where(s.app_name == app).order_by(s.update_time, s.user_id, s.id)
    return [("events", "get_session", events), ("sessions", "list_sessions", listing)]


def wanted_index(db: Database, table: str) -> Index:
    """The index `session index --create` makes for `table` (ADK's own for events), on a copy of
    the table: vmem's tables, which an import may create, stay exactly ADK's."""
    from sqlalchemy import Index, MetaData

    copy = getattr(db.tables, table).to_metadata(MetaData())
    c = copy.c
    if table == "events":
        columns: list[Any] = [c.app_name, c.user_id, c.session_id, c.timestamp.desc(), c.id.desc()]
        return Index(EVENTS_INDEX, *columns, postgresql_concurrently=True)
    return Index(SESSIONS_INDEX, c.app_name, c.user_id, c.id, postgresql_concurrently=True)


async def inspect_indexes(db: Database, *, timed: bool = True) -> IndexReport:
    """Each ADK query's plan on this database, and (timed) ADK's list query on its largest app."""
    report = IndexReport(db.dialect, [])
    with db.failures():
        async with db.reader.connect() as conn:
            rows = {name: await _count(conn, getattr(db.tables, name)) for name in ("events", "sessions")}
            app, user, sid, n = await _sample(db, conn)
            for table, query, stmt in adk_queries(db, app, user, sid):
                finding = Finding(table, query, rows[table], wanted_index(db, table).name or "")
                await _read_plan(db, conn, stmt, finding)
                report.findings.append(finding)
            if db.dialect == "postgresql":
                for finding in report.findings:
                    finding.invalid = await _pg_invalid(conn, finding.index)
            if timed and n:
                report.list_app, report.list_sessions = app, n
                report.list_ms = await _time_list(db, adk_queries(db, app, user, sid)[1][2], app)
    return report


async def _count(conn: AsyncConnection, table: Any) -> int:
    from sqlalchemy import func, select

    return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


async def _sample(db: Database, conn: AsyncConnection) -> tuple[str, str, str, int]:
    """(app, user, session id, the app's sessions): a session of the app with most sessions."""
    from sqlalchemy import func, select

    s = db.tables.sessions.c
    top = (
        await conn.execute(
            select(s.app_name, func.count().label("n")).group_by(s.app_name).order_by(func.count().desc()).limit(1)
        )
    ).first()
    if top is None:
        return "", "", "", 0
    one = (await conn.execute(select(s.user_id, s.id).where(s.app_name == top[0]).limit(1))).first()
    return str(top[0]), str(one[0]) if one else "", str(one[1]) if one else "", int(top[1])


def _compiled(db: Database, stmt: Any) -> tuple[str, Any]:
    """`stmt` as this driver's SQL text and parameters (EXPLAIN takes the statement as it runs)."""
    compiled = stmt.compile(dialect=db.engine.dialect)
    params = compiled.construct_params()
    if compiled.positional:
        return str(compiled), tuple(params[name] for name in compiled.positiontup)
    return str(compiled), params


KEYS = {"events": ("app_name", "user_id", "session_id"), "sessions": ("app_name",)}  # what ADK's queries match


def _serving(indexes: list[tuple[str, list[str]]], table: str) -> str | None:
    """The first index whose leading columns are the query's matched columns (in any order)."""
    keys = set(KEYS[table])
    for name, columns in indexes:
        if set(columns[: len(keys)]) == keys:
            return name
    return None


def _table_indexes(sync_conn: Any, table: str) -> list[tuple[str, list[str]]]:
    """(name, columns in order) of the table's primary key and every index on it."""
    from sqlalchemy import inspect

    inspector = inspect(sync_conn)
    pk = inspector.get_pk_constraint(table)
    found = [(pk.get("name") or "primary key", list(pk.get("constrained_columns") or []))]
    found += [(str(ix["name"]), [str(c) for c in ix["column_names"] if c]) for ix in inspector.get_indexes(table)]
    return found


async def _read_plan(db: Database, conn: AsyncConnection, stmt: Any, finding: Finding) -> None:
    """The plan of ADK's query at the database's size now (EXPLAIN), and the index that serves it."""
    indexes = await conn.run_sync(_table_indexes, finding.table)
    finding.served_by = _serving(indexes, finding.table)
    sql, params = _compiled(db, stmt)
    if db.dialect == "sqlite":
        rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)).all()
        _sqlite_plan(finding, [str(r[-1]) for r in rows])
    elif db.dialect == "postgresql":
        raw = (await conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql, params)).scalar_one()
        _pg_plan(finding, raw)
    else:
        result = await conn.exec_driver_sql("EXPLAIN " + sql, params)
        _mysql_plan(finding, [dict(zip(result.keys(), r, strict=False)) for r in result.all()])


def _sqlite_plan(finding: Finding, lines: list[str]) -> None:
    finding.plan = lines
    for line in lines:  # SEARCH: by an index's key; SCAN: the whole table (even when it walks an index)
        finding.scan = finding.scan or line.startswith(f"SCAN {finding.table}")
        finding.sort = finding.sort or "TEMP B-TREE FOR ORDER BY" in line


def _pg_plan(finding: Finding, raw: Any) -> None:
    import json

    nodes = [(json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        kind = node.get("Node Type", "")
        cond = node.get("Index Cond") or node.get("Filter")
        named = node.get("Index Name") or node.get("Relation Name") or ""
        finding.plan.append(f"{kind} {named}".strip() + (f" ({cond})" if cond else ""))
        finding.scan = finding.scan or (kind == "Seq Scan" and node.get("Relation Name") == finding.table)
        finding.sort = finding.sort or kind in ("Sort", "Incremental Sort")
        nodes.extend(node.get("Plans", []))


def _mysql_plan(finding: Finding, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        finding.plan.append(
            f"{row.get('table')}: type={row.get('type')} key={row.get('key')} "
            f"possible_keys={row.get('possible_keys')} rows={row.get('rows')} {row.get('Extra') or ''}".strip()
        )
        if row.get("table") == finding.table:
            finding.scan = finding.scan or row.get("type") in ("ALL", "index")
            finding.sort = finding.sort or "filesort" in str(row.get("Extra") or "")


async def _pg_invalid(conn: AsyncConnection, name: str) -> bool:
    """Whether an index of this name exists, left INVALID (a CREATE INDEX CONCURRENTLY that failed)."""
    from sqlalchemy import text

    row = await conn.execute(
        text(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND pg_table_is_visible(c.oid)"
        ),
        {"name": name},
    )
    return bool(row.scalar())


async def _time_list(db: Database, listing: Any, app: str) -> float:
    """Milliseconds of ADK's list_sessions reads for `app`: its sessions in ADK's order, and the
    app's state rows, every row fetched (not ADK's building of Session objects from them), each
    read through a cursor a thousand rows at a time: memory holds a page, whatever the tables' size."""
    from sqlalchemy import select

    t = db.tables
    reads = (
        listing,
        select(t.app_states).where(t.app_states.c.app_name == app),
        select(t.user_states).where(t.user_states.c.app_name == app),
    )
    async with db.engine.connect() as conn:  # a transaction of its own, as ADK's read: a cursor needs one
        await conn.exec_driver_sql("SELECT 1")
        started = time.perf_counter()
        for stmt in reads:
            result = await conn.stream(stmt)
            async for _ in result.partitions(1000):
                pass
        took = (time.perf_counter() - started) * 1000
        await conn.rollback()
    return took


async def create_indexes(db: Database, *, dry_run: bool = False) -> IndexReport:
    """Make the index of each query no index serves (an INVALID one made anew); the plans after.

    PostgreSQL builds it CONCURRENTLY (agents keep reading and writing; it cannot run in a
    transaction), MySQL/MariaDB in place without a lock; sqlite has no such build: the
    statement holds the file's write lock while it runs, and an agent's writes wait for it.
    """
    report = await inspect_indexes(db, timed=False)
    todo = [f for f in report.findings if f.missing or f.invalid]
    for finding in todo:
        report.statements += _statements(db, wanted_index(db, finding.table), finding.invalid)
    if db.dialect == "sqlite" and todo:
        report.notes.append("sqlite: the build holds the file's write lock; an agent's writes wait for it")
    report.dry_run = dry_run
    if dry_run or not todo:
        return report
    with db.failures(unchanged=False):
        if db.dialect == "postgresql":
            async with db.reader.connect() as conn:  # autocommit: CONCURRENTLY refuses a transaction
                for sql in report.statements:
                    await conn.exec_driver_sql(sql)
        else:
            async with db.engine.connect() as conn:
                conn = await conn.execution_options(vmem_write=True)
                for sql in report.statements:
                    async with conn.begin():
                        await conn.exec_driver_sql(sql)
    if db.dialect == "sqlite":  # a pooled connection kept planning with the schema it had read
        await db.engine.dispose()
    after = await inspect_indexes(db, timed=False)
    report.findings = after.findings
    report.created = [f.index for f in todo if not _finding(after, f.table).missing]
    return report


def _finding(report: IndexReport, table: str) -> Finding:
    return next(f for f in report.findings if f.table == table)


def _statements(db: Database, index: Index, invalid: bool) -> list[str]:
    """The DDL that makes `index` on this database, without blocking the agents where it can."""
    from sqlalchemy.schema import CreateIndex

    quote = db.engine.dialect.identifier_preparer.quote
    out = [f"DROP INDEX CONCURRENTLY IF EXISTS {quote(index.name or '')}"] if invalid else []
    ddl = str(CreateIndex(index, if_not_exists=db.dialect != "mysql").compile(dialect=db.engine.dialect))
    if db.dialect == "mysql":
        ddl += " ALGORITHM=INPLACE LOCK=NONE"
    return [*out, ddl.strip()]


def describe(report: IndexReport) -> str:
    """One line for doctor: what lacks an index (and whether it matters at this size), ADK's list time."""
    parts = []
    for f in report.findings:
        if f.needed:
            parts.append(
                f"{f.table}: no index for ADK's {f.query} ({f.rows:,} rows, read whole each time): "
                f"`vmem session index --create` adds {f.index}"
            )
        elif f.missing:
            parts.append(
                f"{f.table}: no index for ADK's {f.query}, not needed at {f.rows:,} rows "
                f"(index_rows {tuning().index_rows:,})"
            )
        elif f.invalid:
            parts.append(f"{f.table}: {f.index} is INVALID (a failed build): `vmem session index --create` remakes it")
    if not parts:
        parts.append("ADK's get_session and list_sessions each have their index")
    if report.list_ms is not None:
        parts.append(
            f"ADK's list_sessions query: {report.list_ms:,.0f} ms for {report.list_app} "
            f"({report.list_sessions:,} session{'' if report.list_sessions == 1 else 's'})"
        )
    return "; ".join(parts)


async def check_indexes(settings: VmemSettings) -> Check | None:
    """doctor's check of the indexes ADK's queries need; None when the database cannot say
    (unreachable or without ADK's tables: the reachability check reports that)."""
    try:
        db = Database.from_settings(settings)  # not create: an existing file's reads change nothing in it
        started = time.perf_counter()
        async with db:
            if db.layout is Layout.EMPTY:
                return None
            report = await inspect_indexes(db)
    except Exception:
        return None
    took = (time.perf_counter() - started) * 1000
    status = "warn" if report.needed or any(f.invalid for f in report.findings) else "ok"
    name = f"session indexes ({db.dialect})"
    return Check(
        name, status, describe(report), store=db.display_url, latency_ms=took, facts={"indexes": report.to_json()}
    )
