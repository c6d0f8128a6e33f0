"""The session summary rows and the delete plan that `session list/delete`, erasure and browse show."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veadk_mem.cli.columns import Column
from veadk_mem.cli.render import counted
from veadk_mem.cli.terminal import terminal_safe

if TYPE_CHECKING:
    from veadk_mem.cli.state import AppState
    from veadk_mem.sessions.store import SessionSummary

SUMMARY_COLUMNS = [
    Column.id("app", "app_name"),
    Column.id("user", "user_id"),
    Column.id("session id", "id"),
    Column("events", "event_count", justify="right", drop=1),
    Column("state keys", "state_keys", justify="right", drop=3),
    Column.time("created", "create_time", drop=2),
    Column.time("updated", "update_time"),
]  # drop: what a terminal too narrow hides first (state keys, then created, then events)


def _safe(value: Any) -> Any:
    """A table cell with terminal escape sequences neutralised (JSON output needs none of this)."""

    return terminal_safe(value)


def _summary_row(s: SessionSummary) -> dict[str, Any]:
    return {
        "app_name": _safe(s.app_name),
        "user_id": _safe(s.user_id),
        "id": _safe(s.id),
        "event_count": s.event_count,
        "compaction_count": s.compaction_count,  # None: unknown (a v0 layout's pickled actions)
        "state_keys": len(s.state),
        "create_time": s.create_time,
        "update_time": s.update_time,
    }


def show_plan(state: AppState, plan: Any, *, to_stderr: bool = False) -> None:
    """The sessions a delete takes (at most 50 listed), with their events and the state rows left without one."""
    rows = [_summary_row(s) for s in plan.sessions[:50]]
    state.render.table(rows, SUMMARY_COLUMNS, title="to delete", empty="no sessions match", to_stderr=to_stderr)
    if len(plan.sessions) > 50:
        state.render.message(f"... and {len(plan.sessions) - 50} more")
    if plan.sessions:
        state.render.message(f"{counted(len(plan.sessions), 'session')}, {counted(plan.events, 'event')}")
    for app_name in plan.app_states:
        state.render.message(f"app state of {app_name} (no session left)")
    for app_name, user in plan.user_states:
        state.render.message(f"user state of {app_name}/{user} (no session left)")
