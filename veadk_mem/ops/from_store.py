"""Sessions for `ltm save --from-store`, read straight from the session database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from veadk_mem.sessions.timespec import parse_time

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.replay import Item


async def store_sessions(
    settings: VmemSettings,
    *,
    ids: list[str],
    app_name: str | None = None,
    user_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> AsyncIterator[Item]:
    """One session (APP USER ID; NotFound when missing) or every session matching app/user/since/until, streamed."""
    from veadk_mem.sessions.store import SessionFilter, SessionStore

    store = SessionStore.from_settings(settings)
    async with store:
        if ids:
            app, user, session_id = ids
            yield f"{app}/{user}/{session_id}", await store.get_session(app, user, session_id)
            return

        flt = SessionFilter(
            app=app_name,
            user=user_id,
            since=parse_time(since, "--since") if since else None,
            until=parse_time(until, "--until") if until else None,
        )
        async for session in store.iter_sessions(flt):
            yield f"{session.app_name}/{session.user_id}/{session.id}", session


async def count_store_sessions(
    settings: VmemSettings,
    *,
    app_name: str | None = None,
    user_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> tuple[int, int]:
    """(sessions matching, sessions of the app at all): the total a progress bar shows, and
    whether the app is in the database (an unknown app is not found, not an empty window)."""
    from veadk_mem.sessions.store import SessionFilter, SessionStore

    flt = SessionFilter(
        app=app_name,
        user=user_id,
        since=parse_time(since, "--since") if since else None,
        until=parse_time(until, "--until") if until else None,
    )
    async with SessionStore.from_settings(settings) as store:
        matching = (await store.list_sessions(flt, count_only=True)).total
        of_app = matching or (await store.list_sessions(SessionFilter(app=app_name), count_only=True)).total
    return matching, of_app
