"""An async store over ADK's own session tables (sqlite, PostgreSQL, MySQL/MariaDB).

`SessionStore` reads and writes the database in the layout it already has (see
`layout.py`), through SQLAlchemy Core. It is a thin facade over one module per job:

- `engine.py`: connection, sqlite locking discipline, layout detection;
- `dberrors.py`: driver errors as one-line, secret-free messages;
- `statements.py`: statement building and caching, the one-call driver path;
- `read_queries.py`: lists, summaries, sessions and events, streamed;
- `export.py`: JSONL export in bounded short read transactions;
- `deletes.py`: deletes in one transaction, re-checked on locked rows;
- `writes.py` (+ `limits.py`): import checks against the database and batched writes;
  `importer.py`, above this facade, runs a whole import (`validate.py`, `checks.py`: the
  file's checks; `records.py`: keys, filters and reports; `files.py`: spools and temp files).

    async with SessionStore.from_settings(settings) as store:
        summaries = await store.list_sessions(SessionFilter(app="my_app"), limit=20)
        session = await store.get_session("my_app", "u1", "s1")
        async for session in store.iter_sessions(SessionFilter(user="u1")): ...
        report = await store.delete_sessions(SessionFilter(app="my_app", until=cutoff), dry_run=True)
"""

from __future__ import annotations

from veadk_mem.sessions.dberrors import describe_db_error
from veadk_mem.sessions.deletes import Deletes
from veadk_mem.sessions.export import Export
from veadk_mem.sessions.records import (
    DeleteReport,
    FileKey,
    ImportReport,
    Progress,
    SessionFilter,
    SessionKey,
    SessionSummary,
    file_update_time,
)
from veadk_mem.sessions.state_scopes import APP_PREFIX, TEMP_PREFIX, USER_PREFIX, merge_state, split_state, state_scope
from veadk_mem.sessions.validate import iter_import_records, validate_import
from veadk_mem.sessions.writes import Writes

__all__ = [
    "APP_PREFIX",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "DeleteReport",
    "FileKey",
    "ImportReport",
    "Progress",
    "SessionFilter",
    "SessionKey",
    "SessionStore",
    "SessionSummary",
    "describe_db_error",
    "file_update_time",
    "iter_import_records",
    "merge_state",
    "split_state",
    "state_scope",
    "validate_import",
]


class SessionStore(Export, Deletes, Writes):
    """ADK session tables in one database; use as `async with SessionStore(url) as store`."""
