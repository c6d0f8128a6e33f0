"""A session's state as ADK splits it: app:, user: and session keys, stored in three tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veadk_mem.jsonio import stored_json

if TYPE_CHECKING:
    pass


APP_PREFIX, USER_PREFIX, TEMP_PREFIX = "app:", "user:", "temp:"


def merge_state(app: dict[str, Any], user: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    """A session's full state as ADK shows it: session keys, then app: and user: keys."""
    merged = dict(session)
    for k, v in app.items():
        merged[APP_PREFIX + k] = v
    for k, v in user.items():
        merged[USER_PREFIX + k] = v
    return merged


def decode_json(raw: Any, cache: dict[Any, Any] | None) -> dict[str, Any]:
    """A state column's text as a dict (None -> {}); `cache` shares one decode among equal texts (read only)."""
    if raw is None:
        return {}
    if not isinstance(raw, (str, bytes)):
        if not isinstance(raw, dict):
            raise TypeError(f"a JSON {type(raw).__name__}, not an object")
        return dict(raw)
    if cache is not None:
        found = cache.get(raw)
        if found is None:
            found = cache[raw] = _object(stored_json(raw))
        return found
    return dict(_object(stored_json(raw)))


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"a JSON {type(value).__name__}, not an object")
    return value


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Merged state -> (app, user, session) parts; temp: keys are dropped, as ADK never stores them."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for k, v in state.items():
        if k.startswith(APP_PREFIX):
            app[k[len(APP_PREFIX) :]] = v
        elif k.startswith(USER_PREFIX):
            user[k[len(USER_PREFIX) :]] = v
        elif not k.startswith(TEMP_PREFIX):
            session[k] = v
    return app, user, session


def state_scope(key: str) -> str:
    """Where a merged-state key lives: "app", "user" or "session" (the scope `split_state` gives it)."""
    if key.startswith(APP_PREFIX):
        return "app"
    if key.startswith(USER_PREFIX):
        return "user"
    return "session"
