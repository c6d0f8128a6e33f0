"""`session delete` as one flow: find the sessions, plan the delete, confirm, delete with a re-check.

The CLI parses the request and renders; the steps and their order live here, so another
front end (a script, a test) deletes exactly as `vmem session delete` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veadk_mem.sessions.records import DeleteReport, SessionFilter, SessionKey
    from veadk_mem.sessions.store import SessionStore


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
    """
    if (keys is None) == (flt is None):
        raise ValueError("delete_flow: give keys or a filter")
    chosen = await store.find_sessions(keys) if keys is not None else await store.list_sessions(flt, oldest_first=True)
    plan = await store.delete_sessions(chosen, purge_state=purge_state, dry_run=True)
    if not chosen:
        plan.dry_run = dry_run
        return plan
    if dry_run:
        return plan
    if confirm is not None:
        confirm(plan)
    recheck = flt is not None and flt.older_than is not None
    return await store.delete_sessions(chosen, purge_state=purge_state, recheck=recheck)
