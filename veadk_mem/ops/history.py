"""The history: an append-only log of every change vmem makes to a store, across both stores.

One row per change (a session delete, import, upgrade, prune or vacuum; an ltm save, import,
copy, delete, edit or forget): when (UTC), the OS user and host, the command line with its
secrets masked, the store (its masked URL, or backend and index), what changed (counts, and the
first `MAX_IDS` ids with their total), the outcome (ok, failed with its exit code, interrupted),
and, for an erasure, a receipt (ids and content hashes: never an erased text, which could then
never be erased; an edit's `details` do keep its old text, an undo trail). It lives in a
sqlite file beside the replay ledger ($XDG_DATA_HOME/vmem/history.db, or `[history] path`),
created 0600, never through a link; concurrent vmem processes append under WAL with a busy
timeout; triggers refuse updates and deletes, so a row once written stays as written.

A change is recorded after it is made, and recording it never fails the command: a history
that is damaged, read-only, locked or on a full disk costs one warning line, and the command's
exit code stays its own.

Commands record in one of two ways:
- `recording(...)`, a context the command enters around the change and fills with its counts
  (`change.count(sessions=3)`, `change.add_ids(...)`); it records what was committed whatever
  way the block ends (an exception's `committed` counts included) and nothing for a dry run;
- `record(...)`, one call for a change already made (`record(settings.history, change, ...)`).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, NotFound, StoreError
from veadk_mem.files import open_private_sqlite
from veadk_mem.jsonio import dumps
from veadk_mem.ltm.ledger import default_path as ledger_path
from veadk_mem.masking import mask_url, redact

if TYPE_CHECKING:
    from veadk_mem.config import HistorySettings

MAX_IDS = 100  # ids kept per entry; `ids_total` says how many there were
MAX_ARG = 500  # characters kept of one command-line argument (a long --text), or of one id
MAX_ARGS = 200  # command-line arguments kept; the rest are counted
MAX_TEXT = 10_000  # characters kept of one detail's text (an edited memory's old text)
SQLITE_INT_MAX = 2**63 - 1  # the largest entry number or limit sqlite takes
BUSY_TIMEOUT = 2.0  # seconds an append waits for another vmem's write: the change is already made
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS changes (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    os_user TEXT NOT NULL,
    host TEXT NOT NULL,
    command TEXT NOT NULL,
    argv TEXT NOT NULL,
    store TEXT NOT NULL,
    counts TEXT NOT NULL,
    ids TEXT NOT NULL,
    ids_total INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    exit_code INTEGER NOT NULL,
    details TEXT NOT NULL,
    receipt TEXT
)""",
    "CREATE INDEX IF NOT EXISTS changes_at ON changes (at)",
    """CREATE TRIGGER IF NOT EXISTS changes_no_update BEFORE UPDATE ON changes
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS changes_no_delete BEFORE DELETE ON changes
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END""",
)
COLUMNS = "n, at, os_user, host, command, argv, store, counts, ids, ids_total, outcome, exit_code, details, receipt"
LISTED = COLUMNS.removesuffix(", receipt")  # a listing leaves receipts (large) to `history show N`
OK, FAILED, INTERRUPTED = "ok", "failed", "interrupted"
# An option whose value is a secret itself, or a URL whose password is.
_SECRET_OPTION = re.compile(r"^--?[\w-]*(?:key|token|secret|password|passwd|credential)[\w-]*$", re.IGNORECASE)
_URL_OPTION = re.compile(r"^--?[\w-]*url$", re.IGNORECASE)


def default_path() -> Path:
    """history.db in the replay ledger's directory ($XDG_DATA_HOME/vmem)."""
    return ledger_path().with_name("history.db")


def history_path(settings: HistorySettings) -> Path:
    """The history file `[history] path` names, else the default."""
    return Path(settings.path).expanduser() if settings.path else default_path()


class HistoryError(Exception):
    """The history file cannot be used (a link, damaged, read-only, locked, a full disk)."""


def mask_argv(argv: Iterable[str]) -> list[str]:
    """The command line with its secrets masked: a secret option's value (`--api-key X`) whole,
    a URL option's password (`--db-url`), and everywhere URL passwords, secret query parameters
    and every configured secret (masking.redact); a long argument is cut to MAX_ARG."""
    out: list[str] = []
    follows = ""  # "secret" or "url": what the previous option said the next argument is
    for arg in argv:
        shown = redact(arg)
        if follows == "secret":
            shown = "****"
        elif follows == "url":
            shown = mask_url(shown)
        follows = ""
        name, eq, _value = arg.partition("=")
        if arg.startswith("-") and _SECRET_OPTION.match(name):
            if eq:
                shown = f"{name}=****"
            else:
                follows = "secret"
        elif arg.startswith("-") and _URL_OPTION.match(name) and not eq:
            follows = "url"
        out.append(shown if len(shown) <= MAX_ARG else shown[: MAX_ARG - 1] + "…")
    if len(out) > MAX_ARGS:  # thousands of session ids on one command line
        out[MAX_ARGS:] = [f"… {len(out) - MAX_ARGS:,} more arguments"]
    return out


@dataclass
class Change:
    """What one command changed in one store, filled in as it commits.

    counts: how many of each thing (`sessions`, `events`, `memories` ...); ids: what was
    changed (the first MAX_IDS are kept, `ids_total` counts them all); details: anything else a
    reader of the history needs (an edited memory's old text); receipt: an erasure's proof.
    """

    command: str
    store: str
    counts: dict[str, int] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    ids_total: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    receipt: dict[str, Any] | None = None

    def count(self, **counts: int) -> None:
        """Add to the counts (`change.count(sessions=2, events=40)`)."""
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + int(n)

    def add_ids(self, ids: Iterable[Any]) -> None:
        """Name what changed; only the first MAX_IDS are kept, all are counted."""
        for one in ids:
            self.ids_total += 1
            if len(self.ids) < MAX_IDS:
                self.ids.append(str(one)[:MAX_ARG])

    def detail(self, name: str, value: Any) -> None:
        """Keep one more detail (a long text cut to MAX_TEXT characters)."""
        if isinstance(value, str) and len(value) > MAX_TEXT:
            value = value[: MAX_TEXT - 1] + "…"
        self.details[name] = value

    @property
    def changed(self) -> bool:
        """Whether anything was changed: what decides that an entry is written."""
        return any(n > 0 for n in self.counts.values()) or self.ids_total > 0 or self.receipt is not None

    def absorb(self, exc: BaseException) -> None:
        """Take in what a failed command says it committed before failing: an error's
        `committed` counts (and ids), a PartialWrite's `stored` ids."""
        committed = getattr(exc, "committed", None)
        if isinstance(committed, dict):
            self.count(**{k: v for k, v in committed.items() if isinstance(v, int)})
            self.add_ids(committed.get("ids") or ())
        stored = getattr(exc, "stored", None)
        if isinstance(stored, list) and stored:
            self.count(memories=len(stored))
            self.add_ids(stored)


def outcome_of(exc: BaseException | None) -> tuple[str, int]:
    """(outcome, exit code) of a command that ended with `exc` (None: it ended normally)."""
    if exc is None:
        return OK, 0
    if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ in ("CancelledError", "Interrupted"):
        return INTERRUPTED, 130
    code = getattr(exc, "exit_code", None)
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else 1
    if isinstance(code, int):
        if code == 130:
            return INTERRUPTED, 130
        return (OK, 0) if code == 0 else (FAILED, code)
    return FAILED, 1


def _user() -> str:
    with contextlib.suppress(ImportError, KeyError, OSError):
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    import getpass

    try:
        return getpass.getuser()
    except OSError:
        return str(os.getuid()) if hasattr(os, "getuid") else "?"


def now_iso() -> str:
    """This moment as ISO 8601 UTC with microseconds (entries sort by it as text)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class HistoryLog:
    """The history file: `append` one entry, read `entries` and one `entry` back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self, *, write: bool) -> sqlite3.Connection | None:
        """A connection; None when reading a history that does not exist yet."""
        if self.path.is_symlink():
            raise HistoryError(f"{self.path}: is a symbolic link; vmem never writes its history through one")
        if not write and not self.path.exists():
            return None
        if write:  # 0600 before sqlite opens it, its -wal and -shm too
            conn = open_private_sqlite(self.path, BUSY_TIMEOUT, _schema)
        else:
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None)
        try:
            if self.path.is_symlink():  # planted between the check and the open
                raise HistoryError(f"{self.path}: is a symbolic link; vmem never writes its history through one")
        except BaseException:
            conn.close()
            raise
        return conn

    def append(self, entry: dict[str, Any]) -> int:
        """Write one entry (the keys of COLUMNS but n); its number. HistoryError when it cannot."""
        try:
            conn = self._connect(write=True)
            assert conn is not None
            try:
                values = [_stored(entry.get(name)) for name in COLUMNS.split(", ")[1:]]
                cursor = conn.execute(
                    f"INSERT INTO changes ({COLUMNS.partition(', ')[2]}) VALUES ({', '.join('?' * len(values))})",
                    values,
                )
                return int(cursor.lastrowid or 0)
            finally:
                conn.close()
        except (sqlite3.Error, OSError) as exc:
            raise HistoryError(f"{self.path}: {_reason(exc)}") from None

    def entries(
        self,
        *,
        since: float | None = None,
        user: str | None = None,
        command: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Entries, newest first, narrowed by time, OS user and command (`ltm` takes every ltm command)."""
        where: list[str] = []
        args: list[Any] = []
        if since is not None:
            where.append("at >= ?")
            args.append(datetime.fromtimestamp(since, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"))
        if user is not None:
            where.append("os_user = ?")
            args.append(user)
        if command is not None:
            where.append("(command = ? OR substr(command, 1, ?) = ?)")
            args.extend([command, len(command) + 1, f"{command} "])
        sql = f"SELECT {LISTED} FROM changes"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY n DESC"
        if limit:
            if not 0 < limit <= SQLITE_INT_MAX:
                raise BadInput(f"--limit: expected a number of entries from 0 to {SQLITE_INT_MAX}, got {limit}")
            sql += f" LIMIT {int(limit)}"
        return self._read(sql, args, LISTED)

    def entry(self, n: int) -> dict[str, Any]:
        """Entry number `n`, whole; NotFound when there is none (a number sqlite cannot hold included)."""
        found = (
            []
            if not 0 < n <= SQLITE_INT_MAX
            else self._read(f"SELECT {COLUMNS} FROM changes WHERE n = ?", [n], COLUMNS)
        )
        if not found:
            raise NotFound(f"history entry {n}: no such entry in {self.path}")
        return found[0]

    def _read(self, sql: str, args: list[Any], columns: str) -> list[dict[str, Any]]:
        try:
            conn = self._connect(write=False)
            if conn is None:
                return []
            try:
                rows = conn.execute(sql, args).fetchall()
            finally:
                conn.close()
        except HistoryError as exc:
            raise StoreError(f"cannot read the history: {exc}") from None
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot read the history {self.path}: {_reason(exc)}") from None
        names = columns.split(", ")
        return [_entry(names, row) for row in rows]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return f"damaged or not a vmem history ({exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _stored(value: Any) -> Any:
    """A column's value as sqlite keeps it: lists and dicts as JSON text."""
    if isinstance(value, (list, dict)):
        return dumps(value, compact=True)
    return value


def _entry(names: list[str], row: tuple[Any, ...]) -> dict[str, Any]:
    import json

    out = dict(zip(names, row, strict=True))
    for name in ("argv", "counts", "ids", "details", "receipt"):
        if out.get(name) is not None:
            with contextlib.suppress(ValueError):  # else shown as stored
                out[name] = json.loads(out[name])
    return out


def _named(n: int, name: str) -> str:
    words = name.replace("_", " ")
    if n == 1 and words.endswith("ies"):
        words = words[:-3] + "y"
    elif n == 1 and words.endswith("s"):
        words = words[:-1]
    return f"{n:,} {words}"


def summary(counts: dict[str, int]) -> str:
    """`3 sessions, 41 events`: an entry's counts in a few words."""
    return ", ".join(_named(n, name) for name, n in counts.items() if n) or "nothing"


Warn = Callable[[str], None]


def record(
    settings: HistorySettings,
    change: Change,
    *,
    argv: Iterable[str],
    outcome: str = OK,
    exit_code: int = 0,
    warn: Warn | None = None,
) -> int | None:
    """Append `change` to the history: its entry number, or None when the history is off or
    cannot be written (then `warn` gets one line; this never raises)."""
    if not settings.enabled:
        return None
    path = history_path(settings)
    entry = {
        "at": now_iso(),
        "os_user": _user(),
        "host": socket.gethostname(),
        "command": change.command,
        "argv": mask_argv(argv),
        "store": mask_url(change.store),
        "counts": {name: n for name, n in change.counts.items() if n},
        "ids": change.ids,
        "ids_total": change.ids_total,
        "outcome": outcome,
        "exit_code": exit_code,
        "details": change.details,
        "receipt": change.receipt,
    }
    try:
        return HistoryLog(path).append(entry)
    except HistoryError as exc:
        if warn is not None:
            warn(f"history: this change was made but not recorded: {exc}")
        return None
    except Exception as exc:  # the change is made: nothing here may turn it into a failure
        if warn is not None:
            warn(f"history: this change was made but not recorded in {path}: {type(exc).__name__}: {exc}")
        return None


@contextlib.contextmanager
def recording(
    settings: HistorySettings,
    command: str,
    store: str,
    *,
    argv: Iterable[str],
    warn: Warn | None = None,
    dry_run: bool = False,
) -> Iterator[Change]:
    """A Change the command fills in while it changes `store`; recorded when the block ends
    (ok, failed or interrupted, with what the exception says was committed), unless it is a
    dry run or nothing was changed. The exception, if any, goes on unchanged."""
    change = Change(command, store)
    argv = list(argv)
    try:
        yield change
    except BaseException as exc:
        if not dry_run:
            change.absorb(exc)
            if change.changed:
                outcome, code = outcome_of(exc)
                record(settings, change, argv=argv, outcome=outcome, exit_code=code, warn=warn)
        raise
    if not dry_run and change.changed:
        record(settings, change, argv=argv, warn=warn)


def since_epoch(at: str) -> float:
    """An entry's `at` as epoch seconds (for the tables' time column)."""
    try:
        return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def ltm_store(backend: str, indexes: Iterable[str] = ()) -> str:
    """A long-term store as an entry names it: `redis index support_bot` (several: comma separated)."""
    named = sorted({i for i in indexes if i})
    if not named:
        return backend
    return f"{backend} index{'es' if len(named) > 1 else ''} {', '.join(named)}"


def _schema(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA:
        conn.execute(statement)
