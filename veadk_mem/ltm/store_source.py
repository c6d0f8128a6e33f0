"""Sessions for `ltm save --from-store`, read straight from the session database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

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
) -> AsyncIterator[Item]:
    """One session (APP USER ID; NotFound when missing) or every session matching app/user/since, streamed."""
    from veadk_mem.sessions.store import SessionFilter, SessionStore

    store = SessionStore.from_settings(settings)
    async with store:
        if ids:
            app, user, session_id = ids
            yield f"{app}/{user}/{session_id}", await store.get_session(app, user, session_id)
            return
        since_epoch = None
        if since:
            from veadk_mem.sessions.timespec import parse_time

            since_epoch = parse_time(since, "--since")
        async for session in store.iter_sessions(SessionFilter(app=app_name, user=user_id, since=since_epoch)):
            yield f"{session.app_name}/{session.user_id}/{session.id}", session
