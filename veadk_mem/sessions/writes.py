"""Import writes: table creation, the target's limits, collisions, batched upserts."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import VmemError
from veadk_mem.sessions.codec import event_row
from veadk_mem.sessions.dberrors import _concurrent_ddl, _retryable
from veadk_mem.sessions.importer import ImportReport
from veadk_mem.sessions.layout import (
    LATEST_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    Layout,
    build_tables,
    stored_time,
    to_epoch,
)
from veadk_mem.sessions.reads import Reads
from veadk_mem.sessions.records import _BATCH, Progress, SessionKey, _noop
from veadk_mem.sessions.state import split_state

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from veadk_mem import events as ev
    from veadk_mem.sessions.importer import FileKey, ImportReport
    from veadk_mem.sessions.limits import Limits


class Writes(Reads):
    """`import_records` and the checks `importer.import_file` runs before it."""

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
