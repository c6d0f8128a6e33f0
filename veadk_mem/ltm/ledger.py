"""The replay ledger: content hashes vmem has sent to stores that cannot say what they hold.

A hosted service such as TOS ContextBucket keeps (and may rewrite) what it is sent but has
no way to ask "do you hold this text?", so `existing_hashes` cannot make a replay
idempotent there. For those backends the facade records each memory it sent, per
backend, store, index and user, in a sqlite file in vmem's data directory
($XDG_DATA_HOME/vmem/ledger.db), and skips what the ledger holds. Deleting memories
(`ltm delete`, `forget`) takes them out of it again, so a later save resends them.

A save claims its memories before it sends them: one write transaction finds what the ledger
holds and enters the rest as `pending` under this process's name, committed before anything
leaves. Two saves at once therefore never send a memory twice (the second finds the first's
claim and skips it), and a ledger another process holds fails the save before it sends
anything. After the send the claim becomes `sent`; a send that fails takes its claim back,
and a claim that cannot be confirmed (the ledger busy again) stays pending: a later save skips
it and, once the claiming process is gone, records it as sent.
"""

from __future__ import annotations

import functools
import os
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from veadk_mem.errors import PartialWrite, VmemError
from veadk_mem.files import open_private_sqlite

if TYPE_CHECKING:
    from veadk_mem.ltm.base import MemoryRecord

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
    state TEXT NOT NULL DEFAULT 'sent',
    claimed_by TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (backend, store, idx, user_id, content_hash)
)
"""
# The claims not yet confirmed, found without reading every entry.
PENDING_INDEX = "CREATE INDEX IF NOT EXISTS sent_pending ON sent (claimed_by) WHERE state = 'pending'"
# A ledger written before claims existed: its rows are all sent.
CLAIM_COLUMNS = {
    "state": "ALTER TABLE sent ADD COLUMN state TEXT NOT NULL DEFAULT 'sent'",
    "claimed_by": "ALTER TABLE sent ADD COLUMN claimed_by TEXT NOT NULL DEFAULT ''",
}
# How long a use of the ledger waits for another process's write to finish, in seconds.
BUSY_TIMEOUT = 30.0


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


def _this_process() -> str:
    """The name a claim is made under: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _gone(owner: str) -> bool:
    """Whether the process that made a claim has ended (only known for this host's processes)."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


class Ledger:
    """What vmem sent, opened lazily: nothing is created until a memory is claimed or recorded.

    Each public method is `_guarded`: a damaged or foreign file is one line naming it.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()
        self.owner = _this_process()
        self._conn: sqlite3.Connection | None = None

    def _open(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is None:
            if not create and not self.path.exists():
                return None
            # 0600 with its -wal and -shm: it names users and what they said, by hash
            self._conn = open_private_sqlite(self.path, BUSY_TIMEOUT, _schema)
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
    def check(self) -> None:
        """Open the ledger (when it exists) and take its write lock once: a damaged, foreign or
        busy file fails here, before the caller changes a store the ledger must then follow."""
        conn = self._open(create=False)
        if conn is None:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("SELECT count(*) FROM sent WHERE rowid = 1").fetchone()
        finally:
            conn.execute("ROLLBACK")

    @_guarded
    def sent(self, scope: Scope, hashes: Iterable[str]) -> set[str]:
        """Which of these content hashes vmem has sent into this scope (or claimed, to send now)."""
        conn = self._open(create=False)
        wanted = list(hashes)
        if conn is None or not wanted:
            return set()
        return {row[0] for row in self._rows(conn, scope, wanted)}

    @staticmethod
    def _rows(conn: sqlite3.Connection, scope: Scope, hashes: list[str]) -> list[tuple[str, str, str]]:
        """(content hash, state, claimed by) of the scope's entries among these hashes."""
        found: list[tuple[str, str, str]] = []
        for start in range(0, len(hashes), 500):
            chunk = hashes[start : start + 500]
            found.extend(
                conn.execute(
                    "SELECT content_hash, state, claimed_by FROM sent"
                    " WHERE backend=? AND store=? AND idx=? AND user_id=?"
                    f" AND content_hash IN ({','.join('?' * len(chunk))})",
                    (*scope.key(), *chunk),
                )
            )
        return found

    @_guarded
    def claim(self, scope: Scope, entries: Iterable[tuple[str, str]]) -> set[str]:
        """Enter (content hash, session id) pairs the ledger does not hold as pending, in one
        committed write; returns the hashes claimed, which this process alone may now send.

        Pending claims of processes that have ended (a confirmation that failed, a save killed
        while sending) are what those processes sent: recorded as sent here, never claimed again.
        """
        wanted = dict(entries)
        if not wanted:
            return set()
        conn = self._open(create=True)
        assert conn is not None
        now = time.time()
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            owners = conn.execute(
                "SELECT DISTINCT claimed_by FROM sent WHERE state='pending' AND claimed_by != ?", (self.owner,)
            )
            for (owner,) in list(owners):
                if _gone(owner):
                    conn.execute("UPDATE sent SET state='sent' WHERE state='pending' AND claimed_by=?", (owner,))
            known = {h for h, _, _ in self._rows(conn, scope, list(wanted))}
            claimed = [h for h in wanted if h not in known]
            conn.executemany(
                "INSERT INTO sent (backend, store, idx, user_id, content_hash, session_id, sent_at, state,"
                " claimed_by) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
                [(*scope.key(), h, wanted[h], now, self.owner) for h in claimed],
            )
        return set(claimed)

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
                " session_id, sent_at, state, claimed_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'sent', '')",
                rows,
            )

    @_guarded
    def release(self, scope: Scope, hashes: Iterable[str]) -> None:
        """Take back this process's pending claims of these hashes (their send failed)."""
        gone = [(*scope.key(), h, self.owner) for h in hashes]
        conn = self._open(create=False)
        if conn is None or not gone:
            return
        with conn:
            conn.execute("BEGIN")
            conn.executemany(
                "DELETE FROM sent WHERE backend=? AND store=? AND idx=? AND user_id=? AND content_hash=?"
                " AND state='pending' AND claimed_by=?",
                gone,
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


async def send_once(
    ledger: Ledger,
    scope: Scope,
    records: list[MemoryRecord],
    send: Callable[[list[MemoryRecord]], Awaitable[list[str]]],
    *,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """Send the records no one has sent or claimed, through `send`, each at most once.

    Claimed (committed) before anything is sent, so a busy or damaged ledger fails the save
    with nothing sent; confirmed after. What the store did not take is released for a later
    save; an interrupted send (Ctrl-C: the request may still arrive) keeps its claim.
    Returns the ids `send` gave, for the records this call sent.
    """
    claimed = ledger.claim(scope, [(r.content_hash, r.session_id) for r in records])
    mine = [r for r in records if r.content_hash in claimed]
    if not mine:
        return []
    try:
        ids = await send(mine)
    except PartialWrite as exc:  # what the store acknowledged is sent; the rest is not
        acknowledged = set(exc.stored)
        sent = [r for r in mine if r.id in acknowledged] or mine[: len(exc.stored)]
        _settle(ledger, scope, [(r, r.id) for r in sent], [r for r in mine if r not in sent], warn)
        raise
    except Exception:
        _settle(ledger, scope, [], mine, warn)
        raise
    given = ids if len(ids) == len(mine) else [""] * len(mine)
    _settle(ledger, scope, list(zip(mine, given, strict=True)), [], warn)
    return ids


def _settle(
    ledger: Ledger,
    scope: Scope,
    sent: list[tuple[MemoryRecord, str]],
    unsent: list[MemoryRecord],
    warn: Callable[[str], None] | None,
) -> None:
    """Confirm what was sent (with its memory id) and release what was not. A ledger that fails
    now says so instead of failing a save the store took: what was sent stays claimed, so no
    later save sends it again."""
    try:
        ledger.record(scope, [(r.content_hash, memory_id, r.session_id) for r, memory_id in sent])
        ledger.release(scope, [r.content_hash for r in unsent])
    except LedgerError as exc:
        if warn is not None:
            said = f"{exc.message}: {len(sent)} memories sent stay claimed, so no later save sends them again"
            if unsent:
                said += f"; {len(unsent)} not sent stay claimed too, so later saves skip them"
            warn(said)


def _schema(conn: sqlite3.Connection) -> None:
    """The ledger's table, with the claim columns an older ledger lacks, and its index."""
    conn.execute(SCHEMA)
    have = {row[1] for row in conn.execute("PRAGMA table_info(sent)")}
    for column, add in CLAIM_COLUMNS.items():
        if column not in have:
            conn.execute(add)
    conn.execute(PENDING_INDEX)
