"""Session import: read and check an export file, then write it in batched transactions.

The file is read twice: first every record is parsed and checked against the target's
limits (`limits.py`), the session keys are checked for collisions under the target's
collation and for stored sessions newer than the file; only then is anything written.
The second read, which builds the rows, runs in a child process for a large file
(`reader.py`), started while the first is under way. Stdin is spooled to a private
temporary file for the two passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.bulk import bulk_objects, collect_young
from veadk_mem.errors import BadInput
from veadk_mem.sessions.bigline import BigLine, BigSession

if TYPE_CHECKING:
    from veadk_mem import events as ev
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.rawsession import RawSession
    from veadk_mem.sessions.reader import ReaderProcess
    from veadk_mem.sessions.store import Progress, SessionStore

SPOOL_PREFIX = "vmem-stdin-"
_STALE_AGE = 24 * 3600  # a spool or .part file older than this belongs to no running vmem


@dataclass
class ImportReport:
    """What an import wrote (sessions counts only committed ones)."""

    sessions: int = 0
    events: int = 0
    app_states: int = 0
    user_states: int = 0
    layout: str = ""
    created_tables: bool = False
    replaced: int = 0  # sessions that were already there and were written over, not duplicated
    skipped: list[str] = field(default_factory=list)  # sessions newer in the database (see --force)
    dry_run: bool = False  # checked and counted; nothing written
    warnings: list[str] = field(default_factory=list)  # fields an old layout could not hold, ...

    def to_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "sessions": self.sessions,
            "replaced": self.replaced,
            "events": self.events,
            "appStates": self.app_states,
            "userStates": self.user_states,
            "layout": self.layout,
            "createdTables": self.created_tables,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class FileKey:
    """One session of an import file: its key, its lastUpdateTime, and where it is."""

    app_name: str
    user_id: str
    id: str
    update_time: float
    where: str

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}/{self.id}"


def file_update_time(session: ev.Session | RawSession) -> float:
    """The update time an import stores for `session`: lastUpdateTime, else its newest event."""
    stamps = [e.timestamp for e in session.events]
    return session.last_update_time or (max(stamps) if stamps else 0.0)


# --- records ------------------------------------------------------------------------------


def _check_state_record(data: dict[str, Any], where: str) -> dict[str, Any]:
    kind = data["kind"]
    fields = ("appName", "state") if kind == "app_state" else ("appName", "userId", "state")
    record: dict[str, Any] = {"kind": kind}
    for name in fields:
        snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)
        value = data.get(name, data.get(snake))
        expected: type = dict if name == "state" else str
        if not isinstance(value, expected):
            raise BadInput(f"{where}: $.{name}: expected {'an object' if expected is dict else 'a string'}")
        record[name] = value
    return record


def _fill_event_ids(session: ev.Session, where: str) -> None:
    from veadk_mem.sessions.rawsession import event_id

    seen: set[str] = set()
    for index, event in enumerate(session.events):
        if not event.id:
            event.id = event_id(session.app_name, session.user_id, session.id, index)
        if event.id in seen:
            raise BadInput(f"{where}: $.events[{index}].id: duplicate event id {event.id!r}")
        seen.add(event.id)


def iter_checked(
    source: str | Path,
    name: str | None = None,
    limits: Limits | None = None,
    *,
    big: str | None = None,
    columns: bool = False,
) -> Iterator[tuple[str, Any]]:
    """(where, record) for each session and app_state / user_state record, validated.

    With `limits`, also every value the target database would refuse at write time.
    `big` streams JSONL lines of `bigline.big_line_bytes()` and more instead of decoding
    them: "check" checks such a line and gives a `bigline.BigSession` (its events spooled:
    the caller removes the spool, `BigSession.remove_spool`), "skip" only locates
    it (a `bigline.BigLine`: the write pass, after the check pass checked it); `columns`
    spools a checked one's events as row columns (`bigline.check_big`). Without it,
    a record is a RawSession or a state record dict.
    """
    from veadk_mem.events import iter_documents
    from veadk_mem.sessions import bigline

    documents = bigline.iter_lines(source, name, bigline.big_line_bytes()) if big else None
    for where, data in documents or iter_documents(source, name):
        try:
            if isinstance(data, bigline.BigLine):
                checked = big == "check"
                yield where, (bigline.check_big(data, limits, spool=True, columns=columns) if checked else data)
            else:
                yield _checked(where, data, limits)
        except RecursionError:
            raise BadInput(f"{where}: JSON nested too deeply") from None


def _checked(where: str, data: Any, limits: Limits | None) -> tuple[str, RawSession | dict[str, Any]]:
    from veadk_mem.events import STATE_RECORD_KINDS, parse_session
    from veadk_mem.sessions.rawsession import from_model, raw_session

    if isinstance(data, dict) and data.get("kind") in STATE_RECORD_KINDS:
        record = _check_state_record(data, where)
        if limits is not None:
            limits.check(where, data, None)
        return where, record
    session = raw_session(data)  # the common case, without pydantic objects
    if session is None:  # the models coerce it, or name what is wrong
        model = parse_session(data, where)
        for field_name, value in (("appName", model.app_name), ("userId", model.user_id), ("id", model.id)):
            if not value:
                raise BadInput(f"{where}: $.{field_name}: must not be empty")
        _fill_event_ids(model, where)
        session = from_model(model)
    if limits is not None:
        limits.check(where, data, session)
    return where, session


def iter_import_records(source: str | Path, name: str | None = None) -> Iterator[RawSession | dict[str, Any]]:
    """Sessions and app_state / user_state records of a JSON, JSON list or JSONL file, validated."""
    for _, record in iter_checked(source, name):
        yield record


def validate_import(source: str | Path, name: str | None = None) -> int:
    """Check every record of an export file; BadInput naming the line of the first bad one. Returns the count."""
    return sum(1 for _ in iter_checked(source, name))


# --- the whole import ---------------------------------------------------------------------


def source_size(source: str | Path) -> int:
    """The size of an import file; BadInput (exit 2) naming it when it is missing, a directory or unreadable."""
    path = Path(source)
    try:
        if path.is_dir():
            raise BadInput(f"{source}: is a directory, expected an export file")
        size = path.stat().st_size
        with path.open("rb"):
            return size
    except FileNotFoundError:
        raise BadInput(f"{source}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{source}: cannot read: {exc.strerror}") from None


async def import_file(
    store: SessionStore,
    source: str | Path,
    name: str | None = None,
    *,
    force: bool = False,
    progress: Progress | None = None,
    on_total: Any = None,
    checking: Progress | None = None,
    dry_run: bool = False,
) -> ImportReport:
    """Open `store`, check the whole file against it, then write it; see the module docstring.

    `on_total(n)` is called with the number of sessions once they are counted, `checking(1)`
    for each session checked (progress bars). A session stored with a newer update time than
    the file's is refused (BadInput naming it) unless `force`. A sqlite file that does not
    exist yet is only created once the file has passed every check. `dry_run` checks and
    counts everything and writes nothing.
    """
    source_size(source)  # a missing file is exit 2 naming it, before any database is opened
    keys: list[FileKey] = []
    states: list[tuple[str, str | None, str]] = []  # (app, user or None, where) of state records
    counts = ImportReport(dry_run=dry_run)
    bigs: dict[int, BigSession] = {}  # sessions on long lines, by where their line starts

    async def first_pass(limits: Limits) -> None:
        with bulk_objects():
            await _check_all(limits)

    async def _check_all(limits: Limits) -> None:
        records = iter_checked(source, name, limits, big="check", columns=store.takes_columns())
        for n, (where, record) in enumerate(records, 1):
            if n % 500 == 0:
                # Ctrl-C cancels the running task, which only an await can notice: without
                # one the whole check pass ran to its end before the command stopped
                await asyncio.sleep(0)
                if n % 5000 == 0:
                    collect_young()
            if isinstance(record, dict):
                if record.get("kind") == "app_state":
                    counts.app_states += 1
                    states.append((record["appName"], None, where))
                else:
                    counts.user_states += 1
                    states.append((record["appName"], record["userId"], where))
                continue
            counts.sessions += 1
            if isinstance(record, BigSession):  # a long line: its events stay in the file
                bigs[record.line.start] = record
                counts.events += record.count
                updated = record.update_time(0.0)
            else:
                counts.events += len(record.events)
                updated = file_update_time(record)
            keys.append(FileKey(record.app_name, record.user_id, record.id, updated, where))
            if checking is not None:
                checking(1)

    reader: ReaderProcess | None = None
    try:
        offline = store.offline_limits()
        if offline is not None:
            reader = _reader(store, source, name, dry_run)
            await first_pass(offline)
            if dry_run:  # a sqlite file that does not exist yet: nothing in it to clash with
                return counts
        async with store:
            if offline is None:
                limits = await store.limits()
                reader = _reader(store, source, name, dry_run)
                await first_pass(limits)
            await _check_stored(store, keys, states, force)
            if dry_run:
                counts.layout = store.layout.value
                return counts
            if on_total is not None:
                on_total(counts.sessions)
            if reader is not None:
                report = await store.import_columns(reader.batches(), force=force, progress=progress, bigs=bigs)
            else:
                records = (
                    bigs[record.start] if isinstance(record, BigLine) else record
                    for _, record in iter_checked(source, name, big="skip")
                )
                report = await store.import_records(records, force=force, progress=progress)
            report.warnings = list(dict.fromkeys(store.warnings))
            return report
    finally:
        if reader is not None:
            reader.close()
        for big in bigs.values():
            big.remove_spool()


def _reader(store: SessionStore, source: str | Path, name: str | None, dry_run: bool) -> ReaderProcess | None:
    """A child process reading the file for the write pass, started now to overlap the check pass; or None."""
    from veadk_mem.sessions.reader import ReaderProcess, worthwhile

    if dry_run or not store.takes_columns() or not worthwhile(source):
        return None
    try:
        return ReaderProcess(source, name, batch_rows=store.batch_rows())
    except OSError:  # no interpreter to start: the write pass reads in this process
        return None


async def _check_stored(
    store: SessionStore, keys: list[FileKey], states: list[tuple[str, str | None, str]], force: bool
) -> None:
    """BadInput when the file's keys collide under the database's collation, or (without `force`)
    when a stored session is newer than the file's."""

    def shown(items: list[str], sep: str) -> str:
        return sep.join(items[:5]) + (" ..." if len(items) > 5 else "")

    clashes = await store.key_collisions(keys, states)
    if clashes:
        raise BadInput(
            f"names that differ only in case, accents or trailing spaces are one key under "
            f"{store.display_url}'s collation, and would overwrite each other: {shown(clashes, '; ')}",
            hint="rename them in the file, or give the tables a binary (…_bin) collation",
        )
    newer = [] if force else await store.newer_sessions(keys)
    if newer:
        raise BadInput(
            f"{len(newer)} session(s) in the database have changed since this file was written, "
            f"importing would drop their newer events: {shown(newer, ', ')}",
            hint="export them first, or use --force to write the file's version over them",
        )


# --- stdin spool and stale temporary files --------------------------------------------------


def spool_dir() -> Path:
    """Where stdin spools go: a private directory under the user's cache."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vmem"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        base.chmod(0o700)
    return base


def remove_stale(directory: Path, pattern: str, *, max_age: float = _STALE_AGE) -> int:
    """Delete files matching `pattern` in `directory` untouched for `max_age` seconds (left by kill -9)."""
    removed = 0
    cutoff = time.time() - max_age
    try:
        candidates = list(directory.glob(pattern))
    except OSError:
        return 0
    for path in candidates:
        try:
            info = path.lstat()
            if info.st_mtime < cutoff and (path.is_symlink() or path.is_file()):
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def spooled_stdin() -> Iterator[Path]:
    """Stdin copied as bytes to a file only this user can read, removed afterwards.

    Spools older than a day (a vmem killed with -9) are removed first. Bytes are copied
    unchanged, so non-UTF-8 input is reported by the reader naming <stdin>, not as a crash.
    """
    directory = spool_dir()
    remove_stale(directory, SPOOL_PREFIX + "*")
    fd, name = tempfile.mkstemp(prefix=SPOOL_PREFIX, suffix=".jsonl", dir=directory)  # mode 0600, O_EXCL
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            stream = getattr(sys.stdin, "buffer", None)
            if stream is None:  # a text-only stdin (tests): encode what it gives
                for chunk in iter(lambda: sys.stdin.read(1 << 16), ""):
                    handle.write(chunk.encode("utf-8", "surrogateescape"))
            else:
                for block in iter(lambda: stream.read(1 << 16), b""):
                    handle.write(block)
        yield path
    finally:
        path.unlink(missing_ok=True)
