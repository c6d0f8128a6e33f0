"""Long-term memory as a JSONL file: export, validated import, and copy between backends.

The file is a header record, then one memory per line, exactly as the source stored it.
Import goes through the target's facade, so the target's layout is VeADK's and content
hashes keep it idempotent; vectors are reused only when the file's embedding model and
dimension equal the target's, and re-embedded by the target otherwise.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from veadk_mem import __version__, files, jsonio
from veadk_mem.errors import BadInput, NotSupported, PartialWrite, StoreUnreachable, VmemError
from veadk_mem.jsonio import loads
from veadk_mem.ltm.base import Capability, MemoryRecord
from veadk_mem.ltm.bounds import BATCH_BYTES
from veadk_mem.ltm.ledger import LedgerError
from veadk_mem.ltm.provenance import from_fields

if TYPE_CHECKING:
    from veadk_mem.ltm.facade import LongTermMemory

FORMAT = "vmem-ltm"
VERSION = 1
BATCH = 500
RECORD_OVERHEAD = 256  # bytes a record's ids and metadata take beside its text and vectors, about
_HASH = re.compile(r"[0-9a-f]{64}")


# --- export -------------------------------------------------------------------------------


@dataclass
class ExportScope:
    """Which memories to export: one user or all, one index or every index holding them."""

    user_id: str | None = None
    all_users: bool = False
    index: str | None = None


async def _pairs(ltm: LongTermMemory, scope: ExportScope) -> list[tuple[str, str]]:
    """The (index, user) pairs the scope covers."""
    if scope.all_users == (scope.user_id is not None):
        raise BadInput("say whose memories to export: --user U or --all-users (exactly one)")
    if scope.all_users:
        everyone = ltm.backend_for(scope.index)
        everyone.require(Capability.USERS)
        pairs = await everyone.scopes()
        return [p for p in pairs if scope.index is None or p[0] == scope.index]
    assert scope.user_id is not None
    if scope.index is not None:
        return [(scope.index, scope.user_id)]
    backend = ltm.backend_for(None)
    known = await backend.known_indexes(scope.user_id) if backend.can(Capability.INDEXES) else None
    if known is None:
        raise NotSupported(
            f"the {ltm.backend_name} backend cannot tell which indexes hold a user's memories",
            hint="name the index with --index or the app with --app",
        )
    return [(index, scope.user_id) for index in known]


def header(ltm: LongTermMemory, model: tuple[str, int] | None) -> dict[str, Any]:
    """The first line of an export: what wrote it and with which embedding model."""

    return {
        "kind": "header",
        "format": FORMAT,
        "version": VERSION,
        "backend": ltm.backend_name,
        "vmem_version": __version__,
        "embedding_model": model[0] if model else None,
        "dimension": model[1] if model else None,
        "exported_at": time.time(),
    }


def record_line(record: MemoryRecord, *, index: str, backend: str, model: tuple[str, int] | None) -> dict[str, Any]:
    """One memory as an export line (snake_case, vmem's own record)."""
    line: dict[str, Any] = {
        "kind": "memory",
        "text": record.text,
        "user_id": record.user_id,
        "app_name": record.app_name,
        "index": index,
        "backend": backend,
        "session_id": record.session_id,
        "event_id": record.event_id,
        "author": record.author,
        "content_hash": record.content_hash,
        "created_at": record.created_at,
        "id": record.id,
        "metadata": record.metadata,
    }
    if record.source is not None:  # provenance travels with the memory: an import or copy keeps it
        line["source"] = record.source.to_json()
    if record.vectors is not None:
        import numpy as np

        block = np.ascontiguousarray(record.vectors, dtype="<f4")
        # Exact and five times faster than decimal floats: little-endian float32, base64.
        line["vectors_b64"] = base64.b64encode(block.tobytes()).decode("ascii")
        line["embedding_model"] = model[0] if model else None
        line["dimension"] = int(block.shape[-1])
    return line


async def export_lines(
    ltm: LongTermMemory, scope: ExportScope, *, vectors: bool = False
) -> AsyncIterator[dict[str, Any]]:
    """The header, then every memory in scope, streamed a page at a time."""
    pairs = await _pairs(ltm, scope)
    model = await ltm.backend_for(None if not pairs else pairs[0][0]).embedding_model() if pairs else None
    yield header(ltm, model)
    for index, user_id in pairs:
        backend = ltm.backend_for(index=index)
        backend.require(Capability.LIST)
        index_model = await backend.embedding_model() if vectors else model
        async for page in backend.iter_memories(user_id, vectors=vectors):
            for record in page:
                yield record_line(record, index=index, backend=ltm.backend_name, model=index_model)


def dumps(line: dict[str, Any]) -> str:
    """One JSONL line, compact (the one encoder: NaN in metadata is written as null)."""
    return jsonio.dumps(line, compact=True)


def atomic_output(path: str) -> AbstractContextManager[IO[str]]:
    """The export's `-o` file, written by the one writer (`veadk_mem.files`): it appears whole
    or not at all, 0600, never through a link; a full disk is exit 1 naming it; gzip when its
    name ends in `.gz`."""
    return files.atomic_output(path, option="-o", compress=files.compression(path))


# --- reading an export --------------------------------------------------------------------


@dataclass
class FileHeader:
    """What the first line said."""

    backend: str
    embedding_model: str | None
    dimension: int | None


def _fail(where: str, line: int, message: str) -> BadInput:
    return BadInput(f"{where}:{line}: {message}")


def _string(obj: dict[str, Any], key: str, where: str, line: int, *, required: bool = False) -> str:
    value = obj.get(key, "")
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise _fail(where, line, f"field {key!r} must be a string")
    if required and not value:
        raise _fail(where, line, f"field {key!r} is missing or empty")
    if "\x00" in value:
        raise _fail(where, line, f"field {key!r} holds a NUL character")
    return value


def parse_header(obj: Any, where: str) -> FileHeader:
    """Check the header line (line 1)."""
    if not isinstance(obj, dict) or obj.get("kind") != "header":
        raise _fail(where, 1, f"not a vmem long-term memory export: the first line must be a {FORMAT} header")
    if obj.get("format") != FORMAT:
        raise _fail(where, 1, f"field 'format' must be {FORMAT!r}")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
        raise _fail(where, 1, f"field 'version': this vmem reads format version {VERSION}, not {version!r}")
    model = obj.get("embedding_model")
    dim = obj.get("dimension")
    if model is not None and not isinstance(model, str):
        raise _fail(where, 1, "field 'embedding_model' must be a string or null")
    if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim < 1):
        raise _fail(where, 1, "field 'dimension' must be a positive integer or null")
    return FileHeader(str(obj.get("backend") or ""), model, dim)


def _source(value: Any, where: str, line: int) -> Any:
    """The provenance of an export line's `source` (an object or null), else BadInput naming the line."""
    if value is not None and not isinstance(value, dict):
        raise _fail(where, line, "field 'source' must be an object or null")
    return from_fields(value)


def parse_record(
    obj: Any, where: str, line: int, *, rehash: bool = False
) -> tuple[str, MemoryRecord, str | None, int | None]:
    """(index, record, vector model, dimension) of one memory line, or BadInput naming the line and field.

    The content hash is vmem's own: always recomputed from the text. A line whose
    `content_hash` disagrees (text edited, hash kept) is refused unless `rehash` says to
    recompute and go on; trusted, it would store the text under another text's identity.
    """
    if not isinstance(obj, dict):
        raise _fail(where, line, "a memory line must be a JSON object")
    if obj.get("kind", "memory") != "memory":
        raise _fail(where, line, f"field 'kind' must be 'memory', not {obj.get('kind')!r}")
    text = _string(obj, "text", where, line, required=True)
    record = MemoryRecord(
        text=text,
        user_id=_string(obj, "user_id", where, line, required=True),
        app_name=_string(obj, "app_name", where, line),
        session_id=_string(obj, "session_id", where, line),
        event_id=_string(obj, "event_id", where, line),
        author=_string(obj, "author", where, line),
    )
    index = _string(obj, "index", where, line)
    digest = obj.get("content_hash")
    if digest not in (None, ""):
        if not isinstance(digest, str) or not _HASH.fullmatch(digest):
            raise _fail(where, line, "field 'content_hash' must be 64 lowercase hex digits")
        if digest != record.content_hash and not rehash:
            raise _fail(
                where,
                line,
                "field 'content_hash' is not the hash of field 'text' (was the text edited?); "
                "pass --rehash to recompute it",
            )
    created = obj.get("created_at")
    if created is not None:
        if not isinstance(created, (int, float)) or isinstance(created, bool) or not math.isfinite(created):
            raise _fail(where, line, "field 'created_at' must be a finite number of seconds or null")
        if not 0 <= created < 253402300800:  # up to 9999-12-31
            raise _fail(where, line, "field 'created_at' is out of range")
        record.created_at = float(created)
    metadata = obj.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise _fail(where, line, "field 'metadata' must be an object")
    record.metadata = metadata
    record.source = _source(obj.get("source"), where, line)
    model, dim = None, None
    vectors, packed = obj.get("vectors"), obj.get("vectors_b64")
    if vectors is not None or packed is not None:
        model = obj.get("embedding_model")
        dim = obj.get("dimension")
        if not isinstance(model, str) or not model:
            raise _fail(where, line, "field 'embedding_model' is required with vectors")
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise _fail(where, line, "field 'dimension' must be a positive integer with vectors")
        record.vectors = _vectors(vectors, packed, dim, where, line)
    return index, record, model, dim


def _vectors(vectors: Any, packed: Any, dim: int, where: str, line: int) -> Any:
    """The (chunks, dim) float32 matrix of `vectors` (lists of numbers) or `vectors_b64`."""
    import numpy as np

    if packed is not None:
        if not isinstance(packed, str):
            raise _fail(where, line, "field 'vectors_b64' must be a base64 string")
        try:
            raw = base64.b64decode(packed, validate=True)
        except (binascii.Error, ValueError):
            raise _fail(where, line, "field 'vectors_b64' is not valid base64") from None
        if not raw or len(raw) % (4 * dim):
            raise _fail(where, line, f"field 'vectors_b64' does not hold whole {dim}-d float32 vectors")
        block = np.frombuffer(raw, dtype="<f4").reshape(-1, dim)
        name = "vectors_b64"
    else:
        if not isinstance(vectors, list) or not vectors:
            raise _fail(where, line, "field 'vectors' must be a non-empty list of vectors")
        for i, vector in enumerate(vectors):
            if not isinstance(vector, list) or len(vector) != dim:
                raise _fail(where, line, f"field 'vectors[{i}]' must be a list of {dim} numbers")
            if not set(map(type, vector)) <= {float, int}:
                bad = next(v for v in vector if type(v) not in (float, int))
                raise _fail(where, line, f"field 'vectors[{i}]' holds {bad!r}, not a number")
        block = np.asarray(vectors, dtype=np.float32)
        name = "vectors"
    if not np.isfinite(block).all():
        raise _fail(where, line, f"field {name!r} holds a value that is not a finite float32 number")
    return block


def _loads(text: str, where: str, line: int) -> Any:
    """One line of an export, decoded; NaN and Infinity are refused (they are not JSON)."""
    return loads(text, f"{where}:{line}", finite=True)


@dataclass
class ExportFile:
    """A validated export on disk (stdin is spooled first), read twice: check, then load."""

    path: Path
    where: str
    header: FileHeader
    memories: int
    spooled: bool = False
    indexes: set[str] = field(default_factory=set)  # the indexes the lines name ("" for none)
    rehash: bool = False  # a content_hash that disagrees with its text is recomputed, not refused
    rehashed: int = 0  # lines whose content_hash was recomputed

    def records(self) -> Iterator[tuple[str, MemoryRecord, str | None, int | None]]:
        """Every memory line, parsed (the file was validated already)."""
        with self.path.open(encoding="utf-8") as handle:
            for number, text in enumerate(handle, start=1):
                if number == 1 or not text.strip():
                    continue
                yield parse_record(_loads(text, self.where, number), self.where, number, rehash=self.rehash)

    def close(self) -> None:
        if self.spooled:
            self.path.unlink(missing_ok=True)


def open_export(source: str, progress: Callable[[int], None] | None = None, *, rehash: bool = False) -> ExportFile:
    """Validate every line of an export file (or `-`) before anything is written.

    rehash: recompute a content_hash that disagrees with its text instead of refusing the line.
    """
    spooled = False
    if source == "-":
        fd, temp = tempfile.mkstemp(prefix="vmem-ltm-import-", suffix=".jsonl")  # 0600
        spooled = True
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := sys.stdin.buffer.read(1 << 20):
                    out.write(chunk)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        path, where = Path(temp), "<stdin>"
    else:
        path, where = Path(source), source
        if not path.exists():
            raise BadInput(f"{source}: no such file")
        if path.is_dir():
            raise BadInput(f"{source}: is a directory, not an export file")
    try:
        head: FileHeader | None = None
        count = rehashed = 0
        indexes: set[str] = set()
        with path.open(encoding="utf-8", errors="strict") as handle:
            try:
                for number, text in enumerate(handle, start=1):
                    if not text.strip():
                        continue
                    obj = _loads(text, where, number)
                    if number == 1:
                        head = parse_header(obj, where)
                        continue
                    index, record, _, _ = parse_record(obj, where, number, rehash=rehash)
                    indexes.add(index)
                    rehashed += obj.get("content_hash") not in (None, "", record.content_hash)
                    count += 1
                    if progress is not None:
                        progress(1)
            except UnicodeDecodeError:
                raise BadInput(f"{where}: not UTF-8 text") from None
        if head is None:
            raise BadInput(f"{where}: empty file; a {FORMAT} export starts with a header line")
        return ExportFile(path, where, head, count, spooled, indexes, rehash, rehashed)
    except BaseException:
        if spooled:
            path.unlink(missing_ok=True)
        raise


# --- import -------------------------------------------------------------------------------


@dataclass
class ImportSummary:
    """What an import or copy did (vmem's own report: snake_case)."""

    read: int = 0
    saved: int = 0
    duplicates: int = 0
    failed: int = 0
    reembedded: int = 0
    reused_vectors: int = 0
    ledger_skipped: int = 0  # sent before, by vmem's replay ledger (a store that cannot say what it holds)
    failures: list[str] = field(default_factory=list)
    stopped: bool = False  # the store went away: the rest of the input was not read

    def as_dict(self, dry_run: bool) -> dict[str, Any]:
        return {
            "dry_run": dry_run,
            "stopped": self.stopped,
            "read": self.read,
            "saved": self.saved,
            "duplicates": self.duplicates,
            "ledger_skipped": self.ledger_skipped,
            "failed": self.failed,
            "reused_vectors": self.reused_vectors,
            "reembedded": self.reembedded,
            "failures": self.failures,
        }


def record_bytes(record: MemoryRecord) -> int:
    """About how many bytes a memory waiting for its batch holds: its text and its vectors."""
    vectors = record.vectors
    return RECORD_OVERHEAD + len(record.text) + (int(getattr(vectors, "nbytes", 0)) if vectors is not None else 0)


def precheck_indexes(target: LongTermMemory, names: set[str], index: str | None = None) -> None:
    """Open the target's backend on every index an import will write, so a name the store
    refuses is bad input before the first memory is saved, not after some."""
    for name in {index} if index else names - {""}:
        target.backend_for(index=name)


async def import_records(
    target: LongTermMemory,
    records: AsyncIterator[tuple[str, MemoryRecord, str | None, int | None]] | Iterator[Any],
    *,
    index: str | None = None,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    notice: Callable[[str], None] | None = None,
    batch_bytes: int = BATCH_BYTES,
) -> ImportSummary:
    """Save records into the target facade in batches per (index, user), skipping what it holds.

    A batch is BATCH records; the batches waiting hold at most `batch_bytes` bytes of text and
    vectors between them (past that, every waiting batch is saved).
    """
    summary = ImportSummary()
    pending: dict[tuple[str, str], list[MemoryRecord]] = {}
    held = 0  # bytes of the records waiting in `pending`
    models: dict[str, tuple[str, int] | None] = {}
    said: set[str] = set()

    async def target_model(name: str) -> tuple[str, int] | None:
        if name not in models:
            models[name] = await target.backend_for(index=name).embedding_model()
        return models[name]

    async def flush(key: tuple[str, str]) -> None:
        batch = pending.pop(key, [])
        if not batch:
            return
        name, user_id = key
        attempted = len(batch)  # what a failure leaves unsaved: the batch, less what was there already
        try:
            skipped: list[MemoryRecord] = []
            new = await target.new_records(user_id, batch, name, skipped)
            summary.ledger_skipped += len(skipped)
            attempted = len(new)
            summary.duplicates += len(batch) - len(new)
            reused = sum(1 for r in new if r.vectors is not None)
            summary.reused_vectors += reused
            if models.get(name) is not None:
                summary.reembedded += len(new) - reused
            if new:  # a dry run saves into the facade's in-memory store
                into = target.dry_run_backend(name) if dry_run else None
                ids = await target.save_records(user_id, new, name, into=into)
                summary.saved += len(ids)
                summary.duplicates += len(new) - len(ids)
        except VmemError as exc:
            # what the store acknowledged before failing is saved; the rest of this batch failed
            stored = len(exc.stored) if isinstance(exc, PartialWrite) else 0
            summary.saved += stored
            summary.failed += attempted - stored
            if isinstance(exc, StoreUnreachable | LedgerError) or (isinstance(exc, PartialWrite) and exc.lost):
                # every later batch would fail the same way (a lost store, a replay ledger that
                # cannot be used): one line, and stop here
                summary.stopped = True
                summary.failures.append(f"stopped after {summary.read:,} memories read: {exc.message}")
            else:
                summary.failures.append(f"index {name}, user {user_id}: {len(batch)} memories: {exc.message}")
        if progress is not None:
            progress(len(batch))

    async def each() -> AsyncIterator[Any]:
        if hasattr(records, "__aiter__"):
            async for item in records:
                yield item
        else:
            for item in records:
                yield item

    async for source_index, record, model, dim in each():
        summary.read += 1
        name = index or source_index or target.index_for(record.app_name or None)
        wanted = await target_model(name)
        if record.vectors is not None and wanted is not None and (model, dim) == wanted:
            how = f"index {name}: reusing the file's {model} vectors"
        else:
            record.vectors = None
            how = f"index {name}: embedding with {wanted[0]}" if wanted else ""
            if model and wanted:
                how = f"index {name}: re-embedding with {wanted[0]} ({wanted[1]}-d; the file's vectors are {model})"
        if how and how not in said and notice is not None:
            said.add(how)
            notice(how)
        record.id = ""  # the target gives its own ids (a source id may clash in another index)
        key = (name, record.user_id)
        pending.setdefault(key, []).append(record)
        held += record_bytes(record)
        if len(pending[key]) >= BATCH or held >= batch_bytes:
            # a batch of rows for this (index, user); or the bytes of every batch waiting: all of them
            for waiting in [key] if held < batch_bytes else list(pending):
                held -= sum(record_bytes(r) for r in pending.get(waiting, []))
                await flush(waiting)
                if summary.stopped:
                    return summary
    for key in list(pending):
        await flush(key)
        if summary.stopped:
            break
    return summary


async def copy_memories(
    source: LongTermMemory,
    target: LongTermMemory,
    scope: ExportScope,
    *,
    to_index: str | None = None,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    notice: Callable[[str], None] | None = None,
    batch_bytes: int = BATCH_BYTES,
) -> ImportSummary:
    """Export piped into import in one process, vectors carried when both sides use one model."""

    async def lines(vectors: bool) -> AsyncIterator[dict[str, Any]]:
        stream = export_lines(source, scope, vectors=vectors)
        await stream.__anext__()  # the header
        async for line in stream:
            yield line

    async def records() -> AsyncIterator[tuple[str, MemoryRecord, str | None, int | None]]:
        pairs = await _pairs(source, scope)
        vectors = bool(pairs) and await source.backend_for(index=pairs[0][0]).embedding_model() is not None
        started = False
        try:
            async for line in lines(vectors):
                started = True
                yield _line_record(line)
        except NotSupported:
            if started or not vectors:
                raise
            # The source cannot hand out its vectors: copy the text and let the target embed.
            async for line in lines(False):
                yield _line_record(line)

    return await import_records(
        target, records(), index=to_index, dry_run=dry_run, progress=progress, notice=notice, batch_bytes=batch_bytes
    )


def _line_record(line: dict[str, Any]) -> tuple[str, MemoryRecord, str | None, int | None]:
    """An export line (from this process, so already valid) as (index, record, model, dimension)."""
    record = MemoryRecord(
        text=line["text"],
        user_id=line["user_id"],
        app_name=line["app_name"],
        session_id=line["session_id"],
        event_id=line["event_id"],
        author=line["author"],
        created_at=line["created_at"],  # the content hash is recomputed from the text, never carried
        metadata=dict(line["metadata"] or {}),
        source=from_fields(line.get("source")),
    )
    if "vectors_b64" in line:
        import numpy as np

        raw = base64.b64decode(line["vectors_b64"])
        record.vectors = np.frombuffer(raw, dtype="<f4").reshape(-1, line["dimension"])
    return line["index"], record, line.get("embedding_model"), line.get("dimension")
