"""The SQLAlchemy async URL of the configured session database, as VeADK builds it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from veadk_mem.config import VmemSettings
from veadk_mem.errors import BadInput, NotSupported

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
}


def to_async_url(url: str) -> str:
    """Give a sync SQLAlchemy URL the async driver vmem uses; a plain path means sqlite."""
    if "://" not in url:
        return f"sqlite+aiosqlite:///{Path(url).expanduser()}"
    scheme, rest = url.split("://", 1)
    dialect = scheme.split("+", 1)[0].lower()
    if dialect not in _ASYNC_DRIVERS:
        raise BadInput(f"db_url: unsupported database '{dialect}' (expected sqlite, postgresql or mysql)")
    netloc = rest.split("/", 1)[0]
    if dialect != "sqlite" and netloc.count("@") > 1:
        raise BadInput(
            "db_url: the user or password contains an unencoded '@'",
            hint="URL-encode it as VeADK asks (urllib.parse.quote_plus): p@ss:word -> p%40ss%3Aword",
        )
    return f"{_ASYNC_DRIVERS[dialect]}://{rest}"


def session_db_url(settings: VmemSettings) -> str:
    """The async URL for short_term_memory: db_url if set, else built from the backend's section."""
    stm = settings.short_term_memory
    db_url = stm.db_url.get_secret_value()
    if db_url:
        return to_async_url(db_url)
    if stm.backend == "local":
        raise NotSupported(
            "short_term_memory.backend is 'local': VeADK keeps those sessions in the agent's process memory, "
            "there is no database to inspect",
            hint="set short_term_memory.backend to sqlite, mysql or postgresql, or pass --db-url",
        )
    if stm.backend == "sqlite":
        return to_async_url(stm.local_database_path)
    if stm.backend == "postgresql":
        pg = settings.database.postgresql
        if not pg.database:
            raise BadInput("database.postgresql.database: not set (DATABASE_POSTGRESQL_DATABASE)")
        auth = _auth(pg.user, pg.password.get_secret_value())
        return f"postgresql+asyncpg://{auth}{pg.host}:{pg.port}/{quote(pg.database, safe='')}"
    my = settings.database.mysql
    if not my.database:
        raise BadInput("database.mysql.database: not set (DATABASE_MYSQL_DATABASE)")
    auth = _auth(my.user, my.password.get_secret_value())
    return f"mysql+aiomysql://{auth}{my.host}:{my.port}/{quote(my.database, safe='')}?charset={my.charset}"


def given_db_url(settings: VmemSettings, url: str) -> str:
    """The session database as the user named it, for messages: db_url as written, the sqlite
    path, or the built URL without the async driver vmem adds (postgresql://, not +asyncpg)."""
    import re

    stm = settings.short_term_memory
    given = stm.db_url.get_secret_value() or (stm.local_database_path if stm.backend == "sqlite" else "")
    return given or re.sub(r"^(sqlite|postgresql|mysql)\+(aiosqlite|asyncpg|aiomysql)://", r"\1://", url)


def _auth(user: str, password: str) -> str:
    if not user:
        return ""
    if password:
        return f"{quote(user, safe='')}:{quote(password, safe='')}@"
    return f"{quote(user, safe='')}@"


def sqlite_file(url: str) -> str | None:
    """The file a sqlite URL names; None for another database or an in-memory one."""
    if not url.split("://", 1)[0].startswith("sqlite"):
        return None
    rest = url.split("://", 1)[1] if "://" in url else ""
    path = (rest[1:] if rest.startswith("/") else rest).split("?", 1)[0]
    return None if path in ("", ":memory:") else path
