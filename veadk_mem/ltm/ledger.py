"""The replay ledger: content hashes vmem has sent to stores that cannot say what they hold.

A hosted service such as TOS ContextBucket keeps (and may rewrite) what it is sent but has
no way to ask "do you hold this text?", so `existing_hashes` cannot make a replay
idempotent there. For those backends the facade records each memory it sent, per
backend, store, index and user, in a sqlite file in vmem's data directory
($XDG_DATA_HOME/vmem/ledger.db), and skips what the ledger holds. Deleting memories
(`ltm delete`, `forget`) takes them out of it again, so a later save resends them.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from veadk_mem.errors import VmemError
from veadk_mem.files import private_sqlite

SCHEMA = """
CREATE TABLE IF NOT EXISTS sent (
    backend TEXT NOT NULL,
    store TEXT NOT NULL,
    idx TEXT NOT NULL,
    user_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    memory_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL DEFAULT '',
    sent_at REAL NOT NULL,
    PRIMARY KEY (backend, store, idx, user_id, content_hash)
)
"""


def default_path() -> Path:
    """$XDG_DATA_HOME/vmem/ledger.db (XDG_DATA_HOME defaults to ~/.local/share)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "vmem" / "ledger.db"


@dataclass(frozen=True)
class Scope:
    """Whose memories in which store: the ledger never mixes two users, indexes or stores."""

    backend: str
    store: str
    index: str
    user_id: str

    def key(self) -> tuple[str, str, str, str]:
        return (self.backend, self.store, self.index, self.user_id)


class LedgerError(VmemError):
    """The ledger file cannot be used (not a sqlite database, damaged, locked): exit 1, naming the file."""


P = ParamSpec("P")
R = TypeVar("R")


def _guarded(method: Callable[Concatenate[Ledger, P], R]) -> Callable[Concatenate[Ledger, P], R]:
    """sqlite's errors on the ledger file as one LedgerError naming the file, never a bare DatabaseError."""

    @functools.wraps(method)
    def run(self: Ledger, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise self.failure(exc) from None

    return run


class Ledger:
    """What vmem sent, opened lazily: nothing is created until a memory is recorded.

    Each public method is `_guarded`: a damaged or foreign file is one line naming it.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()
        self._conn: sqlite3.Connection | None = None

    def _open(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is None:
            if not create and not self.path.exists():
                return None
            # created 0600 before sqlite opens it, so its -wal and -shm are too: it names users
            # and what they said, by hash
            private_sqlite(self.path)
            self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(SCHEMA)
        return self._conn

    def failure(self, exc: sqlite3.DatabaseError) -> LedgerError:
        """The one-line error for sqlite's `exc` on this file; the connection is dropped."""
        self.close()
        if isinstance(exc, sqlite3.OperationalError):  # locked, read-only, disk full: the file may be fine
            return LedgerError(f"{self.path}: cannot use the replay ledger: {exc}")
        return LedgerError(
            f"{self.path}: the replay ledger is damaged or not vmem's ({exc})",
            hint="move the file aside to start an empty ledger (a replay may then resend memories it holds)",
        )

    @_guarded
    def sent(self, scope: Scope, hashes: Iterable[str]) -> set[str]:
        """Which of these content hashes vmem has sent into this scope."""
        conn = self._open(create=False)
        wanted = list(hashes)
        if conn is None or not wanted:
            return set()
        found: set[str] = set()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = conn.execute(
                "SELECT content_hash FROM sent WHERE backend=? AND store=? AND idx=? AND user_id=?"
                f" AND content_hash IN ({','.join('?' * len(chunk))})",
                (*scope.key(), *chunk),
            )
            found.update(row[0] for row in rows)
        return found

    @_guarded
    def record(self, scope: Scope, entries: Iterable[tuple[str, str, str]]) -> None:
        """Remember (content hash, memory id, session id) triples as sent into this scope."""
        now = time.time()
        rows = [(*scope.key(), h, memory_id, session_id, now) for h, memory_id, session_id in entries]
        if not rows:
            return
        conn = self._open(create=True)
        assert conn is not None
        with conn:
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT OR REPLACE INTO sent (backend, store, idx, user_id, content_hash, memory_id,"
                " session_id, sent_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    @_guarded
    def forget(
        self,
        scope: Scope,
        *,
        ids: Iterable[str] = (),
        hashes: Iterable[str] = (),
        sessions: Iterable[str] = (),
        everything: bool = False,
    ) -> int:
        """Drop entries of deleted memories (by id, hash or session), or every entry of the scope."""
        conn = self._open(create=False)
        if conn is None:
            return 0
        where = "backend=? AND store=? AND idx=? AND user_id=?"
        with conn:
            conn.execute("BEGIN")
            if everything:
                return conn.execute(f"DELETE FROM sent WHERE {where}", scope.key()).rowcount
            gone = 0
            for column, values in (("memory_id", ids), ("content_hash", hashes), ("session_id", sessions)):
                for value in {v for v in values if v}:
                    gone += conn.execute(
                        f"DELETE FROM sent WHERE {where} AND {column}=?", (*scope.key(), value)
                    ).rowcount
            return gone

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
