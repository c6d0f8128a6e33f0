"""Sessions on a JSONL line too large to decode whole: read with a streaming parser (ijson).

A session of 200,000 events is one line of tens of megabytes; decoded whole, its events,
their stored form and their rows all live at once (1.7 GB for one such line). A line of
`big_line_bytes()` and more is never held in memory: the check pass reads its top-level
fields, skips its `events` array, then reads the events a chunk at a time and checks
each chunk as any session is checked (same messages; `$.events[i]` counts from the
session's first event). The write pass reads the events again, a chunk at a time, inside
the session's one transaction (`writes.Writes._write_big`).
"""

from __future__ import annotations

import collections
import contextlib
import marshal
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from veadk_mem.errors import BadInput

if TYPE_CHECKING:
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.rawsession import RawEvent

BIG_LINE = 16 * 1024 * 1024  # bytes; a longer JSONL line is streamed ($VMEM_BIG_LINE)
CHUNK = 2000  # events checked, built and written at a time
SPOOL_PREFIX = "vmem-big-"
_EVENT_PATH = re.compile(r"\$\.events\[(\d+)\]")
_UNSET = object()


def big_line_bytes() -> int:
    """The line length from which a session is streamed: $VMEM_BIG_LINE bytes, else BIG_LINE."""
    try:
        return max(1024, int(os.environ.get("VMEM_BIG_LINE", BIG_LINE)))
    except ValueError:
        return BIG_LINE


@dataclass(frozen=True, slots=True)
class BigLine:
    """Where a long line is: its file, its bytes [start, end) and its 'FILE: line N'."""

    path: str
    start: int
    end: int
    where: str


@dataclass(slots=True)
class BigSession:
    """A checked session of a long line: its fields without the events, and what its events add up to."""

    line: BigLine
    head: dict[str, Any]  # the line's top-level fields except events, as written
    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    last_update_time: float
    count: int = 0
    first: float = 0.0  # earliest event timestamp (count > 0)
    last: float = 0.0  # latest
    spool: str | None = None  # the checked events in stored form (marshal, a chunk a record), for the write pass

    def remove_spool(self) -> None:
        """Delete the spool file, once the session is written (or the import ended)."""
        if self.spool is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.spool)
            self.spool = None

    def update_time(self, now: float) -> float:
        """The update time stored for it: lastUpdateTime, else its newest event, else `now` (as `rows.head_of`)."""
        return self.last_update_time or (self.last if self.count else now)

    def create_time(self, now: float) -> float:
        updated = self.update_time(now)
        return min(self.first, updated) if self.count else updated


class _Region:
    """A file's bytes [start, end) as a readable binary file (what ijson reads)."""

    def __init__(self, handle: IO[bytes], start: int, end: int) -> None:
        handle.seek(start)
        self._handle, self._left = handle, end - start

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        size = self._left if size < 0 else min(size, self._left)
        data = self._handle.read(size)
        self._left -= len(data)
        return data


def iter_lines(source: str | Path, name: str | None, limit: int) -> Iterator[tuple[str, Any]] | None:
    """(where, decoded JSON or BigLine) for each line of a JSONL file; None when `source` is not one.

    Lines shorter than `limit` bytes decode as `events.iter_documents` decodes them (same
    messages); a longer one is only located. Stdin and a JSON list or document: None.
    """
    if str(source) == "-":
        return None
    path = Path(source)
    try:
        with path.open("rb") as handle:
            first = handle.readline(limit + 1)
            while first and not first.strip():
                first = handle.readline(limit + 1)
    except OSError:
        return None
    if not first.lstrip().startswith(b"{"):
        return None
    if len(first) <= limit:
        from veadk_mem.jsonio import try_loads

        try:
            if not isinstance(try_loads(first.decode("utf-8")), dict):
                return None
        except UnicodeDecodeError:
            return None
    return _iter_lines(path, name or str(path), limit)


def _iter_lines(path: Path, name: str, limit: int) -> Iterator[tuple[str, Any]]:
    from veadk_mem.jsonio import loads

    with path.open("rb") as handle:
        lineno = 0
        while True:
            line = handle.readline(limit + 1)
            if not line:
                return
            lineno += 1
            where = f"{name}: line {lineno}"
            if len(line) > limit and not line.endswith(b"\n"):
                start = handle.tell() - len(line)
                while (rest := handle.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
                yield where, BigLine(str(path), start, handle.tell(), where)
                continue
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{name}: not UTF-8 text ({exc.reason})") from None
            yield where, loads(text, name, line=lineno)


def _json_error(where: str, exc: Exception) -> BadInput:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return BadInput(f"{where}: invalid JSON ({reason})")


def read_head(line: BigLine) -> dict[str, Any]:
    """The line's top-level fields except `events` (its array skipped without building it)."""
    import ijson

    head: dict[str, Any] = {}
    try:
        with open(line.path, "rb") as handle:
            tokens = ijson.parse(_Region(handle, line.start, line.end), use_float=True)
            key: str | None = None
            builder: Any = None
            started = False
            for prefix, event, value in tokens:
                if builder is not None:
                    builder.event(event, value)
                    if prefix == key and event in ("end_map", "end_array"):
                        head[str(key)] = builder.value
                        builder = None
                    continue
                if prefix == "":
                    if event == "map_key":
                        key = value
                    elif event == "end_map":
                        break
                    elif event != "start_map" or started:
                        raise BadInput(f"{line.where}: $: expected a session object")
                    started = True
                    continue
                if key == "events" and prefix == "events" and event == "start_array":
                    # every token up to the array's end, consumed in C: nothing built
                    collections.deque(iter(tokens.__next__, ("events", "end_array", None)), maxlen=0)
                    head["events"] = _UNSET
                elif event in ("start_map", "start_array"):
                    builder = ijson.ObjectBuilder()
                    builder.event(event, value)
                else:
                    head[str(key)] = value
    except ijson.JSONError as exc:
        raise _json_error(line.where, exc) from None
    return head


def check_big(line: BigLine, limits: Limits | None, *, spool: bool = False) -> BigSession:
    """Check the long line's session as `importer.iter_checked` checks any: BadInput naming the first fault.

    With `spool`, its checked events are also kept in a private temporary file (mode 0600,
    in the stdin spools' directory) for the write pass, which then neither parses nor
    checks them again (the streaming parser is several times slower than the whole-line one).
    """
    from veadk_mem.sessions.importer import remove_stale, spool_dir

    seen: set[str] = set()
    big: BigSession | None = None
    out: IO[bytes] | None = None
    name: str | None = None
    if spool:
        directory = spool_dir()
        remove_stale(directory, SPOOL_PREFIX + "*")
        fd, name = tempfile.mkstemp(prefix=SPOOL_PREFIX, suffix=".marshal", dir=directory)
        out = os.fdopen(fd, "wb")
    try:
        for big, events in _chunks(line, limits, seen):
            if not events:
                continue
            stamps = [e.timestamp for e in events]
            low, high = min(stamps), max(stamps)
            big.first = low if not big.count else min(big.first, low)
            big.last = high if not big.count else max(big.last, high)
            big.count += len(events)
            if out is not None:
                marshal.dump(
                    [(e.id, e.invocation_id, e.author, e.timestamp, e.branch, e.error_code, e.data) for e in events],
                    out,
                )
        assert big is not None
        if out is not None:
            out.close()
            big.spool, name = name, None
        return big
    finally:
        if out is not None:
            out.close()
        if name is not None:  # failed part-way: nothing left behind
            with contextlib.suppress(OSError):
                os.unlink(name)


def event_chunks(big: BigSession) -> Iterator[list[RawEvent]]:
    """The session's events in stored form, a chunk at a time: from its spool, else the line read again."""
    from veadk_mem.sessions.rawsession import RawEvent

    if big.spool is None:
        for _, events in _chunks(big.line, None, set(), head=big.head):
            yield events
        return
    with open(big.spool, "rb") as handle:
        while True:
            try:
                chunk = marshal.load(handle)
            except EOFError:
                return
            yield [RawEvent(*fields) for fields in chunk]


def _chunks(
    line: BigLine, limits: Limits | None, seen: set[str], head: dict[str, Any] | None = None
) -> Iterator[tuple[BigSession, list[RawEvent]]]:
    import ijson

    from veadk_mem.sessions.importer import _checked
    from veadk_mem.sessions.rawsession import RawSession, event_id

    where = line.where
    if head is None:
        head = read_head(line)
    fields = {k: v for k, v in head.items() if k != "events"}
    if head.get("events", _UNSET) is not _UNSET:  # absent, or not an array: as the whole session is judged
        _, record = _checked(where, {**fields, **({"events": head["events"]} if "events" in head else {})}, limits)
        assert isinstance(record, RawSession)
        big = BigSession(line, head, record.id, record.app_name, record.user_id, record.state, record.last_update_time)
        yield big, record.events
        return
    _, shell = _checked(where, {**fields, "events": []}, limits)
    assert isinstance(shell, RawSession)
    big = BigSession(line, head, shell.id, shell.app_name, shell.user_id, shell.state, shell.last_update_time)
    app, user, sid = shell.app_name, shell.user_id, shell.id
    offset = 0
    try:
        with open(line.path, "rb") as handle:
            items = ijson.items(_Region(handle, line.start, line.end), "events.item", use_float=True)
            while True:
                chunk = [event for _, event in zip(range(CHUNK), items, strict=False)]
                if not chunk:
                    break
                for i, event in enumerate(chunk):
                    if type(event) is dict and event.get("id", "") == "":
                        event["id"] = event_id(app, user, sid, offset + i)
                try:
                    _, record = _checked(where, {**fields, "events": chunk}, limits)
                except BadInput as exc:
                    raise _shifted(exc, offset) from None
                assert isinstance(record, RawSession)
                for i, event in enumerate(record.events):
                    if event.id in seen:
                        raise BadInput(f"{where}: $.events[{offset + i}].id: duplicate event id {event.id!r}")
                    seen.add(event.id)
                yield big, record.events
                offset += len(chunk)
    except ijson.JSONError as exc:
        raise _json_error(where, exc) from None
    if offset == 0:
        yield big, []


def _shifted(exc: BadInput, offset: int) -> BadInput:
    """`exc` with each `$.events[i]` counted from the session's first event, not the chunk's."""
    message = _EVENT_PATH.sub(lambda m: f"$.events[{int(m[1]) + offset}]", exc.message)
    return BadInput(message, hint=getattr(exc, "hint", None))
