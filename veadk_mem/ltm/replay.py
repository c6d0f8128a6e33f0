"""Replaying many sessions into long-term memory: sources, per-session isolation, totals.

A failure in one session (bad JSON, a store error, a memory text no store can hold) is
recorded on that session and the rest go on; the caller exits 1 when any failed. A store that
went away (StoreUnreachable, or a PartialWrite that lost the connection), or a replay ledger
that cannot be used (busy past its timeout, damaged: every save needs it before it sends),
stops the replay at once: every later session would fail the same way. `saved` counts what the store acknowledged,
a failed session's part included.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput, MissingSdk, PartialWrite, StoreUnreachable, VmemError
from veadk_mem.ltm.bounds import BATCH_BYTES
from veadk_mem.ltm.facade import SessionReport
from veadk_mem.ltm.ledger import LedgerError

if TYPE_CHECKING:
    from veadk_mem.events import Session
    from veadk_mem.ltm.facade import LongTermMemory

# A source yields sessions, or the error that stopped one document from being a session.
Item = tuple[str, "Session | VmemError"]


def expand_sources(sources: Iterable[str]) -> list[str]:
    """FILE, DIR (its *.json / *.jsonl, recursively) or '-', checked before anything is saved."""
    from veadk_mem.events import session_files

    out: list[str] = []
    for source in sources:
        if source == "-":
            out.append(source)
            continue
        path = Path(source)
        if not path.exists():
            raise BadInput(f"{path}: no such file or directory")
        if path.is_dir():
            files = session_files(path)
            if not files:
                raise BadInput(f"{path}: no *.json or *.jsonl files in this directory")
            out.extend(str(f) for f in files)
        else:
            out.append(str(path))
    return out


COUNT_LIMIT = 256 * 1024 * 1024


def count_sessions(sources: list[str]) -> int | None:
    """About how many sessions the files hold, for a progress bar's total (None: not cheaply known).

    JSONL counts its non-blank lines that are not state records; a JSON file is one
    session, or the length of its list.
    """
    from veadk_mem.jsonio import try_loads

    if any(s == "-" for s in sources) or sum(Path(s).stat().st_size for s in sources) > COUNT_LIMIT:
        return None
    total = 0
    for source in sources:
        with open(source, "rb") as handle:
            data = handle.read()
        head = data.lstrip()[:1]
        if head == b"[":
            value = try_loads(data)
            if value is None:
                return None
            total += len(value) if isinstance(value, list) else 1
        else:
            lines = [line for line in data.splitlines() if line.strip()]
            single = len(lines) > 1 and not lines[0].rstrip().endswith(b"}")
            total += 1 if single else sum(1 for line in lines if b'"kind"' not in line[:40])
    return total


def file_sessions(sources: Iterable[str]) -> Iterator[Item]:
    """Every session in the files, streamed; an undecodable file or document becomes an error item."""
    from veadk_mem.events import RECORD_KINDS, iter_documents, parse_session

    for source in sources:
        try:
            for where, data in iter_documents(source):
                if isinstance(data, dict) and data.get("kind") in RECORD_KINDS:
                    continue
                try:
                    yield where, parse_session(data, where)
                except VmemError as exc:
                    yield where, exc
        except VmemError as exc:
            yield source, exc


async def aiter_items(items: Iterable[Item]) -> AsyncIterator[Item]:
    """An iterable of items as an async iterator, so files and the session store look alike."""
    for item in items:
        yield item


@dataclass
class ReplaySummary:
    """Totals of one `ltm save` run, plus one report per session."""

    reports: list[SessionReport] = field(default_factory=list)
    aborted: str | None = None
    codes: list[int] = field(default_factory=list)  # the exit code of each failure

    @property
    def exit_code(self) -> int:
        """0 when nothing failed. When nothing was saved and every failure was bad input (2: a model
        mismatch) or not supported (4: a backend not available), that code; else 1."""
        if not self.codes:
            return 0
        first = self.codes[0]
        everything = len(self.failed) == len(self.reports)
        return first if everything and first in (2, 4) and all(c == first for c in self.codes) else 1

    @property
    def failed(self) -> list[SessionReport]:
        return [r for r in self.reports if r.error is not None]

    def totals(self) -> dict[str, int]:
        ok = [r for r in self.reports if r.error is None]
        return {
            "sessions": len(self.reports),
            "events": sum(r.events for r in ok),
            "memories": sum(r.memories for r in ok),
            "saved": sum(r.saved for r in self.reports),  # a failed session's acknowledged part included
            "duplicates": sum(r.duplicates for r in ok),
            "dropped": sum(r.dropped for r in ok),
            "ledger_skipped": sum(len(r.ledger_skipped) for r in ok),
            "failed": len(self.failed),
        }

    def per_user(self) -> list[dict[str, Any]]:
        """Counts per (app, user), for dry runs."""
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for r in self.reports:
            if r.error is not None:
                continue
            row = groups.setdefault(
                (r.app_name, r.user_id),
                {
                    "app_name": r.app_name,
                    "user_id": r.user_id,
                    "index": r.index,
                    "sessions": 0,
                    "saved": 0,
                    "duplicates": 0,
                    "dropped": 0,
                    "ledger_skipped": 0,
                },
            )
            row["sessions"] += 1
            for key in ("saved", "duplicates", "dropped"):
                row[key] += getattr(r, key)
            row["ledger_skipped"] += len(r.ledger_skipped)
        return list(groups.values())


async def replay(
    ltm: LongTermMemory,
    items: AsyncIterator[Item],
    policy: Any,
    *,
    dry_run: bool = False,
    on_done: Callable[[SessionReport], None] | None = None,
    breaker: int = 3,
    batch_bytes: int = BATCH_BYTES,
) -> ReplaySummary:
    """Save each session through the facade; a failing session is reported, not fatal.

    Unless the failures are systemic: when `breaker` sessions in a row fail with the same
    message (a rejected API key, an unreachable endpoint, a model mismatch), the rest
    would too, so the replay stops there instead of repeating it for every session.
    Sessions are embedded together in batches of at most `batch_bytes` bytes of event text.
    """
    summary = ReplaySummary()
    streak: list[str] = []
    async for batch in _batches(items, batch_bytes):
        if not dry_run:
            # embedding ahead is an optimisation: whatever stops it (an odd session the facade
            # did not foresee), each session's own save below meets it and reports it alone
            with contextlib.suppress(Exception):
                await ltm.prepare_sessions([item for _, item in batch if not isinstance(item, VmemError)], policy)
        for where, item in batch:
            if isinstance(item, VmemError):
                report = SessionReport("", "", "", "", error=item.message, source=where)
                summary.codes.append(item.exit_code)
            else:
                try:
                    report = await ltm.add_session_to_memory(item, policy, dry_run=dry_run)
                except Exception as exc:  # one session's failure must not stop the others
                    message = exc.message if isinstance(exc, VmemError) else f"unexpected {type(exc).__name__}: {exc}"
                    if isinstance(exc, MissingSdk) and exc.hint:  # the one fix for every session: say it
                        message = f"{message}; {exc.hint}"
                    summary.codes.append(exc.exit_code if isinstance(exc, VmemError) else 1)
                    report = SessionReport(
                        item.app_name, item.user_id, item.id, ltm.index_for(item.app_name), events=len(item.events)
                    )
                    report.error = message
                    if isinstance(exc, PartialWrite):
                        report.saved, report.ids = len(exc.stored), list(exc.stored)
                    if isinstance(exc, LedgerError):  # one line naming the session that met it and the file
                        message = f"{where}: {message}"
                    if isinstance(exc, StoreUnreachable | LedgerError) or (isinstance(exc, PartialWrite) and exc.lost):
                        report.source = where
                        summary.reports.append(report)
                        summary.aborted = f"stopped after {len(summary.reports) - 1:,} sessions: {message}"
                        return summary
                report.source = where
            summary.reports.append(report)
            if on_done is not None:
                on_done(report)
            if item_error := (report.error if not isinstance(item, VmemError) else None):
                streak = [*streak, item_error][-breaker:]
                if len(streak) == breaker and len(set(streak)) == 1:
                    summary.aborted = f"stopped: the last {breaker} sessions failed the same way ({item_error})"
                    return summary
            else:
                streak = []
    return summary


# Sessions embedded together by a replay: enough texts to fill the embedder's batches many
# times over, few enough that a failure or Ctrl-C loses little; and never more than the
# batch's bytes (`[tuning] batch_bytes`) of event text, so a file of huge events is held a
# few sessions at a time.
BATCH_SESSIONS = 256
BATCH_EVENTS = 4096
EVENT_OVERHEAD = 256  # bytes an event's ids, author and times take beside its text, about


def session_bytes(session: Session) -> int:
    """About how many bytes of text a session's events hold (their parts' text, data and code)."""
    total = 0
    for event in session.events:
        total += EVENT_OVERHEAD
        for part in (event.content.parts or []) if event.content is not None else []:
            total += len(part.text or "")
            if part.inline_data is not None:
                total += len(part.inline_data.data or "")
            if part.executable_code is not None:
                total += len(part.executable_code.code or "")
            if part.code_execution_result is not None:
                total += len(part.code_execution_result.output or "")
    return total


async def _batches(items: AsyncIterator[Item], batch_bytes: int = BATCH_BYTES) -> AsyncIterator[list[Item]]:
    """The items in groups of up to BATCH_SESSIONS sessions, BATCH_EVENTS events or `batch_bytes` bytes."""
    batch: list[Item] = []
    events = size = 0
    async for item in items:
        batch.append(item)
        if not isinstance(item[1], VmemError):
            events += len(item[1].events)
            size += session_bytes(item[1])
        if len(batch) >= BATCH_SESSIONS or events >= BATCH_EVENTS or size >= batch_bytes:
            yield batch
            batch, events, size = [], 0, 0
    if batch:
        yield batch
