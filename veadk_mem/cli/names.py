"""Names a shell completes from the configured session database: apps, users and session ids.

Each is a Click `shell_complete` callback on the parameter that takes it (the APP, USER and
SESSION_ID arguments of `session get/watch/delete`, `--app` and `--user` of the session
commands and `browse`); the generated scripts ask Click's completion protocol for them
(`_VMEM_COMPLETE=complete_bash`). A name is data: the scripts insert it quoted, never
evaluated. One bounded query (NAME_LIMIT names by prefix, on ADK's own key columns) within
NAME_TIMEOUT seconds; a database that cannot be reached, a missing sqlite file (never
created) or a broken config completes nothing, silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from veadk_mem.cli.typer_internals import set_completer

NAME_LIMIT = 200  # names offered at most
NAME_TIMEOUT = 1.0  # seconds a completion waits on a server before it completes nothing
KINDS = {"app_name": "app", "app": "app", "user": "user", "session_id": "session", "session_ids": "session"}
COLUMNS = {"app": "app_name", "user": "user_id", "session": "id"}
NAMED_GROUPS = ("session", "browse")  # the commands whose names come from the session database
INDEX_GROUPS = ("ltm",)  # the commands whose --index names come from the long-term store


def attach(group: Any, path: tuple[str, ...] = ()) -> None:
    """Give the app, user and session parameters of the session commands their completer, and
    the --index of the ltm commands theirs."""
    for name, cmd in getattr(group, "commands", {}).items():
        here = (*path, name)
        if here[0] not in NAMED_GROUPS + INDEX_GROUPS:
            continue
        attach(cmd, here)
        for param in getattr(cmd, "params", ()):
            kind = KINDS.get(param.name or "") if here[0] in NAMED_GROUPS else None
            if here[0] in INDEX_GROUPS and param.name == "index":
                kind = "index"
            if kind is not None:
                set_completer(param, _completer(kind))


def _completer(kind: str) -> Any:
    def complete(ctx: Any, param: Any, incomplete: str) -> list[str]:
        try:
            return names(kind, ctx, incomplete)
        except Exception:  # completion answers nothing rather than a traceback in the prompt
            return []

    return complete


def names(kind: str, ctx: Any, prefix: str) -> list[str]:
    """The `kind` names (app, user, session; index) starting with `prefix`, narrowed by the app
    and user already on the command line."""
    from veadk_mem.config import load_settings
    from veadk_mem.sessions.url import session_db_url, sqlite_file

    params: dict[str, Any] = {}
    for c in reversed(_chain(ctx)):
        params.update({k: v for k, v in (c.params or {}).items() if v is not None})
    overrides = {"short_term_memory.db_url": params["db_url"]} if params.get("db_url") else None
    settings = load_settings(params.get("config"), overrides).settings
    if kind == "index":
        return _index_names(settings, params.get("backend") or settings.long_term_memory.backend, prefix)
    given = {"app": params.get("app_name") or params.get("app"), "user": params.get("user")}
    where = {k: str(v) for k, v in given.items() if v and k != kind}
    path = _plain_sqlite_file(settings)
    if path is None:
        url = session_db_url(settings)
        path = sqlite_file(url)
        if path is None:
            return _server_names(url, kind, where, prefix)
    return _sqlite_names(path, kind, where, prefix)


def _plain_sqlite_file(settings: Any) -> str | None:
    """The sqlite file the settings name as a plain path (`--db-url FILE`, or the sqlite backend's
    local_database_path), which is a file name as it stands: no URL to parse, so a completion on
    it does not import SQLAlchemy (over a third of its CPU, #45 item 5). None for a URL."""
    stm = settings.short_term_memory
    given = stm.db_url.get_secret_value() or (stm.local_database_path if stm.backend == "sqlite" else "")
    if not given or "://" in given:
        return None
    return str(Path(given).expanduser())


def _chain(ctx: Any) -> list[Any]:
    out = []
    while ctx is not None:
        out.append(ctx)
        ctx = ctx.parent
    return out


def _query(kind: str, where: dict[str, str], mark: str) -> tuple[str, list[str]]:
    col = COLUMNS[kind]
    conds = [f"{COLUMNS[k]} = {mark}" for k in where]
    conds.append(f"{col} LIKE {mark} ESCAPE '!'")
    sql = f"SELECT DISTINCT {col} FROM sessions WHERE {' AND '.join(conds)} ORDER BY {col} LIMIT {NAME_LIMIT}"
    return sql, list(where.values())


def _like(prefix: str) -> str:
    return prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def _sqlite_names(path: str, kind: str, where: dict[str, str], prefix: str) -> list[str]:
    """Read-only (mode=ro: a missing file is an error, never a new database), waiting on a lock briefly."""
    import sqlite3
    from urllib.parse import quote

    if not Path(path).is_file():  # a FIFO or device would block the open, and the shell with it
        return []
    sql, args = _query(kind, where, "?")
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=NAME_TIMEOUT)
    try:
        return [str(r[0]) for r in conn.execute(sql, [*args, _like(prefix)])]
    finally:
        conn.close()


def _server_names(url: str, kind: str, where: dict[str, str], prefix: str) -> list[str]:
    """One query on PostgreSQL or MariaDB/MySQL, given up after NAME_TIMEOUT seconds."""
    import asyncio

    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    keys = [f"k{i}" for i in range(len(where))]
    args = list(where.values())
    conds = [f"{COLUMNS[k]} = :{key}" for k, key in zip(where, keys, strict=True)]
    col = COLUMNS[kind]
    conds.append(f"{col} LIKE :prefix ESCAPE '!'")
    sql = f"SELECT DISTINCT {col} FROM sessions WHERE {' AND '.join(conds)} ORDER BY {col} LIMIT {NAME_LIMIT}"
    bind = {**dict(zip(keys, args, strict=True)), "prefix": _like(prefix)}

    async def read() -> list[str]:
        engine = create_async_engine(url, pool_size=1, max_overflow=0)
        try:
            async with engine.connect() as conn:
                return [str(r[0]) for r in await conn.execute(text(sql), bind)]
        finally:
            await engine.dispose(close=False)

    async def bounded() -> list[str]:
        return await asyncio.wait_for(read(), NAME_TIMEOUT)

    return asyncio.run(bounded())


def _index_names(settings: Any, backend: str, prefix: str) -> list[str]:
    """The local store's indexes starting with `prefix`: one read of its index table (a few rows).
    Other backends list their indexes only through a server round trip or not at all: nothing."""
    import sqlite3
    from urllib.parse import quote

    if backend != "local":
        return []
    from veadk_mem.ltm.backends.local import default_path

    path = settings.long_term_memory.local_path or str(default_path())
    sql = f"SELECT name FROM ltm_indexes WHERE name LIKE ? ESCAPE '!' ORDER BY name LIMIT {NAME_LIMIT}"
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=NAME_TIMEOUT)
    try:
        found = [str(r[0]) for r in conn.execute(sql, [_like(prefix)])]
    finally:
        conn.close()
    return [name for name in found if name.startswith(prefix)]  # sqlite's LIKE ignores ASCII case
