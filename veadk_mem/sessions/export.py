"""Export framing: JSONL of state records and sessions, read in bounded batches."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from veadk_mem.errors import VmemError
from veadk_mem.jsonio import compact_json_out as dumps
from veadk_mem.sessions.codec import camel_event, event_from_row
from veadk_mem.sessions.read_queries import session_head, session_tail
from veadk_mem.sessions.records import BATCH, Progress, SessionFilter, SessionSummary, noop

if TYPE_CHECKING:
    from veadk_mem.sessions.read_queries import Reads
    from veadk_mem.sessions.statements import Statements


class Export:
    """`export_jsonl`: one short read transaction per batch, nothing held while the caller writes."""

    def __init__(self, db: Statements, reads: Reads) -> None:
        self.db = db
        self.reads = reads

    async def _export_batch(self, batch: Sequence[SessionSummary]) -> list[str]:
        """The JSONL lines of these sessions, read in ONE short transaction, fully, before returning.

        Rows and events come from the same snapshot (a session's events match its row), and
        no lock is held while the caller writes them out: a slow reader (`export | less`)
        never keeps the agent from writing for longer than one batch takes to read.
        """
        keys = [s.key for s in batch]
        tables, warnings = self.db.tables, self.db.warnings
        engine = self.db.engine
        if self.db.dialect == "postgresql":
            engine = engine.execution_options(isolation_level="REPEATABLE READ")
        async with engine.connect() as conn, conn.begin():
            if self.db.dialect == "sqlite":
                await conn.exec_driver_sql("BEGIN")  # one snapshot for both reads (autocommit otherwise)
            fresh = {x.key: x for x in await self.db.summaries(conn, None, keys)}
            rows = (await conn.execute(self.db.batch_events_stmt(keys))).all()
        events: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        broken: set[tuple[str, str, str]] = set()
        for row in rows:
            where = (row.app_name, row.user_id, row.session_id)
            try:
                text = dumps(camel_event(event_from_row(tables, row, warnings)))
            except (ValueError, TypeError, AttributeError) as exc:
                if where not in broken:
                    broken.add(where)
                    self.db.damaged.append("/".join(where))
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
            out.append(session_head(summary) + body + session_tail(summary) + "\n")
        return out

    async def export_jsonl(
        self, flt: SessionFilter | None = None, *, progress: Progress = noop, batch_events: int = 5000
    ) -> AsyncIterator[str]:
        """The export file in text pieces: app_state and user_state records, then one session per line.

        Sessions are read in batches of about `batch_events` events, each in its own short
        transaction (see `_export_batch`); a session larger than that is a batch of its own.
        """
        summaries = await self.reads.list_sessions(flt, oldest_first=True)
        apps = sorted({s.app_name for s in summaries})
        pairs = sorted({(s.app_name, s.user_id) for s in summaries})
        try:
            async with self.db.reader.connect() as conn:
                app_states, user_states = await self.reads.states(conn, apps, pairs)
        except Exception as exc:
            raise self.db.fail(exc) from None
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
            if size < batch_events and len(batch) < BATCH and index + 1 < len(summaries):
                continue
            try:
                lines = await self._export_batch(batch)
            except VmemError:
                raise
            except Exception as exc:
                raise self.db.fail(exc) from None
            yield "".join(lines)
            progress(len(batch))
            batch, size = [], 0
