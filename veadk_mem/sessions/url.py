"""The SQLAlchemy async URL of the configured session database, as VeADK builds it.

URLs are read and written with SQLAlchemy's `URL` object (`make_url`, `URL.create`,
`URL.set`), which knows user info, quoting and query parameters. SQLAlchemy is imported
inside the functions: this module is reached at start-up, where it is not needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.config import VmemSettings
from veadk_mem.errors import BadInput, NotSupported

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
}
_PLAIN = {"sqlite+aiosqlite": "sqlite", "postgresql+asyncpg": "postgresql", "mysql+aiomysql": "mysql"}
_BAD_URL_HINT = "URL-encode special characters in the user and password: p@ss:word -> p%40ss%3Aword"


def written_dialect(url: str) -> str:
    """The database a URL names as written (its scheme; a plain path is sqlite), read without
    parsing the rest, so that a URL SQLAlchemy refuses can still be named by its kind."""
    if "://" not in url:
        return "sqlite"
    return url.split("://", 1)[0].split("+", 1)[0].lower()


def configured_dialect(settings: VmemSettings) -> str:
    """The kind of session database the settings name: db_url's scheme when set, else the backend."""
    db_url = settings.short_term_memory.db_url.get_secret_value()
    if not db_url:
        return settings.short_term_memory.backend
    dialect = written_dialect(db_url)
    return _PLAIN.get(_ASYNC_DRIVERS.get(dialect, ""), dialect)


def to_async_url(url: str) -> str:
    """Give a sync SQLAlchemy URL the async driver vmem uses; a plain path means sqlite."""
    from sqlalchemy.engine import URL, make_url
    from sqlalchemy.exc import ArgumentError

    if "://" not in url:
        return _render(URL.create("sqlite+aiosqlite", database=str(Path(url).expanduser())))
    rest = url.split("://", 1)[1]
    dialect = written_dialect(url)
    if dialect not in _ASYNC_DRIVERS:
        raise BadInput(f"db_url: unsupported database '{dialect}' (expected sqlite, postgresql or mysql)")
    # A second '@' before the path: SQLAlchemy reads such a URL without complaint, with the
    # rest of the password taken for the host, so it is looked for in the text as written.
    if dialect != "sqlite" and rest.split("/", 1)[0].count("@") > 1:
        raise BadInput(
            "db_url: the user or password contains an unencoded '@'",
            hint="URL-encode it as VeADK asks (urllib.parse.quote_plus): p@ss:word -> p%40ss%3Aword",
        )
    try:
        parsed = make_url(f"{_ASYNC_DRIVERS[dialect]}://{rest}")
    except (ArgumentError, ValueError) as exc:  # a port that is not a number, ...: what connecting would say
        raise BadInput(f"{_shown(url)}: invalid database URL ({type(exc).__name__})", hint=_BAD_URL_HINT) from None
    return _render(parsed)


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
        return _built("postgresql", settings.database.postgresql, {})
    my = settings.database.mysql
    return _built("mysql", my, {"charset": my.charset})


def _built(backend: str, section: Any, query: dict[str, str]) -> str:
    """The async URL of a [database.postgresql] or [database.mysql] section: user and password
    quoted as SQLAlchemy quotes them, the password only with a user."""
    from sqlalchemy.engine import URL

    if not section.database:
        env = f"DATABASE_{backend.upper()}_DATABASE"
        raise BadInput(f"database.{backend}.database: not set ({env})")
    password = section.password.get_secret_value()
    built = URL.create(
        _ASYNC_DRIVERS[backend],
        username=section.user or None,
        password=(password or None) if section.user else None,
        host=section.host,
        port=section.port,
        database=section.database,
        query=query,
    )
    return _render(built)


def given_db_url(settings: VmemSettings, url: str) -> str:
    """The session database as the user named it, for messages: db_url as written, the sqlite
    path, or the built URL without the async driver vmem adds (postgresql://, not +asyncpg)."""
    stm = settings.short_term_memory
    given = stm.db_url.get_secret_value() or (stm.local_database_path if stm.backend == "sqlite" else "")
    return given or plain_url(url)


def plain_url(url: str) -> str:
    """A URL vmem made, without the async driver it added: postgresql://, not postgresql+asyncpg://."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.drivername not in _PLAIN:
        return url
    return _render(parsed.set(drivername=_PLAIN[parsed.drivername]))


def url_dialect(url: str) -> str:
    """The database kind a URL vmem made names: sqlite, postgresql or mysql."""
    from sqlalchemy.engine import make_url

    return make_url(url).get_backend_name()


def sqlite_file(url: str) -> str | None:
    """The file a sqlite URL names; None for another database or an in-memory one."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if not parsed.get_backend_name().startswith("sqlite"):
        return None
    return None if parsed.database in (None, "", ":memory:") else parsed.database


def read_only_sqlite_url(path: str) -> str:
    """A URL that opens a sqlite file read-only (an SQLite URI filename), never creating it."""
    from sqlalchemy.engine import URL

    return _render(URL.create("sqlite+aiosqlite", database=f"file:{path}", query={"mode": "ro", "uri": "true"}))


def _render(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _shown(url: str) -> str:
    """A URL the user gave, for a message: as written but for vmem's own async driver, the password masked."""
    from veadk_mem.config import mask_url

    scheme, rest = url.split("://", 1)
    return mask_url(f"{_PLAIN.get(scheme, scheme)}://{rest}")
