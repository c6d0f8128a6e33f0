"""Session import: read and check an export file, then write it in batched transactions.

The file is read twice: first every record is parsed and checked against the target's
limits (`limits.py`), the session keys are checked for collisions under the target's
collation and for stored sessions newer than the file; only then is anything written.
Stdin is spooled to a private temporary file for the two passes (`files.spooled_stdin`).
Records and reports live in `records.py`, the file's checks in `validate.py` and `checks.py`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput
from veadk_mem.sessions.bigline import BigLine, BigSession
from veadk_mem.sessions.records import FileKey, ImportReport, file_update_time
from veadk_mem.sessions.validate import iter_checked

if TYPE_CHECKING:
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.records import Progress
    from veadk_mem.sessions.store import SessionStore


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
    check = _CheckPass(store, source, name, ImportReport(dry_run=dry_run), checking)
    counts, bigs = check.counts, check.bigs
    try:
        offline = store.preflight.offline_limits()
        if offline is not None:
            await check.run(offline)
            if dry_run:  # a sqlite file that does not exist yet: nothing in it to clash with
                return counts
        async with store:
            if offline is None:
                await check.run(await store.preflight.limits())
            await _check_stored(store, check.keys, check.states, force)
            if dry_run:
                counts.layout = store.db.layout.value
                return counts
            if on_total is not None:
                on_total(counts.sessions)
            records = (
                bigs[record.start] if isinstance(record, BigLine) else record
                for _, record in iter_checked(source, name, big="skip", big_bytes=store.preflight.big_line_bytes())
            )
            report = await store.import_records(records, force=force, progress=progress)
            report.warnings = list(dict.fromkeys(report.warnings))
            return report
    finally:
        for big in bigs.values():
            big.remove_spool()


class _CheckPass:
    """The first read of an import file: every record checked against the target's limits, the
    sessions' keys and the state records' names gathered for the checks against the database,
    the records counted, and the long lines' sessions spooled (`bigs`, by where their line starts)."""

    def __init__(
        self, store: SessionStore, source: str | Path, name: str | None, counts: ImportReport, checking: Progress | None
    ) -> None:
        self.store, self.source, self.name = store, source, name
        self.counts = counts
        self.checking = checking
        self.keys: list[FileKey] = []
        self.states: list[tuple[str, str | None, str]] = []  # (app, user or None, where) of state records
        self.bigs: dict[int, BigSession] = {}

    async def run(self, limits: Limits) -> None:
        big_bytes = self.store.preflight.big_line_bytes()
        records = iter_checked(self.source, self.name, limits, big="check", big_bytes=big_bytes)
        for n, (where, record) in enumerate(records, 1):
            if n % 500 == 0:
                # Ctrl-C cancels the running task, which only an await can notice: without
                # one the whole check pass ran to its end before the command stopped
                await asyncio.sleep(0)
            if isinstance(record, dict):
                self._state_record(where, record)
            else:
                self._session(where, record)

    def _state_record(self, where: str, record: dict[str, Any]) -> None:
        if record.get("kind") == "app_state":
            self.counts.app_states += 1
            self.states.append((record["appName"], None, where))
        else:
            self.counts.user_states += 1
            self.states.append((record["appName"], record["userId"], where))

    def _session(self, where: str, record: Any) -> None:
        self.counts.sessions += 1
        if isinstance(record, BigSession):  # a long line: its events stay in the file
            self.bigs[record.line.start] = record
            self.counts.events += record.count
            updated = record.update_time(0.0)
        else:
            self.counts.events += len(record.events)
            updated = file_update_time(record)
        self.keys.append(FileKey(record.app_name, record.user_id, record.id, updated, where))
        if self.checking is not None:
            self.checking(1)


async def _check_stored(
    store: SessionStore, keys: list[FileKey], states: list[tuple[str, str | None, str]], force: bool
) -> None:
    """BadInput when the file's keys collide under the database's collation, or (without `force`)
    when a stored session is newer than the file's."""

    def shown(items: list[str], sep: str) -> str:
        return sep.join(items[:5]) + (" ..." if len(items) > 5 else "")

    clashes = await store.preflight.key_collisions(keys, states)
    if clashes:
        raise BadInput(
            f"names that differ only in case, accents or trailing spaces are one key under "
            f"{store.db.display_url}'s collation, and would overwrite each other: {shown(clashes, '; ')}",
            hint="rename them in the file, or give the tables a binary (…_bin) collation",
        )
    newer = [] if force else await store.preflight.newer_sessions(keys)
    if newer:
        raise BadInput(
            f"{len(newer)} session(s) in the database have changed since this file was written, "
            f"importing would drop their newer events: {shown(newer, ', ')}",
            hint="export them first, or use --force to write the file's version over them",
        )
