"""What `vmem browse` shows and does, without Textual: sessions by page, a session's timeline
read a page of events at a time, memories, and the actions, each through the core call the
CLI command of the same job makes (so a script or test can drive it, and the TUI stays a view).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veadk_mem.cli.erasure import render_plan
from veadk_mem.cli.render import terminal_safe
from veadk_mem.ops.erasure import erase
from veadk_mem.sessions.delete_flow import delete_flow
from veadk_mem.sessions.files import atomic_output, check_output
from veadk_mem.sessions.read_queries import SessionChanged
from veadk_mem.timefmt import format_time

if TYPE_CHECKING:
    from pathlib import Path

    from veadk_mem.cli.state import AppState
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.ops.erasure import ErasureReport
    from veadk_mem.sessions.records import DeleteReport, SessionFilter, SessionSummary
    from veadk_mem.sessions.store import SessionStore

SESSION_PAGE = 100  # sessions a list page reads (`session list --limit 100 --offset N`)
EVENT_PAGE = 200  # events a timeline page reads: about ten screens of a tall terminal
CACHED_PAGES = 64  # timeline pages kept; scrolling far away and back reads them again
MEMORY_LIMIT = 200  # memories a listing shows, newest first


@dataclass(frozen=True)
class EventRow:
    """One timeline row: what a person reads of an event, and its JSON as `session get --json` prints it."""

    n: int
    time: float | None
    author: str
    kind: str
    text: str
    delta: str
    tokens: int | None
    json: str

    @classmethod
    def of(cls, n: int, data: Any) -> EventRow:
        """The row of event number `n` from its printed (camelCase) JSON, control characters made visible."""
        from veadk_mem.sessions.timeline import Timeline

        row = Timeline(n).row_of(data)  # an event ADK cannot read gives the row that says why
        usage = data.get("usageMetadata") if isinstance(data, dict) else None
        tokens = usage.get("totalTokenCount") if isinstance(usage, dict) else None
        delta = row["state_delta"]
        return cls(
            n=n,
            time=row["time"],
            author=terminal_safe(str(row["author"] or "")),
            kind=",".join(row["types"]),
            text=terminal_safe(" ".join(str(row["text"]).split())),
            delta=terminal_safe(", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in delta.items())),
            tokens=tokens if isinstance(tokens, int) else None,
            json=terminal_safe(json.dumps(data, indent=2, ensure_ascii=False)),
        )


class Timeline:
    """A session's events by number, read a page at a time as they come into view.

    Pages come from `store.session_pages` (the paged read `session get --json` makes, keyset-paged
    by ADK's events index), started at the page's first event with its `last`; scrolling on
    continues the same read, so a page down costs one page. Memory holds at most CACHED_PAGES
    pages, whatever the session's size. An agent changing the session on sqlite between two
    pages ends that read: the next page starts a new one.
    """

    def __init__(self, store: SessionStore, summary: SessionSummary) -> None:
        self.store = store
        self.summary = summary
        self.count = summary.event_count
        self.pages: OrderedDict[int, list[EventRow]] = OrderedDict()
        self.extra: dict[int, EventRow] = {}  # events a follow appended, by number
        self._reader: AsyncIterator[Any] | None = None
        self._carry: list[str] = []  # events read past the end of the last page handed out
        self._next_page = -1  # the page `_reader` hands out next
        self.reads = 0  # pages read from the database (tests and the benchmark count them)

    def row(self, index: int) -> EventRow | None:
        """The row at `index` (0-based) when it has been read, else None."""
        if index in self.extra:
            return self.extra[index]
        page = self.pages.get(index // EVENT_PAGE)
        if page is None:
            return None
        offset = index % EVENT_PAGE
        return page[offset] if offset < len(page) else None

    def missing(self, first: int, last: int) -> list[int]:
        """The pages rows first..last (inclusive) need that are not read yet."""
        last = min(last, self.count - 1)
        if last < first:
            return []
        wanted = range(first // EVENT_PAGE, last // EVENT_PAGE + 1)
        return [p for p in wanted if p not in self.pages and p * EVENT_PAGE < self.summary.event_count]

    async def load(self, page: int) -> None:
        """Read page `page` (a continuing read when it is the next one, else a new read from there)."""
        if page in self.pages:
            self.pages.move_to_end(page)
            return
        if self._reader is None or self._next_page != page:
            await self.close()
            start = page * EVENT_PAGE
            s = self.summary
            self._reader = self.store.session_pages(
                s.app_name, s.user_id, s.id, last=s.event_count - start, page=EVENT_PAGE
            )
            self._next_page = page
        found, ended = self._carry, False
        self._carry = []
        try:
            while len(found) < EVENT_PAGE:
                item = await anext(self._reader)
                if isinstance(item, list):  # (the first item is the session's summary)
                    found = found + item
        except StopAsyncIteration:
            ended = True
        except SessionChanged:  # an agent wrote meanwhile (sqlite): this page starts a new read
            await self.close()
            return await self.load(page)
        self._carry = found[EVENT_PAGE:]
        start = page * EVENT_PAGE
        texts = found[:EVENT_PAGE]
        rows: list[EventRow] | None = [EventRow.of(start + i + 1, json.loads(t)) for i, t in enumerate(texts)]
        if ended and not found:
            rows = None
        self.reads += 1
        if rows is None or ended:  # the read ended (at the session's end, or it lost events since)
            await self.close()
            rows = rows or []
        else:
            self._next_page = page + 1
        self.pages[page] = rows
        while len(self.pages) > CACHED_PAGES:
            self.pages.popitem(last=False)

    def append(self, printed: dict[str, Any]) -> EventRow:
        """An event a follow found (its printed JSON): numbered after the last one."""
        row = EventRow.of(self.count + 1, printed)
        self.extra[self.count] = row
        self.count += 1
        return row

    async def close(self) -> None:
        """End a read in progress (its generator, and with it nothing held: each page is its own read)."""
        reader, self._reader = self._reader, None
        self._carry = []
        if reader is not None:
            await reader.aclose()  # type: ignore[attr-defined]


@dataclass
class SessionList:
    """The sessions a filter selects, newest first, read SESSION_PAGE at a time as the list is scrolled."""

    flt: SessionFilter
    rows: list[SessionSummary] = field(default_factory=list)
    done: bool = False

    async def more(self, store: SessionStore) -> list[SessionSummary]:
        """The next page (`session list --limit N --offset M`); empty at the end."""
        if self.done:
            return []
        found = await store.list_sessions(self.flt, limit=SESSION_PAGE, offset=len(self.rows))
        self.rows += found
        self.done = len(found) < SESSION_PAGE
        return found


def matches(summary: SessionSummary, text: str) -> bool:
    """The filter box: every word is in the session id or the user id."""
    hay = f"{summary.id} {summary.user_id}".lower()
    return all(word in hay for word in text.lower().split())


def captured(draw: Any) -> str:
    """What `draw(state)` prints on stderr as the CLI does off a terminal: the plan, as text."""
    import contextlib
    import io

    from veadk_mem.cli.state import AppState

    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer), contextlib.redirect_stdout(buffer):
        draw(AppState())
    return terminal_safe(buffer.getvalue().rstrip("\n"))


def delete_plan_text(plan: DeleteReport) -> str:
    """The plan `vmem session delete` shows before it asks."""
    from veadk_mem.cli import session as session_cmd

    if not plan.sessions:
        return "no sessions match: nothing to delete"
    return captured(lambda state: session_cmd.show_plan(state, plan, to_stderr=True))


def memory_plan_text(index: str, records: list[Any]) -> str:
    """The plan `vmem ltm delete --dry-run` prints."""
    from veadk_mem.cli import ltm as ltm_cmd
    from veadk_mem.cli.render import counted

    def draw(state: AppState) -> None:
        state.render.table(
            ltm_cmd._record_rows(index, records), ltm_cmd.DELETE_COLUMNS, title="would delete", to_stderr=True
        )
        state.render.message(f"would delete {counted(len(records), 'memory')}")

    return captured(draw)


def export_plan_text(chosen: list[SessionSummary], output: Path) -> str:
    """What an export of the chosen sessions writes, in the delete plan's table."""
    from veadk_mem.cli import session as session_cmd
    from veadk_mem.cli.render import counted

    def draw(state: AppState) -> None:
        rows = [session_cmd._summary_row(s) for s in chosen]
        state.render.table(rows, session_cmd.SUMMARY_COLUMNS, title="to export", to_stderr=True)
        events = sum(s.event_count for s in chosen)
        state.render.message(f"{counted(len(chosen), 'session')}, {counted(events, 'event')} to {output}")

    return captured(draw)


def erasure_plan_text(plan: ErasureReport) -> str:
    """The plan `vmem session delete --with-memories` shows before it asks."""
    return captured(lambda state: render_plan(state, plan, to_stderr=True))


async def erase_sessions(
    store: SessionStore, ltm: LongTermMemory, chosen: list[SessionSummary], *, dry_run: bool
) -> ErasureReport:
    """`vmem session delete APP USER ID... --with-memories`: the erasure, planned (dry_run) or done."""
    return await erase(store, ltm, keys=[s.key for s in chosen], dry_run=dry_run)


async def delete_sessions(store: SessionStore, chosen: list[SessionSummary], *, dry_run: bool) -> DeleteReport:
    """`vmem session delete APP USER ID...`: its flow, planned (dry_run) or done."""

    return await delete_flow(store, keys=[s.key for s in chosen], dry_run=dry_run)


async def export_sessions(store: SessionStore, chosen: list[SessionSummary], output: Path) -> int:
    """`vmem session export -o FILE` of the chosen sessions: their lines and their state records, through
    the one file writer; returns the sessions written."""
    from veadk_mem.sessions.export_keys import export_keys_jsonl

    check_output(output)
    with atomic_output(output) as handle:
        async for piece in export_keys_jsonl(store, [s.key for s in chosen]):
            handle.write(piece)
    return len(chosen)


@dataclass
class MemoryRow:
    """One memory in the list or a search answer."""

    rank: int | None
    id: str
    score: float | None
    score_kind: str
    author: str
    text: str
    saved: str
    source: str
    entry: dict[str, Any]


def memory_rows(entries: list[dict[str, Any]], *, ranked: bool) -> list[MemoryRow]:
    """`ltm list` / `ltm search` entries as rows, with the rank a search gave each."""
    from veadk_mem.ltm.convert import entry_text

    out = []
    for i, entry in enumerate(entries, 1):
        meta = entry.get("custom_metadata") or {}
        origin = meta.get("origin") or {}
        out.append(
            MemoryRow(
                rank=i if ranked else None,
                id=terminal_safe(str(entry.get("id") or "")),
                score=meta.get("score"),
                score_kind=terminal_safe(str(meta.get("score_kind") or "")),
                author=terminal_safe(str(entry.get("author") or "")),
                text=terminal_safe(" ".join(entry_text(entry).split())),
                saved=str(entry.get("timestamp") or ""),
                source=terminal_safe(provenance(entry.get("source"), origin)),
                entry=entry,
            )
        )
    return out


def provenance(source: Any, origin: dict[str, Any]) -> str:
    """Where a memory came from, as far as its record says: the `source` vmem saved with it (#42),
    else what the store's own fields hold (app, session, event, author)."""
    if isinstance(source, dict):
        events = ", ".join(str(e) for e in source.get("event_ids") or [])
        fields = [
            ("app", source.get("app_name")),
            ("user", source.get("user_id")),
            ("session", source.get("session_id")),
            ("events", events),
            ("author", source.get("author")),
            ("event time", format_time(source.get("event_time")) if source.get("event_time") else ""),
            ("policy", source.get("policy")),
            ("saved at", format_time(source.get("saved_at")) if source.get("saved_at") else ""),
            ("by vmem", source.get("vmem_version")),
        ]
    else:
        fields = [(k, origin.get(k)) for k in ("app_name", "session_id", "event_id", "author", "event_time", "policy")]
    said = [f"{k}: {v}" for k, v in fields if v]
    return "\n".join(said) if said else "source: not recorded"


def source_session(row: MemoryRow, app: str | None, user: str) -> tuple[str, str, str] | None:
    """(app, user, session id) of the session a memory came from, when its record names one."""
    source = row.entry.get("source")
    origin = (row.entry.get("custom_metadata") or {}).get("origin") or {}
    if isinstance(source, dict) and source.get("session_id"):
        return (str(source.get("app_name") or app or ""), str(source.get("user_id") or user), str(source["session_id"]))
    if origin.get("session_id") and (origin.get("app_name") or app):
        return (str(origin.get("app_name") or app), user, str(origin["session_id"]))
    return None


async def list_memories(ltm: LongTermMemory, app: str | None, user: str) -> list[MemoryRow]:
    """`vmem ltm list --user U --limit N`."""
    entries = await ltm.list_memories(app_name=app, user_id=user, limit=MEMORY_LIMIT)
    return memory_rows(entries, ranked=False)


async def search_memories(
    ltm: LongTermMemory, app: str | None, user: str, query: str, mode: str | None
) -> list[MemoryRow]:
    """`vmem ltm search QUERY --user U --mode M`."""
    entries = await ltm.search_memory(app_name=app, user_id=user, query=query, mode=mode)
    return memory_rows(entries, ranked=True)


async def memory_plan(ltm: LongTermMemory, app: str | None, user: str, memory_id: str) -> tuple[str, list[Any]]:
    """`vmem ltm delete --user U --id ID --dry-run`: the index and the records it would delete."""
    index = await ltm.user_index(app, user)
    return index, await ltm.select(app_name=app, user_id=user, ids=[memory_id], index=index)


async def delete_memory(ltm: LongTermMemory, app: str | None, user: str, index: str, records: list[Any]) -> int:
    """`vmem ltm delete --user U --id ID --yes`, after its plan was confirmed."""
    return await ltm.delete(app_name=app, user_id=user, records=records, index=index)


def state_text(summary: SessionSummary) -> str:
    """The session's merged state (app:, user: and its own keys) as indented JSON."""
    return terminal_safe(json.dumps(summary.state, indent=2, ensure_ascii=False, default=str))


def default_export_path() -> str:
    """vmem-export-<UTC time>.jsonl in the working directory."""
    import time

    return time.strftime("vmem-export-%Y%m%dT%H%M%SZ.jsonl", time.gmtime())
