"""One batch of an import written in one transaction: the stored keys read (and locked), the
app and user state merged into their rows, the sessions written over deleted, the new rows
inserted. Also the row-level helpers the big-session writers share."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from veadk_mem.sessions.codec import event_row
from veadk_mem.sessions.layout import Layout, stored_time, to_epoch
from veadk_mem.sessions.preflight import newer
from veadk_mem.sessions.records import BATCH, ImportReport
from veadk_mem.sessions.rows import Head, Split, head_of
from veadk_mem.sessions.state_scopes import split_state

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem.sessions.bigline import BigSession
    from veadk_mem.sessions.engine import Database
    from veadk_mem.sessions.rawsession import RawEvent, RawSession

Key = tuple[str, str, str]  # (app, user, session id)
# Keys in one MySQL/MariaDB locking read: under 1,000 values (three a key), which MariaDB would
# turn into a semi-join (in_predicate_conversion_threshold) whose scan of a small sessions table
# kept every row it passed locked to the commit, an agent's own session included.
LOCKING_IN_KEYS = 300


@dataclass(slots=True)
class Batch:
    """Records for one transaction: session heads and state records in file order, and the sessions."""

    records: list[Head | dict[str, Any]]
    sessions: list[Prepared]  # in order
    big: BigSession | None = None  # or, alone, a session of a long line, streamed as it is written

    @property
    def heads(self) -> list[Head]:
        return [r for r in self.records if not isinstance(r, dict)]


class Prepared(NamedTuple):
    """A session as the writer takes it (`Upsert.prepared`): its head, split state and event rows."""

    head: Head
    split: Split
    events: list[tuple[Any, ...]]
    dropped: dict[str, set[tuple[str, ...]]]  # fields a v0 table has no column for -> the events that had them


@dataclass(slots=True)
class StateParts:
    """The app and user state a transaction merges into their rows, gathered in file order."""

    apps: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    users: dict[tuple[str, str], dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))


Done = Callable[[ImportReport], None]  # told a transaction's counts once it committed


class Upsert:
    """Writes one batch in one transaction, and the rows and state of any session written."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # fields an old v0 table has no column for -> the events that had them, for one warning each
        self.dropped: dict[str, set[tuple[str, ...]]] = {}

    async def write_batch(self, batch: Batch, *, force: bool, done: Done | None = None) -> ImportReport:
        """Write `batch` in ONE transaction and return its counts; `done` is told them once it committed.

        A handful of statements per batch, not per session: one SELECT of the stored keys,
        one read and one write of the state rows touched, DELETEs of the sessions written
        over, and multi-row INSERTs of sessions and events.
        """
        pending = ImportReport()
        async with self.db.engine.connect() as conn:
            conn = await conn.execution_options(vmem_write=True)
            async with conn.begin():
                await self._write_records(conn, batch, pending, force=force)
            if done is not None:
                done(pending)
        return pending

    async def _write_records(self, conn: AsyncConnection, batch: Batch, pending: ImportReport, *, force: bool) -> None:
        heads = batch.heads
        # the last record of a key wins, as when they were written one after the other
        sessions: dict[Key, int] = {h.key: i for i, h in enumerate(heads)}
        stored = await self.stored_times(conn, list(sessions))
        if not force:
            for key, i in list(sessions.items()):
                if key in stored and newer(stored[key], heads[i].update_time):
                    pending.skipped.append("/".join(key))
                    del sessions[key]  # an agent wrote to it after the file was made: keep its events
        kept = [sessions.get(h.key) == i for i, h in enumerate(heads)]
        parts = _state_parts(batch, kept, pending)
        await self.merge_states(conn, parts.apps, parts.users)
        existing = [k for k in sessions if k in stored]
        await self.delete_stored(conn, existing)
        pending.sessions += len(sessions)
        pending.events += sum(heads[i].events for i in sessions.values())
        pending.replaced += len(existing)
        await self._insert_sessions(conn, batch, heads, sessions)

    async def _insert_sessions(
        self, conn: AsyncConnection, batch: Batch, heads: list[Head], sessions: dict[Key, int]
    ) -> None:
        """Insert the sessions of `batch` that `sessions` keeps, and their events."""

        t = self.db.tables
        session_rows: list[dict[str, Any]] = []
        event_rows: list[tuple[Any, ...]] = []
        for (app, user, sid), i in sessions.items():
            head = heads[i]
            session_rows.append(
                {
                    "app_name": app,
                    "user_id": user,
                    "id": sid,
                    "state": batch.sessions[i].split.own,
                    "create_time": stored_time(t, head.create_time),
                    "update_time": stored_time(t, head.update_time),
                }
            )
            event_rows += batch.sessions[i].events
            for name, keys in batch.sessions[i].dropped.items():
                self.dropped.setdefault(name, set()).update(keys)
        for i in range(0, len(session_rows), BATCH):
            await self._insert_session_rows(conn, session_rows[i : i + BATCH])
        await self.insert_event_rows(conn, event_rows)

    async def delete_stored(self, conn: AsyncConnection, existing: list[tuple[str, str, str]]) -> None:
        """Delete these stored sessions and their events (an import writes them over)."""
        from sqlalchemy import and_, delete, or_

        t = self.db.tables
        s, e = t.sessions.c, t.events.c
        for i in range(0, len(existing), BATCH):
            groups: dict[tuple[str, str], list[str]] = defaultdict(list)
            for app, user, sid in existing[i : i + BATCH]:
                groups[(app, user)].append(sid)
            await conn.execute(
                delete(t.events).where(
                    or_(
                        *[
                            and_(e.app_name == a, e.user_id == u, e.session_id.in_(ids))
                            for (a, u), ids in groups.items()
                        ]
                    )
                )
            )
            await conn.execute(
                delete(t.sessions).where(
                    or_(
                        *[
                            and_(self.db.key_eq(s.app_name, a), self.db.key_eq(s.user_id, u), s.id.in_(ids))
                            for (a, u), ids in groups.items()
                        ]
                    )
                )
            )

    def event_rows(
        self,
        app: str,
        user: str,
        sid: str,
        events: list[RawEvent],
        dropped: dict[str, set[tuple[str, ...]]] | None = None,
    ) -> list[tuple[Any, ...]]:
        """The events' rows as `insert_event_rows` takes them (the driver's values, by position); notes the
        fields a v0 table drops in `dropped` (default: `self.dropped`). Built where the input is read, in its thread."""
        noted = self.dropped if dropped is None else dropped
        t = self.db.tables
        if not t.missing:
            rows = [event_row(t, app, user, sid, event) for event in events]
        else:
            rows = []
            counts: dict[str, int] = {}
            for event in events:
                rows.append(event_row(t, app, user, sid, event, counts))
                for name in counts:
                    noted.setdefault(name, set()).add((app, user, sid, event.id))
                counts.clear()
        if t.layout is Layout.V0 and self.db.dialect == "mysql":
            for row in rows:  # see `_insert`
                row["actions_hex"] = row.pop("actions").hex()
        return self._insert("events").params(rows)

    async def insert_event_rows(self, conn: AsyncConnection, event_rows: list[tuple[Any, ...]]) -> None:
        """Insert rows `event_rows` built, 1,000 to a statement."""
        sql = self._insert("events").sql
        for i in range(0, len(event_rows), BATCH * 2):
            await conn.exec_driver_sql(sql, event_rows[i : i + BATCH * 2])

    async def _insert_session_rows(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        """Insert `rows` (dicts of every column) into `sessions`."""
        if rows:
            await conn.exec_driver_sql(self._insert("sessions").sql, self._insert("sessions").params(rows))

    def _insert(self, table: str) -> InsertShape:
        """The INSERT of every column of `sessions` or `events`, compiled once per database."""
        shape: InsertShape | None = self.db.stmts.get(("insert", table))
        if shape is None:
            from sqlalchemy import insert

            stmt = insert(getattr(self.db.tables, table))
            if table == "events" and self.db.tables.layout is Layout.V0 and self.db.dialect == "mysql":
                # aiomysql cannot bind bytes with PyMySQL 1.2: send the pickle as hex, UNHEX() it in SQL
                from sqlalchemy import bindparam, func

                stmt = stmt.values(actions=func.unhex(bindparam("actions_hex")))
            shape = self.db.stmts[("insert", table)] = InsertShape.make(stmt, self.db.engine.dialect)
        return shape

    def prepared(self, session: RawSession, now: float) -> Prepared:
        """`session` as the writer takes it, its event rows built (in the reading thread, as it is read: the
        batch then holds rows, not every event's decoded data)."""
        dropped: dict[str, set[tuple[str, ...]]] = {}  # noted once the session is written (`_insert_sessions`)
        rows = self.event_rows(session.app_name, session.user_id, session.id, session.events, dropped)
        return Prepared(head_of(session, now), Split(*split_state(session.state)), rows, dropped)

    def prepare(self, records: list[Prepared | dict[str, Any]]) -> Batch:
        """`records` (sessions `prepared`, state records) as a batch: heads and state records in file order."""
        return Batch(
            [r if isinstance(r, dict) else r.head for r in records], [r for r in records if not isinstance(r, dict)]
        )

    async def stored_times(self, conn: AsyncConnection, keys: list[tuple[str, str, str]]) -> dict[Any, float]:
        """The stored update time of each of `keys` that exists (rows locked on PostgreSQL/MySQL).

        One statement, built once, which the primary key index answers: the keys as three
        arrays joined through unnest() on PostgreSQL (it plans a long IN list of row values
        as one slow probe per row), as one JSON array through json_each() on sqlite (one
        call into aiosqlite's thread per batch: each call waits for the GIL behind the
        thread reading the next batch), and `(app_name, user_id, id) IN (...)` lists of
        `LOCKING_IN_KEYS` on MySQL.
        """
        from sqlalchemy import bindparam, func, select, tuple_

        stmt = self.db.stmts.get("stored_times")
        if stmt is None:
            s = self.db.tables.sessions.c
            if self.db.dialect == "postgresql":
                from sqlalchemy import Text
                from sqlalchemy.dialects.postgresql import ARRAY

                arrays = [bindparam(n, type_=ARRAY(Text)) for n in ("k_apps", "k_users", "k_ids")]
                k = func.unnest(*arrays).table_valued("a", "u", "i").render_derived()
                stmt = (
                    select(s.app_name, s.user_id, s.id, s.update_time)
                    .join_from(
                        self.db.tables.sessions, k, (s.app_name == k.c.a) & (s.user_id == k.c.u) & (s.id == k.c.i)
                    )
                    .with_for_update(of=self.db.tables.sessions)
                )
            elif self.db.dialect == "sqlite":
                j = func.json_each(bindparam("k_json")).table_valued("value")
                stmt = select(s.app_name, s.user_id, s.id, s.update_time).join_from(
                    self.db.tables.sessions,
                    j,
                    (s.app_name == func.json_extract(j.c.value, "$[0]"))
                    & (s.user_id == func.json_extract(j.c.value, "$[1]"))
                    & (s.id == func.json_extract(j.c.value, "$[2]")),
                )
            else:
                stmt = self.db.for_update(
                    select(s.app_name, s.user_id, s.id, s.update_time).where(
                        tuple_(s.app_name, s.user_id, s.id).in_(bindparam("k_keys", expanding=True))
                    ),
                    self.db.tables.sessions,
                )
            self.db.stmts["stored_times"] = stmt
        wanted = set(keys)
        found: dict[Any, float] = {}
        step = max(len(keys), 1) if self.db.dialect in ("postgresql", "sqlite") else LOCKING_IN_KEYS
        for i in range(0, len(keys), step):
            params = self.db.key_params(keys[i : i + step])  # the bound names `key_match` uses too
            for app, user, sid, stamp in await conn.execute(stmt, params):
                if (app, user, sid) in wanted:  # exact: MySQL's collation matches more
                    found[(app, user, sid)] = to_epoch(stamp)
        return found

    async def merge_states(
        self,
        conn: AsyncConnection,
        app_parts: dict[str, dict[str, Any]],
        user_parts: dict[tuple[str, str], dict[str, Any]],
    ) -> None:
        """Merge app and user state into their rows: create missing rows, update changed ones, skip the rest."""
        from sqlalchemy import bindparam, insert, select, update

        t = self.db.tables
        stamp = stored_time(t, time.time())
        a, u = t.app_states, t.user_states
        apps = sorted(app_parts)
        current_app: dict[str, dict[str, Any]] = {}
        current_user: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(0, len(apps), BATCH):
            stmt = self.db.for_update(select(a.c.app_name, a.c.state).where(a.c.app_name.in_(apps[i : i + BATCH])), a)
            for name, state in await conn.execute(stmt):
                if name in app_parts:
                    current_app[name] = dict(state or {})
        pairs = sorted(user_parts)
        for i in range(0, len(pairs), BATCH):
            chunk = pairs[i : i + BATCH]
            by_user = select(u.c.app_name, u.c.user_id, u.c.state).where(
                u.c.app_name.in_(sorted({p[0] for p in chunk})), u.c.user_id.in_(sorted({p[1] for p in chunk}))
            )
            by_user = self.db.for_update(by_user, u)
            for row in await conn.execute(by_user):
                if (row.app_name, row.user_id) in user_parts:
                    current_user[(row.app_name, row.user_id)] = dict(row.state or {})
        new_apps = [
            {"app_name": name, "state": dict(part), "update_time": stamp}
            for name, part in app_parts.items()
            if name not in current_app
        ]
        changed_apps = [
            {"b_app": name, "state": {**current_app[name], **part}, "update_time": stamp}
            for name, part in app_parts.items()
            if name in current_app and {**current_app[name], **part} != current_app[name]
        ]
        new_users = [
            {"app_name": app, "user_id": user, "state": dict(part), "update_time": stamp}
            for (app, user), part in user_parts.items()
            if (app, user) not in current_user
        ]
        changed_users = [
            {"b_app": app, "b_user": user, "state": {**current_user[(app, user)], **part}, "update_time": stamp}
            for (app, user), part in user_parts.items()
            if (app, user) in current_user and {**current_user[(app, user)], **part} != current_user[(app, user)]
        ]
        if new_apps:
            await conn.execute(insert(a), new_apps)
        if changed_apps:
            await conn.execute(update(a).where(self.db.key_eq(a.c.app_name, bindparam("b_app"))), changed_apps)
        if new_users:
            await conn.execute(insert(u), new_users)
        if changed_users:
            await conn.execute(
                update(u).where(
                    self.db.key_eq(u.c.app_name, bindparam("b_app")), self.db.key_eq(u.c.user_id, bindparam("b_user"))
                ),
                changed_users,
            )

    async def insert_session_row(
        self,
        conn: AsyncConnection,
        key: tuple[str, str, str],
        own: dict[str, Any],
        created: float,
        updated: float,
    ) -> None:
        """The one row in `sessions` of a session written on its own (`_write_big`, `_write_big_staged`)."""

        t = self.db.tables
        session_row = {"app_name": key[0], "user_id": key[1], "id": key[2], "state": own}
        session_row |= {"create_time": stored_time(t, created), "update_time": stored_time(t, updated)}
        await self._insert_session_rows(conn, [session_row])


@dataclass(frozen=True, slots=True)
class InsertShape:
    """A multi-row INSERT compiled once, run as `conn.execute(stmt, rows)` would run it, without that
    call's per-row work: the same SQL, and the same values, each through its column type's own bind
    processor; but taken a column at a time rather than through a parameter dict built per row.

    `sql` binds by position (as every driver vmem runs on does): `keys` names the row key of each
    value and `processors` its bind processor.
    """

    sql: str
    keys: tuple[str, ...]
    processors: tuple[Callable[[Any], Any] | None, ...]

    @classmethod
    def make(cls, stmt: Any, dialect: Any) -> InsertShape:
        """`stmt` (an INSERT binding every column of its table) compiled for `dialect`."""
        compiled = stmt.compile(dialect=dialect, column_keys=[column.key for column in stmt.table.columns])
        names = tuple(compiled.positiontup or ())
        if len(names) != len(compiled.binds):  # every driver vmem runs on binds by position
            raise RuntimeError(f"{dialect.driver}: no positional binds for {compiled.string}")
        binds = [compiled.binds[name] for name in names]
        processors = tuple(bind.type.dialect_impl(dialect).bind_processor(dialect) for bind in binds)
        return cls(compiled.string, tuple(bind.key for bind in binds), processors)

    def params(self, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """The driver's values of `rows` (dicts holding every key), by position, a tuple a row."""
        columns: list[list[Any]] = []
        for key, process in zip(self.keys, self.processors, strict=True):
            values = [row[key] for row in rows]
            columns.append(values if process is None else [process(v) for v in values])
        return list(zip(*columns, strict=True))


def _state_parts(batch: Batch, kept: list[bool], pending: ImportReport) -> StateParts:
    """The app and user state of the kept sessions and of the state records, merged in file order
    (as when records were written one by one); the state records counted in `pending`."""
    parts = StateParts()
    index = 0
    for record in batch.records:
        if isinstance(record, dict):
            if record.get("kind") == "app_state":
                parts.apps[record["appName"]].update(record["state"])
                pending.app_states += 1
            else:
                parts.users[(record["appName"], record["userId"])].update(record["state"])
                pending.user_states += 1
            continue
        split = batch.sessions[index].split
        index += 1
        if kept[index - 1]:  # else skipped, or an earlier copy of a key written again later in the batch
            parts.apps[record.app_name].update(split.app)
            parts.users[(record.app_name, record.user_id)].update(split.user)
    return parts
