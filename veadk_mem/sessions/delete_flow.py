"""`session delete` as one flow: find the sessions, plan the delete, confirm, delete with a re-check.

The CLI parses the request and renders; the steps and their order live here, so another
front end (a script, a test) deletes exactly as `vmem session delete` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from veadk_mem.errors import NotFound
from veadk_mem.sessions.records import SessionKey

if TYPE_CHECKING:
    from veadk_mem.sessions.records import DeleteReport, SessionFilter, SessionSummary
    from veadk_mem.sessions.store import SessionStore


@dataclass
class PlannedDelete:
    """What a delete found: the plan to show (`report`), the sessions and orphan rows it will remove, and
    whether each session is re-checked for a resume when it is deleted (a filter with --older-than)."""

    report: DeleteReport
    chosen: list[SessionSummary]
    orphans: dict[SessionKey, int]
    purge_state: bool
    recheck: bool


async def plan_delete(
    store: SessionStore,
    *,
    keys: list[SessionKey] | None = None,
    flt: SessionFilter | None = None,
    purge_state: bool = False,
) -> PlannedDelete:
    """The sessions named by `keys` (those that exist) or matching `flt` (oldest first), and what
    deleting them removes: the first half of `delete_flow`, for a job that acts in between (erasure)."""
    if (keys is None) == (flt is None):
        raise ValueError("delete_flow: give keys or a filter")
    if keys is not None:
        orphans = await store.rows.orphan_events(keys=keys)
        # a key with such rows may have a session row too (staged rows of an import writing over it)
        with_row = await store.rows.stored_sessions(keys=list(orphans)) if orphans else []
        rowed = {(s.app_name, s.user_id, s.id) for s in with_row}
        named = [k for k in keys if k not in orphans or (k.app_name, k.user_id, k.id) in rowed]
        try:
            chosen = await store.find_sessions(named) if named else []
        except NotFound:  # missing, or stored with a state the reads cannot decode: deleted all the same
            chosen = await store.rows.stored_sessions(keys=named)
            if len(chosen) < len(named):
                raise
    else:
        orphans = await _filter_orphans(store, flt)
        chosen = await store.list_sessions(flt, oldest_first=True)
        chosen += await undecoded(store, flt, chosen)
    plan = await store.delete_sessions(chosen, purge_state=purge_state, dry_run=True)
    plan.orphan_events = sum(orphans.values())
    recheck = flt is not None and flt.older_than is not None
    return PlannedDelete(plan, list(chosen), orphans, purge_state, recheck)


async def carry_out(store: SessionStore, planned: PlannedDelete) -> DeleteReport:
    """Delete what `plan_delete` found, in `session delete`'s batches (re-checked when it says so)."""
    chosen, plan = planned.chosen, planned.report
    purge = planned.purge_state
    report = await store.delete_sessions(chosen, purge_state=purge, recheck=planned.recheck) if chosen else plan
    report.dry_run = False
    if planned.orphans:
        report.orphan_events = await store.rows.delete_orphans(keys=list(planned.orphans))
    return report


async def delete_flow(
    store: SessionStore,
    *,
    keys: list[SessionKey] | None = None,
    flt: SessionFilter | None = None,
    purge_state: bool = False,
    dry_run: bool = False,
    confirm: Callable[[DeleteReport], None] | None = None,
) -> DeleteReport:
    """Delete the sessions named by `keys` (those that exist) or matching `flt` (oldest first).

    Plans first (sessions, events, state rows left without a session); a dry run, or nothing
    to delete, returns the plan. `confirm(plan)` is asked before anything is deleted and
    raises to stop. With `flt.older_than`, each session is re-checked in the deleting
    transaction: one resumed while the question waited is kept (in the report's `skipped`).

    Event rows without a session row under the named keys (or of the filter's app / user, when
    it has no time bound) go too, whatever their content (`report.orphan_events`): a killed
    import's staging, which ADK would hand to a session later created under the same key. A
    key that has neither a session nor such rows is not found (exit 3), as before.
    """
    planned = await plan_delete(store, keys=keys, flt=flt, purge_state=purge_state)
    plan = planned.report
    if dry_run or not (planned.chosen or planned.orphans):
        plan.dry_run = dry_run
        return plan
    if confirm is not None:
        confirm(plan)
    return await carry_out(store, planned)


async def _filter_orphans(store: SessionStore, flt: SessionFilter | None) -> dict[SessionKey, int]:
    """The event rows without a session of the filter's app / user; none for a filter with a time bound
    (such rows have no session time to compare) or naming neither."""
    if flt is None or any(v is not None for v in (flt.since, flt.until, flt.older_than)):
        return {}
    if flt.app is None and flt.user is None:
        return {}
    return await store.rows.orphan_events(app=flt.app, user=flt.user)


async def undecoded(
    store: SessionStore, flt: SessionFilter | None, listed: list[SessionSummary]
) -> list[SessionSummary]:
    """The sessions matching `flt` that `listed` (the reads) left out: stored with a state they cannot
    decode. By key as the reads noted them (a time bound is theirs: `delete --older-than` left such a
    session, exit 0, issue 41 item 4), and for a filter of an app / user without one, every such row."""
    seen = {s.key for s in listed}
    notes = getattr(listed, "notes", None)
    keys = [SessionKey(*k) for k in (notes.damaged_keys if notes is not None else [])]
    found = await store.rows.stored_sessions(keys=[k for k in keys if k not in seen]) if keys else []
    seen |= {s.key for s in found}
    if flt is None or any(v is not None for v in (flt.since, flt.until, flt.older_than)):
        return found
    if flt.app is None and flt.user is None:
        return found
    return found + [s for s in await store.rows.stored_sessions(app=flt.app, user=flt.user) if s.key not in seen]
