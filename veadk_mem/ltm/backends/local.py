"""The `local` backend: an embedded, persistent vector store in one sqlite file.

VeADK's local backend is an in-process index that forgets everything when the process
ends; this one keeps memories in `$XDG_DATA_HOME/vmem/ltm.db` (or `local_path`, or
`:memory:` for a throwaway store) so `vmem ltm save` and `vmem ltm search` can run as
two commands. Search is exact cosine top-k: one float32 matrix per (index, user),
loaded once per process and multiplied with numpy. Each index records the embedding
model and dimension of its vectors, and refuses vectors of another model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from veadk_mem import failure as fail
from veadk_mem.errors import BadInput, StoreError, VmemError
from veadk_mem.ltm.backends import local_reembed
from veadk_mem.ltm.base import BackendHealth, Capability, LongTermMemoryBackend, MemoryRecord
from veadk_mem.ltm.keywords import FUSION_DEPTH, fts_query, fuse_scores, index_terms, reads
from veadk_mem.ltm.provenance import Provenance, from_fields

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from veadk_mem.embedding.base import Embedder

EmbedderFactory = Callable[[str | None], "Embedder"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS ltm_indexes (
    name TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    created_at REAL NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    index_name TEXT NOT NULL,
    user_id TEXT NOT NULL,
    app_name TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL DEFAULT '',
    event_id TEXT NOT NULL DEFAULT '',
    author TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    chunks INTEGER NOT NULL DEFAULT 1,
    created_at REAL NOT NULL,
    vector BLOB NOT NULL,
    event_ids TEXT NOT NULL DEFAULT '',
    event_time REAL,
    policy TEXT NOT NULL DEFAULT '',
    saved_at REAL,
    vmem_version TEXT NOT NULL DEFAULT '',
    UNIQUE (index_name, user_id, content_hash)
);
CREATE TABLE IF NOT EXISTS ltm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS memories_user ON memories (index_name, user_id, created_at);
CREATE INDEX IF NOT EXISTS memories_session ON memories (index_name, user_id, session_id);
"""


def default_path() -> Path:
    """$XDG_DATA_HOME/vmem/ltm.db (XDG_DATA_HOME defaults to ~/.local/share)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "vmem" / "ltm.db"


_CONNECTIONS: dict[str, sqlite3.Connection] = {}


def connect(path: str) -> sqlite3.Connection:
    """One connection per file per process (`:memory:` stores live as long as the process)."""
    if path in _CONNECTIONS:
        return _CONNECTIONS[path]
    new = path != ":memory:" and not Path(path).exists()
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if new:
            os.chmod(path, 0o600)  # memories are personal data: owner only
        conn.execute("PRAGMA busy_timeout = 10000")  # another vmem may be saving: wait, don't fail
        conn.execute("PRAGMA journal_mode=WAL" if path != ":memory:" else "PRAGMA journal_mode=MEMORY")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
        add_provenance_columns(conn)
        conn.execute("INSERT OR IGNORE INTO ltm_meta (key, value) VALUES ('store_id', ?)", (os.urandom(8).hex(),))
        ensure_terms(conn)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: cannot open the local memory store: {exc}") from None
    _CONNECTIONS[path] = conn
    return conn


# Provenance columns (#42): added to a store made before them by ALTER TABLE ADD COLUMN, with
# defaults, so its rows stay as they were and an older vmem, which names its columns, still
# reads and writes it. Old rows keep app, session, event and author; the rest is empty.
PROVENANCE_COLUMNS = (
    ("event_ids", "TEXT NOT NULL DEFAULT ''"),
    ("event_time", "REAL"),
    ("policy", "TEXT NOT NULL DEFAULT ''"),
    ("saved_at", "REAL"),
    ("vmem_version", "TEXT NOT NULL DEFAULT ''"),
)


def add_provenance_columns(conn: sqlite3.Connection) -> None:
    """Migrate a store of an older vmem: add the provenance columns it lacks (nothing else changes)."""
    have = {str(r[1]) for r in conn.execute("PRAGMA table_info(memories)")}
    missing = [(name, kind) for name, kind in PROVENANCE_COLUMNS if name not in have]
    if not missing:
        return
    conn.execute("BEGIN IMMEDIATE")  # two vmem opening an old store: one migrates, the other finds it done
    try:
        have = {str(r[1]) for r in conn.execute("PRAGMA table_info(memories)")}
        for name, kind in missing:
            if name not in have:
                conn.execute(f"ALTER TABLE memories ADD COLUMN {name} {kind}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


# The keyword index: one FTS5 row per memory (same rowid) holding its terms
# (`keywords.index_terms`). A delete trigger keeps it in step with any writer, an older vmem
# included; inserts add their terms in `save`, and `ensure_terms` builds the index of a store
# written before it existed and catches up rows an older vmem appended since.
TERMS_VERSION = "1"  # bump when index_terms changes: the index is rebuilt on open
TERMS_SCHEMA = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memory_terms USING fts5("
    "terms, tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS memory_terms_delete AFTER DELETE ON memories BEGIN "
    "DELETE FROM memory_terms WHERE rowid = old.rowid; END",
)


def ensure_terms(conn: sqlite3.Connection) -> None:
    """Create or complete the keyword index: built once for a store of an older vmem, caught up after one wrote."""
    version = conn.execute("SELECT value FROM ltm_meta WHERE key = 'terms_version'").fetchone()
    if version is not None and version[0] == TERMS_VERSION and not _terms_behind(conn):
        return
    conn.execute("BEGIN IMMEDIATE")  # two vmem opening an old store: one builds, the other finds it built
    try:
        version = conn.execute("SELECT value FROM ltm_meta WHERE key = 'terms_version'").fetchone()
        if version is None or version[0] != TERMS_VERSION or _terms_missing(conn):
            conn.execute("DROP TABLE IF EXISTS memory_terms")
        for statement in TERMS_SCHEMA:
            conn.execute(statement)
        last = conn.execute("SELECT rowid FROM memory_terms ORDER BY rowid DESC LIMIT 1").fetchone()
        cursor = conn.execute(
            "SELECT rowid, text FROM memories WHERE rowid > ? ORDER BY rowid", (last[0] if last else -1,)
        )
        while batch := cursor.fetchmany(5000):
            conn.executemany(
                "INSERT INTO memory_terms (rowid, terms) VALUES (?, ?)", [(r[0], _terms(r[1])) for r in batch]
            )
        conn.execute("INSERT OR REPLACE INTO ltm_meta (key, value) VALUES ('terms_version', ?)", (TERMS_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _terms_missing(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_terms'").fetchone() is None


def _terms_behind(conn: sqlite3.Connection) -> bool:
    """Whether the newest memory has no terms (appended by a vmem without a keyword index)."""
    newest = conn.execute("SELECT rowid FROM memories ORDER BY rowid DESC LIMIT 1").fetchone()
    if newest is None:
        return False
    try:
        return conn.execute("SELECT 1 FROM memory_terms WHERE rowid = ?", (newest[0],)).fetchone() is None
    except sqlite3.OperationalError:  # the table is gone (dropped by hand): build it again
        return True


def _terms(text: str) -> str:
    from veadk_mem.ltm.convert import searchable_text

    return index_terms(searchable_text(text))


@dataclass
class _Matrix:
    """The cached vectors of one (index, user): rows of `ids` own rows of `vectors`."""

    generation: int
    rowids: npt.NDArray[np.int64]
    owners: npt.NDArray[np.int64] | None
    vectors: npt.NDArray[np.float32]


_MATRICES: dict[tuple[str, str, str], _Matrix] = {}
DISK_CACHE_MIN_ROWS = 20_000


class LocalBackend(LongTermMemoryBackend):
    """Memories of one index in the shared sqlite file."""

    name: ClassVar[str] = "local"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.LIST,
            Capability.DELETE,
            Capability.EDIT,
            Capability.HASHES,
            Capability.INDEXES,
            Capability.USERS,
            Capability.EMBEDS,
            Capability.REEMBED,
        }
    )
    search_modes: ClassVar[tuple[str, ...]] = ("vector", "keyword", "hybrid")
    default_search_mode: ClassVar[str] = "hybrid"

    def __init__(self, index: str, *, embedder_factory: EmbedderFactory, local_path: str = "", **_: Any) -> None:
        self.index = index
        self.path = local_path or str(default_path())
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self.precheck_index_naming()

    @property
    def conn(self) -> sqlite3.Connection:
        return connect(self.path)

    def _missing(self) -> bool:
        """True when the store file does not exist yet: reads answer empty instead of creating it."""
        return self.path != ":memory:" and self.path not in _CONNECTIONS and not Path(self.path).exists()

    @property
    def target(self) -> str:
        """The store file."""
        return self.path

    def precheck_index_naming(self) -> None:
        """Any printable name up to 255 characters."""
        if not self.index or len(self.index) > 255 or not self.index.isprintable():
            raise BadInput(f"invalid local index name {self.index!r}: use 1-255 printable characters")

    # --- model bookkeeping -----------------------------------------------------------

    def index_model(self) -> tuple[str, int] | None:
        """(model, dim) of the vectors this index holds, or None for a new index."""
        row = self.conn.execute("SELECT model, dim FROM ltm_indexes WHERE name = ?", (self.index,)).fetchone()
        return (str(row[0]), int(row[1])) if row else None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            stored = None if self._missing() else self.index_model()  # a dry run creates no store
            self._embedder = self._embedder_factory(stored[0] if stored else None)
        return self._embedder

    def _check_model(self, embedder: Embedder) -> None:
        stored = self.index_model()
        if stored is None or stored == (embedder.name, embedder.dim):
            return
        if self._count() == 0:
            self.conn.execute(
                "UPDATE ltm_indexes SET model = ?, dim = ? WHERE name = ?", (embedder.name, embedder.dim, self.index)
            )
            return
        raise BadInput(
            f"index {self.index!r} holds vectors of {stored[0]} ({stored[1]}-d) but the embedder is "
            f"{embedder.describe()}: vectors of two models cannot be compared",
            hint=f"configure model.embedding for {stored[0]}, or use another index (long_term_memory.index)",
        )

    def _count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM memories WHERE index_name = ?", (self.index,)).fetchone()[0])

    def _bump(self) -> None:
        self.conn.execute("UPDATE ltm_indexes SET generation = generation + 1 WHERE name = ?", (self.index,))

    def _generation(self) -> int:
        row = self.conn.execute("SELECT generation FROM ltm_indexes WHERE name = ?", (self.index,)).fetchone()
        return int(row[0]) if row else -1

    # --- the contract ----------------------------------------------------------------

    async def existing_hashes(self, user_id: str, hashes: list[str]) -> set[str]:
        """The hashes among these that this user's index already holds."""
        found: set[str] = set()
        if self._missing():
            return found
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = self.conn.execute(
                f"SELECT content_hash FROM memories WHERE index_name = ? AND user_id = ? AND content_hash IN ({marks})",
                (self.index, user_id, *part),
            )
            found.update(r[0] for r in rows)
        return found

    async def save(
        self, user_id: str, memories: list[MemoryRecord], progress: Callable[[int], None] | None = None
    ) -> list[str]:
        """Store the new memories with their vectors (one per chunk of their searchable text).

        Returns the ids actually inserted: a memory the user's index already holds is skipped.
        """
        import numpy as np

        if not memories:
            return []
        embedder = self.embedder
        self._check_model(embedder)
        self.ready(memories)
        now = time.time()
        rows = []
        for memory in memories:
            memory.id = memory.id or memory_id(self.index, user_id, memory.content_hash)
            memory.created_at = memory.created_at or now
            block = np.ascontiguousarray(memory.vectors, dtype=np.float32)
            count = len(block)
            if block.ndim != 2 or block.shape[1] != embedder.dim:
                raise BadInput(f"memory {memory.content_hash[:12]}: vectors are not {embedder.dim}-d")
            blob = block.tobytes()
            rows.append(
                (
                    memory.id,
                    self.index,
                    user_id,
                    memory.app_name,
                    memory.session_id,
                    memory.event_id,
                    memory.author,
                    memory.text,
                    memory.content_hash,
                    embedder.name,
                    embedder.dim,
                    count,
                    memory.created_at,
                    blob,
                    *_provenance_row(memory.source),
                )
            )
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT OR IGNORE INTO ltm_indexes (name, model, dim, created_at) VALUES (?, ?, ?, ?)",
                (self.index, embedder.name, embedder.dim, now),
            )
            inserted: list[str] = []
            terms: list[tuple[int | None, str]] = []
            for row in rows:
                cursor = conn.execute(_INSERT, row)
                if cursor.rowcount == 1:
                    inserted.append(str(row[0]))
                    terms.append((cursor.lastrowid, _terms(str(row[7]))))
            conn.executemany("INSERT INTO memory_terms (rowid, terms) VALUES (?, ?)", terms)
            self._bump()
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # one transaction: nothing of this save is stored
            raise self._failed(exc, "saving memories") from None
        return inserted

    def service(self) -> fail.Service:
        """How this store's failures are told (`veadk_mem.failure.report`)."""
        return fail.Service(where=f"the local store {self.path}", url_hint="check long_term_memory.local_path")

    @staticmethod
    def _classify(exc: sqlite3.Error) -> fail.Failure:
        """A store that cannot be written (full disk, I/O error, locked, read-only) is gone for
        the rest of a bulk command; any other error refused this one request."""
        if isinstance(exc, sqlite3.OperationalError):
            return fail.Failure(fail.UNREACHABLE, str(exc))
        return fail.Failure(fail.REFUSED, str(exc))

    def _failed(self, exc: sqlite3.Error, what: str) -> VmemError:
        """The error of a failed write, its transaction rolled back."""
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
        return fail.report(self.service(), self._classify(exc), what)

    def matrix(self, user_id: str) -> _Matrix:
        """The user's vectors as one float32 matrix, cached until the index changes.

        In the process, and for large users also on disk next to the store (`.npy` files
        memory-mapped by the next `vmem` invocation), since reading a million vectors out
        of sqlite takes seconds and mapping them takes milliseconds.
        """
        key = (self.path, self.index, user_id)
        generation = self._generation()
        cached = _MATRICES.get(key)
        if cached is not None and cached.generation == generation:
            return cached
        built = self._read_cache(user_id, generation)
        if built is None:
            self.conn.execute("BEGIN")  # one snapshot for the count, the rows and the generation
            try:
                built = self._load_matrix(user_id)
            finally:
                self.conn.execute("COMMIT")
            if len(built.rowids) >= DISK_CACHE_MIN_ROWS:
                self._write_cache(user_id, built)
        _MATRICES[key] = built
        return built

    def _cache_stem(self, user_id: str, index: str | None = None) -> Path | None:
        if self.path == ":memory:":
            return None
        # The store's random id keeps a recreated store from ever reading an old store's cache.
        store_id = self.conn.execute("SELECT value FROM ltm_meta WHERE key = 'store_id'").fetchone()[0]
        digest = hashlib.sha256(f"{store_id}\0{index or self.index}\0{user_id}".encode()).hexdigest()[:24]
        return Path(self.path + ".cache") / digest

    def _read_cache(self, user_id: str, generation: int) -> _Matrix | None:
        import numpy as np

        stem = self._cache_stem(user_id)
        if stem is None:
            return None
        vec_file = stem.with_name(f"{stem.name}-g{generation}.vectors.npy")
        ids_file = stem.with_name(f"{stem.name}-g{generation}.rows.npy")
        if not (vec_file.is_file() and ids_file.is_file()):
            return None
        try:
            rows = np.load(ids_file)
            vectors = np.load(vec_file, mmap_mode="r")
        except (OSError, ValueError):
            return None
        rowids, chunks = rows[0], rows[1]
        owners = None if bool((chunks == 1).all()) else np.repeat(np.arange(len(rowids)), chunks)
        return _Matrix(generation, rowids, owners, vectors)

    def _write_cache(self, user_id: str, built: _Matrix) -> None:
        import numpy as np

        stem = self._cache_stem(user_id)
        if stem is None:
            return
        try:
            stem.parent.mkdir(mode=0o700, exist_ok=True)
            for old in stem.parent.glob(f"{stem.name}-g*.npy"):
                old.unlink(missing_ok=True)
            chunks = np.ones(len(built.rowids), dtype=np.int64)
            if built.owners is not None:
                chunks = np.bincount(built.owners, minlength=len(built.rowids)).astype(np.int64)
            for suffix, array in (
                ("rows", np.stack([built.rowids, chunks])),
                ("vectors", np.asarray(built.vectors)),
            ):
                final = stem.with_name(f"{stem.name}-g{built.generation}.{suffix}.npy")
                partial = final.with_name(final.name + ".part")
                with partial.open("wb") as handle:
                    np.save(handle, array)
                partial.replace(final)
        except OSError:
            return  # the cache is an optimisation; the store is the truth

    def _load_matrix(self, user_id: str) -> _Matrix:
        import numpy as np

        generation = self._generation()
        where = "FROM memories WHERE index_name = ? AND user_id = ?"
        count, total = self.conn.execute(
            f"SELECT count(*), coalesce(sum(chunks), 0) {where}", (self.index, user_id)
        ).fetchone()
        stored = self.index_model()
        dim = stored[1] if stored else 1
        # Filled in batches so the peak is the matrix itself, not every row's bytes on top of it.
        vectors = np.empty((total, dim), dtype=np.float32)
        rowids = np.empty(count, dtype=np.int64)
        chunks = np.empty(count, dtype=np.int64)
        cursor = self.conn.execute(f"SELECT rowid, chunks, vector {where} ORDER BY rowid", (self.index, user_id))
        row_pos = vec_pos = 0
        while batch := cursor.fetchmany(20_000):
            block = np.frombuffer(b"".join(r[2] for r in batch), dtype=np.float32).reshape(-1, dim)
            vectors[vec_pos : vec_pos + len(block)] = block
            rowids[row_pos : row_pos + len(batch)] = [r[0] for r in batch]
            chunks[row_pos : row_pos + len(batch)] = [r[1] for r in batch]
            row_pos += len(batch)
            vec_pos += len(block)
        owners = None if bool((chunks == 1).all()) else np.repeat(np.arange(count), chunks)
        return _Matrix(generation, rowids, owners, vectors)

    def _cosines(self, m: _Matrix, query_vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The cosine of every memory of the matrix; a memory scores as its best chunk."""
        import numpy as np

        scores = m.vectors @ query_vector
        if m.owners is not None:
            best = np.full(len(m.rowids), -np.inf, dtype=np.float32)
            np.maximum.at(best, m.owners, scores)
            scores = best
        return np.asarray(scores, dtype=np.float32)

    @staticmethod
    def _best(scores: npt.NDArray[np.float32], top_k: int) -> npt.NDArray[np.int64]:
        """Positions of the top_k scores, best first (ties in stored order)."""
        import numpy as np

        k = min(top_k, len(scores))
        picked = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        return np.asarray(picked[np.argsort(-scores[picked], kind="stable")], dtype=np.int64)

    def top_k(self, user_id: str, query_vector: npt.NDArray[np.float32], top_k: int) -> list[tuple[int, float]]:
        """(rowid, cosine) of the best top_k memories of the user; a memory scores as its best chunk."""
        m = self.matrix(user_id)
        if len(m.rowids) == 0 or top_k <= 0:
            return []
        scores = self._cosines(m, query_vector)
        return [(int(m.rowids[i]), float(scores[i])) for i in self._best(scores, top_k)]

    async def search(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """Exact cosine top-k over this user's memories only."""
        return await self.search_by(user_id, query, top_k, "vector")

    async def search_by(self, user_id: str, query: str, top_k: int, mode: str) -> list[MemoryRecord]:
        """Cosine (`vector`), BM25 over the keyword index (`keyword`) or both (`hybrid`: `keywords.fuse_scores`)."""
        if self._missing() or self.index_model() is None:
            return []
        if mode == "keyword":  # no model to load
            return list(self.search_keyword(user_id, query, top_k))
        vector = await self._query_vector(query)
        if mode == "hybrid":
            return list(self.search_hybrid(user_id, query, vector, top_k))
        return list(self.search_vector(user_id, vector, top_k))

    async def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        self._check_model(self.embedder)
        vector: npt.NDArray[np.float32] = await self.query_vector(query)
        return vector

    def embedding_text(self, memory: str) -> str:
        """The searchable text: a saved Content's parts, not its JSON scaffolding."""
        from veadk_mem.ltm.convert import searchable_text

        return searchable_text(memory)

    def search_vector(self, user_id: str, query_vector: npt.NDArray[np.float32], top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories for an embedded query, with their cosine scores."""
        hits = self.top_k(user_id, query_vector, top_k)
        if not hits:
            return []
        by_rowid = self._records_by_rowid([h[0] for h in hits])
        out: list[MemoryRecord] = []
        for rowid, score in hits:
            record = by_rowid[rowid]
            record.score = score
            record.metadata["score_kind"] = "cosine"
            out.append(record)
        return out

    def keyword_hits(self, user_id: str, query: str, limit: int) -> list[tuple[int, float]]:
        """(rowid, BM25 score) of the user's memories best matching the query's terms, best first."""

        match = fts_query(query)
        if not match or limit <= 0:
            return []
        rows = self.conn.execute(
            "SELECT t.rowid, bm25(memory_terms) AS rank FROM memory_terms t JOIN memories m ON m.rowid = t.rowid "
            "WHERE memory_terms MATCH ? AND m.index_name = ? AND m.user_id = ? ORDER BY rank, t.rowid LIMIT ?",
            (match, self.index, user_id, limit),
        )
        return [(int(r[0]), -float(r[1])) for r in rows]  # FTS5's bm25() is negated: lower is better

    def search_keyword(self, user_id: str, query: str, top_k: int) -> list[MemoryRecord]:
        """The user's top_k memories by BM25 over the keyword index."""
        hits = self.keyword_hits(user_id, query, top_k)
        by_rowid = self._records_by_rowid([h[0] for h in hits]) if hits else {}
        out: list[MemoryRecord] = []
        for rowid, score in hits:
            record = by_rowid[rowid]
            record.score = score
            record.metadata.update(score_kind="bm25", keyword_score=score)
            out.append(record)
        return out

    def search_hybrid(
        self, user_id: str, query: str, query_vector: npt.NDArray[np.float32], top_k: int
    ) -> list[MemoryRecord]:
        """Both rankings fused (`keywords.fuse_scores`, in [0, 1]); each result also carries its cosine and BM25."""
        import numpy as np

        m = self.matrix(user_id)
        if len(m.rowids) == 0 or top_k <= 0:
            return []
        depth = max(FUSION_DEPTH, top_k)
        cosines = self._cosines(m, query_vector)
        best = self._best(cosines, depth)
        by_vector = [int(m.rowids[i]) for i in best]
        keyword = dict(self.keyword_hits(user_id, query, depth))
        # The matrix is in rowid order; a memory saved since it was read (another vmem) is left out.
        where = dict(zip(keyword, np.searchsorted(m.rowids, list(keyword)).tolist(), strict=True))
        keyword = {r: v for r, v in keyword.items() if where[r] < len(m.rowids) and m.rowids[where[r]] == r}
        vector = [(rowid, float(cosines[i])) for rowid, i in zip(by_vector, best, strict=True)]
        cosine_of = {r: float(cosines[where[r]]) for r in keyword}
        blind = not reads(self.embedder.reads_cjk, query)
        fused = fuse_scores(vector, list(keyword.items()), cosine_of=cosine_of, blind=blind)[:top_k]
        by_rowid = self._records_by_rowid([int(hit.key) for hit in fused])
        out: list[MemoryRecord] = []
        for hit in fused:
            record = by_rowid[int(hit.key)]
            record.score = hit.score
            record.metadata.update(score_kind="fused", vector_score=hit.cosine, keyword_score=hit.bm25)
            out.append(record)
        return out

    def _records_by_rowid(self, rowids: list[int]) -> dict[int, MemoryRecord]:
        marks = ",".join("?" * len(rowids))
        rows = self.conn.execute(f"SELECT rowid, {_COLUMNS} FROM memories WHERE rowid IN ({marks})", rowids)
        return {int(r[0]): _record(r[1:]) for r in rows}

    async def list_memories(
        self, user_id: str, *, limit: int | None = None, session_id: str | None = None
    ) -> list[MemoryRecord]:
        """The user's memories in this index, newest first."""
        if self._missing():
            return []
        sql = f"SELECT {_COLUMNS} FROM memories WHERE index_name = ? AND user_id = ?"
        params: list[Any] = [self.index, user_id]
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        sql += " ORDER BY created_at DESC, rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_record(r) for r in self.conn.execute(sql, params)]

    async def iter_memories(
        self, user_id: str, *, vectors: bool = False, batch: int = 1000
    ) -> AsyncIterator[list[MemoryRecord]]:
        """The user's memories in this index, oldest first, `batch` rows at a time (constant memory)."""
        import numpy as np

        if self._missing():
            return
        extra = ", dim, vector" if vectors else ""
        last = -1
        while True:
            # Keyset pages: each is its own short read, so a long export never holds the file.
            rows = self.conn.execute(
                f"SELECT rowid, {_COLUMNS}{extra} FROM memories WHERE index_name = ? AND user_id = ? AND rowid > ? "
                "ORDER BY rowid LIMIT ?",
                (self.index, user_id, last, batch),
            ).fetchall()
            if not rows:
                return
            last = int(rows[-1][0])
            records = []
            for row in rows:
                record = _record(row[1 : 1 + _WIDTH])
                if vectors:
                    record.vectors = np.frombuffer(row[2 + _WIDTH], dtype=np.float32).reshape(-1, row[1 + _WIDTH])
                records.append(record)
            yield records

    async def scopes(self) -> list[tuple[str, str]]:
        """Every (index, user) pair in this file; this backend is bound to one index, but the file holds all."""
        if self._missing():
            return []
        rows = self.conn.execute("SELECT DISTINCT index_name, user_id FROM memories ORDER BY 1, 2")
        return [(str(r[0]), str(r[1])) for r in rows]

    async def embedding_model(self) -> tuple[str, int] | None:
        """The model of this index's vectors; for a new index, the configured embedder's."""
        stored = None if self._missing() else self.index_model()
        if stored is not None and self._count() > 0:
            return stored
        return (self.embedder.name, self.embedder.dim)

    async def delete_memories(self, user_id: str, ids: list[str]) -> int:
        """Delete these memories of the user (ids of other users are left alone)."""
        if not ids:
            return 0
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            deleted = 0
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = ",".join("?" * len(part))
                deleted += conn.execute(  # rowcount: the memories, not their keyword rows the trigger drops
                    f"DELETE FROM memories WHERE index_name = ? AND user_id = ? AND id IN ({marks})",
                    (self.index, user_id, *part),
                ).rowcount
            self._bump()
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed(exc, "deleting memories") from None
        self._drop_cache(user_id)  # no copy of deleted vectors may stay behind
        return deleted

    def _drop_cache(self, user_id: str, index: str | None = None) -> None:
        stem = self._cache_stem(user_id, index)
        if stem is not None and stem.parent.is_dir():
            for old in stem.parent.glob(f"{stem.name}-g*"):
                old.unlink(missing_ok=True)

    def reembed_plan(self, indexes: list[str] | None, embedder: Embedder) -> local_reembed.ReembedReport:
        """What `reembed` would move to the embedder's model: these indexes of the file, or all of them."""
        if self._missing():
            return local_reembed.ReembedReport(embedder.name, embedder.dim)
        return local_reembed.plan(self.conn, indexes, embedder.name, embedder.dim)

    def reembed(
        self,
        report: local_reembed.ReembedReport,
        embedder: Embedder,
        *,
        batch_bytes: int,
        progress: Callable[[int], None] | None,
        stop: local_reembed.StopSwitch | None = None,
    ) -> local_reembed.ReembedReport:
        """Move the planned indexes to the embedder's model in place: staged, then swapped in one
        transaction (`local_reembed`); a blocking call, run in a worker thread, which `stop.request()`
        ends (`local_reembed.Stopped`) before the swap commits."""
        names = [i.index for i in report.indexes]
        users = self.conn.execute(
            f"SELECT DISTINCT index_name, user_id FROM memories WHERE index_name IN ({','.join('?' * len(names))})",
            names,
        ).fetchall()
        try:
            done = local_reembed.reembed(
                self.conn, report, embedder, self.embedding_text, batch_bytes=batch_bytes, progress=progress, stop=stop
            )
        except sqlite3.Error as exc:
            raise self._failed(exc, "re-embedding memories") from None
        for index, user in users:  # the cached matrices of the old model are of no more use
            self._drop_cache(str(user), str(index))
        if self._embedder is not None and self.index in names:
            self._embedder = embedder
        return done

    async def known_indexes(self, user_id: str) -> list[str]:
        """Every index in this file that holds memories of the user."""
        if self._missing():
            return []
        rows = self.conn.execute("SELECT DISTINCT index_name FROM memories WHERE user_id = ? ORDER BY 1", (user_id,))
        return [str(r[0]) for r in rows]

    async def health(self, user_id: str | None = None) -> BackendHealth:
        """The store file, its memories, users, indexes and models; never creates the file."""
        report = BackendHealth(target=self.target)
        if self._missing():
            report.exists = False
            report.notes.append("no store yet (created by the first save)")
            return report
        info = self.stats()
        stored = self.index_model()
        report.exists = stored is not None
        report.dimension = stored[1] if stored else None
        report.memories = info["memories"]
        if user_id is not None:
            report.memories = len(await self.list_memories(user_id))
        report.model = ", ".join(info["models"]) or "no vectors yet"
        report.notes.append(f"{info['users']} users in {info['indexes']} indexes")
        terms = int(self.conn.execute("SELECT count(*) FROM memory_terms").fetchone()[0])
        report.notes.append(f"keyword index: {terms} of {info['memories']} memories")
        if terms != info["memories"]:
            report.problems.append(f"the keyword index holds {terms} memories, the store {info['memories']}")
        return report

    def stats(self) -> dict[str, Any]:
        """Counts over the whole file for `vmem doctor`: memories, users, indexes and their models."""
        memories, users, indexes = self.conn.execute(
            "SELECT count(*), count(DISTINCT user_id), count(DISTINCT index_name) FROM memories"
        ).fetchone()
        models = sorted({str(r[0]) for r in self.conn.execute("SELECT model FROM ltm_indexes")})
        return {"memories": memories, "users": users, "indexes": indexes, "models": models}


_INSERT = (
    "INSERT OR IGNORE INTO memories (id, index_name, user_id, app_name, session_id, event_id, author, "
    "text, content_hash, model, dim, chunks, created_at, vector, event_ids, event_time, policy, saved_at, "
    "vmem_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_COLUMNS = (
    "id, user_id, app_name, session_id, event_id, author, text, content_hash, created_at, model, "
    "event_ids, event_time, policy, saved_at, vmem_version"
)
_WIDTH = 15  # columns in _COLUMNS


def _provenance_row(source: Provenance | None) -> tuple[str, float | None, str, float | None, str]:
    """The provenance columns of a memory (empty: not recorded)."""
    if source is None:
        return ("", None, "", None, "")
    events = json.dumps(source.event_ids, ensure_ascii=False) if source.event_ids else ""
    return (events, source.event_time, source.policy, source.saved_at, source.vmem_version)


def _record(row: Any) -> MemoryRecord:
    return MemoryRecord(
        id=row[0],
        user_id=row[1],
        app_name=row[2],
        session_id=row[3],
        event_id=row[4],
        author=row[5],
        text=row[6],
        content_hash=row[7],
        created_at=row[8],
        metadata={"model": row[9]},
        source=from_fields(
            {
                "app_name": row[2],
                "user_id": row[1],
                "session_id": row[3],
                "event_id": row[4],
                "author": row[5],
                "event_ids": row[10],
                "event_time": row[11],
                "policy": row[12],
                "saved_at": row[13],
                "vmem_version": row[14],
            }
        ),
    )


def memory_id(index: str, user_id: str, digest: str) -> str:
    """A stable id: the same memory of the same user in the same index always gets the same id."""
    return hashlib.sha256(f"{index}\0{user_id}\0{digest}".encode()).hexdigest()[:16]
