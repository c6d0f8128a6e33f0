"""`vmem forget`: a user's sessions and long-term memories, gone in one command.

ADK's `delete_session` leaves the copies `add_session_to_memory` made; a
right-to-be-forgotten request needs both stores. The plan is computed first (it is
the dry run), then carried out: memories first, then sessions, so a failure part-way
leaves the sessions from which the memories could be rebuilt rather than the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import NotSupported, VmemError
from veadk_mem.sessions.delete_flow import undecoded

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.base import MemoryRecord
    from veadk_mem.ltm.facade import LongTermMemory


@dataclass
class ForgetPlan:
    """What forgetting a user removes (or removed) from each store."""

    user_id: str
    app_name: str | None
    session_db: str = ""
    sessions: list[Any] = field(default_factory=list)
    session_events: int = 0
    orphan_events: int = 0  # the user's event rows without a session row (a killed import's staging)
    user_states: list[tuple[str, str]] = field(default_factory=list)
    app_states: list[str] = field(default_factory=list)
    memories: dict[str, list[MemoryRecord]] = field(default_factory=dict)
    backend: str = ""
    done: bool = False
    deleted_sessions: int = 0
    deleted_memories: int = 0

    @property
    def total(self) -> int:
        return (
            len(self.sessions)
            + len(self.user_states)
            + sum(len(v) for v in self.memories.values())
            + self.orphan_events
        )

    def describe(self) -> str:
        memories = sum(len(v) for v in self.memories.values())
        return f"{len(self.sessions)} sessions from {self.session_db} and {memories} memories from {self.backend}"

    def rows(self) -> list[dict[str, Any]]:
        """One row per place something is (or was) stored."""
        rows: list[dict[str, Any]] = []
        by_app: dict[str, int] = {}
        for summary in self.sessions:
            by_app[summary.app_name] = by_app.get(summary.app_name, 0) + 1
        for app, count in sorted(by_app.items()):
            rows.append({"store": "sessions", "where": f"{self.session_db} app {app}", "items": count})
        if self.orphan_events:
            rows.append(
                {"store": "event rows without a session", "where": self.session_db, "items": self.orphan_events}
            )
        for app, _user in self.user_states:
            rows.append({"store": "user state", "where": f"{self.session_db} app {app}", "items": 1})
        if not self.sessions and self.session_db.startswith("none: "):
            rows.append({"store": "sessions", "where": self.session_db, "items": 0})
        for app in self.app_states:
            rows.append({"store": "app state (no session left)", "where": f"{self.session_db} app {app}", "items": 1})
        for index, records in sorted(self.memories.items()):
            if records:
                rows.append(
                    {"store": "long-term memory", "where": f"{self.backend} index {index}", "items": len(records)}
                )
        return rows

    def as_dict(self, dry_run: bool) -> dict[str, Any]:
        return {
            "dry_run": dry_run,
            "user_id": self.user_id,
            "app_name": self.app_name,
            "sessions": {
                "database": self.session_db,
                "sessions": [{"app_name": s.app_name, "user_id": s.user_id, "id": s.id} for s in self.sessions],
                "events": self.session_events,
                "orphan_events": self.orphan_events,
                "user_states": [{"app_name": a, "user_id": u} for a, u in self.user_states],
                "app_states": self.app_states,
            },
            "memories": {
                "backend": self.backend,
                "indexes": {index: [r.id for r in records] for index, records in self.memories.items() if records},
            },
            "deleted": {"sessions": self.deleted_sessions, "memories": self.deleted_memories} if self.done else None,
        }


def _filter(user_id: str, app_name: str | None) -> Any:
    from veadk_mem.sessions.store import SessionFilter

    return SessionFilter(app=app_name, user=user_id)


def _session_store(settings: VmemSettings, plan: ForgetPlan) -> Any:
    """The session store, or None (with the reason in the plan) when no database holds sessions.

    VeADK's `local` short-term memory lives in the agent's process, and a sqlite file that
    does not exist holds nothing: either way the long-term memories must still go.
    """
    from veadk_mem.sessions.store import SessionStore
    from veadk_mem.sessions.url import sqlite_file

    try:
        store = SessionStore.from_settings(settings)
    except NotSupported:
        plan.session_db = "none: short_term_memory.backend = local keeps sessions in the agent's process"
        return None
    plan.session_db = store.db.display_url
    path = sqlite_file(store.db.url)
    if path is not None and not Path(path).exists():
        plan.session_db = f"none: {store.db.display_url} does not exist"
        return None
    return store


async def plan_forget(
    settings: VmemSettings, ltm: LongTermMemory, *, user_id: str, app_name: str | None = None
) -> ForgetPlan:
    """Everything stored for the user, in the session database and in long-term memory."""

    plan = ForgetPlan(user_id=user_id, app_name=app_name, backend=ltm.backend_name)
    store = _session_store(settings, plan)
    if store is not None:
        async with store:
            flt = _filter(user_id, app_name)
            listed = await store.list_sessions(flt, oldest_first=True)
            listed += await undecoded(store, flt, listed)  # a corrupt state is the user's all the same
            report = await store.delete_sessions(listed, purge_state=True, dry_run=True)
            plan.orphan_events = sum((await store.rows.orphan_events(app=app_name, user=user_id)).values())
        plan.sessions = list(report.sessions)
        plan.session_events = report.events
        plan.user_states = list(report.user_states)
        plan.app_states = list(report.app_states)
    plan.memories = await ltm.forget_plan(user_id=user_id, app_name=app_name)
    return plan


async def forget_user(settings: VmemSettings, ltm: LongTermMemory, plan: ForgetPlan) -> ForgetPlan:
    """Carry out a plan: the memories it listed, then the sessions it listed."""
    from veadk_mem.sessions.store import SessionStore

    try:
        for index, records in plan.memories.items():
            plan.deleted_memories += await ltm.delete(
                app_name=None, user_id=plan.user_id, records=records, index=index, everything=True
            )
        await ltm.close()
        if plan.sessions or plan.orphan_events:
            store = SessionStore.from_settings(settings)
            async with store:
                report = await store.delete_sessions(plan.sessions, purge_state=True) if plan.sessions else None
                # a killed import's staged rows of the user: read by no one, but the user's chat all the same
                plan.orphan_events = await store.rows.delete_orphans(app=plan.app_name, user=plan.user_id)
            plan.deleted_sessions = len(report.sessions) if report is not None else 0
    except VmemError as exc:  # the history records what went before the failure (ops/history.py)
        exc.committed = {**(exc.committed or {}), "memories": plan.deleted_memories}
        raise
    plan.done = True
    return plan
