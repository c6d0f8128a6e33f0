"""Re-embedding a local store with another model, in place: staged, then swapped in one transaction.

A kill part-way must never leave an index whose vectors mix two models, and a large store must
not be held in memory. So the new vectors are first written, a batch at a time (`[tuning]
batch_bytes` of text), into a side table of the same file (`reembed_stage`, one row per memory:
the target model, the content hash it was made from, its chunks and vectors), each batch in a
short transaction of its own; searches and saves go on meanwhile with the old model. Then one
transaction moves every staged vector into `memories` and records the new model of each index
in `ltm_indexes`: sqlite commits all of it or none. A run that is killed while staging leaves
the store as it was plus staged rows, which the next run of the same target reuses (resumable);
killed in the swap, sqlite rolls the transaction back.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput
from veadk_mem.ltm.base import MemoryRecord, embed_records

if TYPE_CHECKING:
    from veadk_mem.embedding.base import Embedder

STAGE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS reembed_stage ("
    "memory_rowid INTEGER PRIMARY KEY, model TEXT NOT NULL, content_hash TEXT NOT NULL, "
    "chunks INTEGER NOT NULL, vector BLOB NOT NULL)"
)
PAGE = 500  # memories read per query while staging (then cut by bytes)
# Memories per staged batch at most: with short texts the vectors (1.5 KB a chunk at 384-d), not
# the text, are what a batch holds, so the bytes alone would let one batch grow to a gigabyte.
BATCH_MEMORIES = 2048


class Stopped(Exception):
    """The run was asked to stop (Ctrl-C): the store keeps its model; what was staged stays staged."""


class StopSwitch:
    """Ctrl-C against the swap, decided under one lock: a `request()` (a signal handler's, in the main
    thread) either comes before the swap's last check, and the run ends with `Stopped`, nothing
    changed, or after its commit, and returns False: the move happened. No request is lost in
    between, however late the event loop would have passed it on."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a second Ctrl-C may interrupt the first's handler
        self.requested = False
        self.committed = False
        self.late = False  # a stop was asked after the commit

    def request(self) -> bool:
        """Ask the run to stop: True when it will stop with nothing changed, False when the swap has committed."""
        with self._lock:
            if self.committed:
                self.late = True
            else:
                self.requested = True
            return not self.committed

    def check(self) -> None:
        """Between batches: `Stopped` once a stop was asked."""
        if self.requested:
            raise Stopped

    def commit(self, conn: sqlite3.Connection) -> None:
        """Commit the swap's transaction unless a stop was asked first (`Stopped`: the caller rolls back)."""
        with self._lock:
            self.check()
            conn.execute("COMMIT")
            self.committed = True


SWAP_TRIES = 5  # staging rounds when other writers keep adding memories before the swap


@dataclass
class IndexMove:
    """One index of the store: its vectors' model now and how much it holds."""

    index: str
    model: str
    dim: int
    users: int
    memories: int

    def to_json(self) -> dict[str, Any]:
        """The plan's row in `ltm reembed --json`."""
        return {
            "index": self.index,
            "model": self.model,
            "dim": self.dim,
            "users": self.users,
            "memories": self.memories,
        }


@dataclass
class ReembedReport:
    """What a re-embed did (or would do): the target model, each index and the memories embedded."""

    model: str
    dim: int
    indexes: list[IndexMove] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # indexes already on the target model
    embedded: int = 0  # memories embedded by this run
    reused: int = 0  # memories whose vectors an interrupted run had staged
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """`ltm reembed --json`."""
        return {
            "model": self.model,
            "dim": self.dim,
            "dry_run": self.dry_run,
            "indexes": [i.to_json() for i in self.indexes],
            "unchanged": self.unchanged,
            "memories": sum(i.memories for i in self.indexes),
            "embedded": self.embedded,
            "reused": self.reused,
        }


def plan(conn: sqlite3.Connection, indexes: list[str] | None, model: str, dim: int) -> ReembedReport:
    """The indexes to move (all of the file's when `indexes` is None), those already on the model aside."""
    rows = conn.execute(
        "SELECT i.name, i.model, i.dim, count(DISTINCT m.user_id), count(m.rowid) FROM ltm_indexes i "
        "LEFT JOIN memories m ON m.index_name = i.name GROUP BY i.name ORDER BY i.name"
    ).fetchall()
    known = {str(r[0]): IndexMove(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}
    report = ReembedReport(model, dim)
    for name in sorted(known) if indexes is None else indexes:
        found = known.get(name)
        if found is None:
            continue  # nothing stored under it: nothing to move
        if (found.model, found.dim) == (model, dim):
            report.unchanged.append(name)
        else:
            report.indexes.append(found)
    return report


def _marks(names: list[str]) -> str:
    return ",".join("?" * len(names))


def _unstaged(conn: sqlite3.Connection, names: list[str], model: str, after: int, limit: int) -> list[Any]:
    """(rowid, text, content_hash) of memories of these indexes with no vector of `model` staged."""
    return conn.execute(
        "SELECT m.rowid, m.text, m.content_hash FROM memories m LEFT JOIN reembed_stage s "
        "ON s.memory_rowid = m.rowid AND s.model = ? AND s.content_hash = m.content_hash "
        f"WHERE m.index_name IN ({_marks(names)}) AND s.memory_rowid IS NULL AND m.rowid > ? ORDER BY m.rowid LIMIT ?",
        (model, *names, after, limit),
    ).fetchall()


def _staged(conn: sqlite3.Connection, names: list[str], model: str) -> int:
    """How many memories of these indexes have a vector of `model` staged (by an interrupted run)."""
    row = conn.execute(
        "SELECT count(*) FROM memories m JOIN reembed_stage s "
        "ON s.memory_rowid = m.rowid AND s.model = ? AND s.content_hash = m.content_hash "
        f"WHERE m.index_name IN ({_marks(names)})",
        (model, *names),
    ).fetchone()
    return int(row[0])


def _batches(conn: sqlite3.Connection, names: list[str], model: str, batch_bytes: int) -> Iterator[list[Any]]:
    """The unstaged memories in rowid order, in batches of at most about `batch_bytes` of text
    and BATCH_MEMORIES memories."""
    after = -1
    batch: list[Any] = []
    size = 0
    while rows := _unstaged(conn, names, model, after, PAGE):
        after = int(rows[-1][0])
        for row in rows:
            batch.append(row)
            size += len(row[1].encode("utf-8", "surrogatepass"))
            if size >= batch_bytes or len(batch) >= BATCH_MEMORIES:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def _stage(
    conn: sqlite3.Connection,
    names: list[str],
    embedder: Embedder,
    text_of: Callable[[str], str],
    batch_bytes: int,
    progress: Callable[[int], None] | None,
    stop: StopSwitch,
) -> int:
    """Embed and stage every memory of the indexes not staged for the embedder's model; how many."""
    import numpy as np

    done = 0
    for batch in _batches(conn, names, embedder.name, batch_bytes):
        stop.check()
        records = [MemoryRecord(text=str(r[1]), user_id="") for r in batch]
        embed_records(embedder, records, text_of)
        staged = []
        for row, record in zip(batch, records, strict=True):
            block = np.ascontiguousarray(record.vectors, dtype=np.float32)
            staged.append((int(row[0]), embedder.name, str(row[2]), len(block), block.tobytes()))
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO reembed_stage VALUES (?, ?, ?, ?, ?)", staged)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        done += len(batch)
        if progress is not None:
            progress(len(batch))
    return done


def _swap(conn: sqlite3.Connection, names: list[str], embedder: Embedder, stop: StopSwitch) -> bool:
    """Move the staged vectors in and record the model, in one transaction; False (nothing changed)
    when a memory was saved since staging and has no staged vector yet."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _unstaged(conn, names, embedder.name, -1, 1):
            conn.execute("ROLLBACK")
            return False
        conn.execute(
            "UPDATE memories SET model = ?, dim = ?, chunks = s.chunks, vector = s.vector FROM reembed_stage s "
            f"WHERE s.memory_rowid = memories.rowid AND memories.index_name IN ({_marks(names)})",
            (embedder.name, embedder.dim, *names),
        )
        conn.execute(
            f"UPDATE ltm_indexes SET model = ?, dim = ?, generation = generation + 1 WHERE name IN ({_marks(names)})",
            (embedder.name, embedder.dim, *names),
        )
        conn.execute(
            f"DELETE FROM reembed_stage WHERE memory_rowid IN "
            f"(SELECT rowid FROM memories WHERE index_name IN ({_marks(names)})) OR model != ?",
            (*names, embedder.name),
        )
        stop.commit(conn)  # unless asked to stop while the swap ran: then it never happened
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True


def reembed(
    conn: sqlite3.Connection,
    report: ReembedReport,
    embedder: Embedder,
    text_of: Callable[[str], str],
    *,
    batch_bytes: int,
    progress: Callable[[int], None] | None = None,
    stop: StopSwitch | None = None,
) -> ReembedReport:
    """Move the report's indexes to the embedder's model (see the module's docstring); `Stopped`
    when `stop` was requested before the swap commits."""
    stop = stop or StopSwitch()
    names = [i.index for i in report.indexes]
    if not names:
        return report
    conn.execute(STAGE_SCHEMA)
    # Staged vectors of another target (an interrupted run with another --model) are of no use.
    conn.execute("DELETE FROM reembed_stage WHERE model != ?", (embedder.name,))
    report.reused = _staged(conn, names, embedder.name)
    for _ in range(SWAP_TRIES):
        report.embedded += _stage(conn, names, embedder, text_of, batch_bytes, progress, stop)
        if _swap(conn, names, embedder, stop):
            return report
    raise BadInput(
        f"memories kept arriving in {', '.join(names)} while re-embedding: nothing was changed",
        hint="stop the agents writing to this store and run the same command again (staged vectors are kept)",
    )
