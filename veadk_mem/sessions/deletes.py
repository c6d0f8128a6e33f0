"""Delete planning and execution: one transaction, re-checked on locked rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from veadk_mem.errors import VmemError
from veadk_mem.sessions.layout import (
    to_epoch,
)
from veadk_mem.sessions.reads import Reads
from veadk_mem.sessions.records import _BATCH, DeleteReport, SessionFilter, SessionKey, SessionSummary

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


class Deletes(Reads):
    """`delete_sessions` and the state rows a delete leaves orphaned."""

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
