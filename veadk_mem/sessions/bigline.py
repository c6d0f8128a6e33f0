"""Sessions on a JSONL line too large to decode whole: read a value at a time.

A session of 200,000 events is one line of tens of megabytes; decoded whole, its events,
their stored form and their rows would all live at once. A line of
`big_line_bytes()` and more is never held in memory: the check pass reads it once, a
block at a time, each event decoded by json's C decoder (`_Scanner`); the events wait,
decoded, in a private spool file until the line's end has given the session's own fields,
then are checked a chunk at a time as any session is checked (same messages;
`$.events[i]` counts from the session's first event) and spooled in stored form. The
write pass reads that spool, a chunk at a time, inside the session's one transaction
(`big_writes.BigWrites`).
"""

from __future__ import annotations

import contextlib
import marshal
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from veadk_mem.errors import BadInput
from veadk_mem.sessions.checks import check_record
from veadk_mem.sessions.files import remove_stale, spool_dir, unnamed_spool

if TYPE_CHECKING:
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.rawsession import RawEvent

BIG_LINE = 16 * 1024 * 1024  # bytes; a longer JSONL line is streamed ($VMEM_BIG_LINE)
SQLITE_BIG_LINE = 2 * 1024 * 1024  # ... into sqlite, where it is also written in short transactions
CHUNK = 2000  # events checked, built and written at a time
SPOOL_PREFIX = "vmem-big-"
_EVENT_PATH = re.compile(r"\$\.events\[(\d+)\]")
_UNSET = object()


def big_line_bytes(default: int = BIG_LINE) -> int:
    """The line length from which a session is streamed: [tuning] big_line_bytes ($VMEM_BIG_LINE), else `default`."""
    from veadk_mem.config import tuning  # here: the import's reader process never loads the settings

    return tuning().big_line_bytes or default


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
    spool: IO[bytes] | None = None  # the checked events in stored form (marshal, a chunk a record), for the write
    # pass: an unnamed file (`files.unnamed_spool`), so a killed import leaves nothing behind
    given_create_time: float | None = None  # the line's createTime (an export's), kept as given

    def remove_spool(self) -> None:
        """Delete the spool file, once the session is written (or the import ended)."""
        if self.spool is not None:
            with contextlib.suppress(OSError):
                self.spool.close()
            self.spool = None

    def update_time(self, now: float) -> float:
        """The update time stored for it: lastUpdateTime, else its newest event, else `now` (as `rows.head_of`)."""
        return self.last_update_time or (self.last if self.count else now)

    def create_time(self, now: float) -> float:
        """The create time stored for it: the line's createTime, else its first event (as `rows.head_of`)."""
        if self.given_create_time is not None:
            return self.given_create_time
        updated = self.update_time(now)
        return min(self.first, updated) if self.count else updated


class _Region:
    """A file's bytes [start, end) as a readable binary file (what `_Scanner` reads)."""

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


def iter_lines(source: str | Path, name: str | None, limit: int) -> Iterator[tuple[str, Any, int]] | None:
    """(where, decoded JSON or BigLine, the line's bytes) for each line of a JSONL file; None when `source` is not one.

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


def _iter_lines(path: Path, name: str, limit: int) -> Iterator[tuple[str, Any, int]]:
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
                line = b""  # not held while the caller streams the line (`limit` bytes of it)
                while (rest := handle.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
                yield where, BigLine(str(path), start, handle.tell(), where), handle.tell() - start
                continue
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{name}: not UTF-8 text ({exc.reason})") from None
            yield where, loads(text, name, line=lineno), len(line)


def _scan_error(where: str, column: int, reason: str) -> BadInput:
    """The decoded path's wording (`jsonio.loads`): 'FILE: line N, column C: invalid JSON: reason'."""
    reason = reason.removesuffix(" at")
    return BadInput(f"{where}, column {column}: invalid JSON: {reason[:1].lower() + reason[1:]}")


class _Scanner:
    """One JSON document read from a binary stream a block at a time, a value at a time.

    json's C decoder (`JSONDecoder.raw_decode`) decodes each value; only the structure
    around the values that matter (the session object, its `events` array) is walked
    here, so a line of 200,000 events is read once, at the C decoder's speed, and only a
    block of it is held as text at a time.
    """

    _WS = re.compile(r"[ \t\n\r]*")
    BLOCK = 1 << 20

    def __init__(self, stream: _Region, where: str) -> None:
        import codecs
        import json

        self._read = stream.read
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._decode = json.JSONDecoder().raw_decode
        self._where = where
        self.buf = ""
        self.pos = 0
        self._base = 0  # characters of the line before `buf`
        self._eof = False

    def _more(self, size: int = BLOCK) -> bool:
        """Append the next `size` bytes (as text) to the buffer; False at the end of the line."""
        if self._eof:
            return False
        data = self._read(size)
        try:
            text = self._text.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise BadInput(f"{self._where}: not UTF-8 text ({exc.reason})") from None
        if not data:
            self._eof = True
        if self.pos > (len(self.buf) >> 1):  # drop what was read: the buffer stays about a block
            self._base += self.pos
            self.buf, self.pos = self.buf[self.pos :], 0
        self.buf += text
        return bool(data) or bool(text)

    def error(self, reason: str) -> BadInput:
        """BadInput naming the current position."""
        return _scan_error(self._where, self._base + self.pos + 1, reason)

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end), not consumed."""
        while True:
            self.pos = self._WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos : self.pos + 1]

    def expect(self, char: str, reason: str) -> None:
        if self.peek() != char:
            raise self.error(reason)
        self.pos += 1

    def value(self) -> Any:
        """The JSON value at the current position (after whitespace), decoded; the position moves past it."""
        import json

        self.peek()
        while True:
            try:
                value, end = self._decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                # the value may go on past the buffer: read on (a larger block each time), and
                # only call it invalid once the line has no more to give
                column = self._base + exc.pos + 1  # before reading on moves the buffer
                if self._more(max(self.BLOCK, len(self.buf) - self.pos)):
                    continue
                raise _scan_error(self._where, column, exc.msg) from None
            if end >= len(self.buf) and self._more():  # a number may have more digits to come
                continue
            self.pos = end
            return value


def _scan(line: BigLine, head: dict[str, Any]) -> Iterator[list[Any]]:
    """The line's `events` items a chunk at a time (decoded, not checked); `head` gets its other fields.

    A second `events` key starts the items again (`restart` chunk: an empty list), as the
    decoded path keeps the last of repeated keys.
    """
    with open(line.path, "rb") as handle:
        s = _Scanner(_Region(handle, line.start, line.end), line.where)
        first = s.peek()
        if first != "{":
            if first and first in '["-0123456789tfnNI':  # JSON, but not an object
                raise BadInput(f"{line.where}: $: expected a session object")
            raise s.error("Expecting value")
        s.pos += 1
        if s.peek() == "}":
            s.pos += 1
        else:
            while True:
                if s.peek() != '"':
                    raise s.error("Expecting property name enclosed in double quotes")
                key = s.value()
                s.expect(":", "Expecting ':' delimiter")
                if key == "events" and s.peek() == "[":
                    if head.get("events") is _UNSET:
                        yield []  # the array again: what came before is void
                    head["events"] = _UNSET
                    yield from _scan_items(s)
                else:
                    head[key] = s.value()
                if _closed(s, "}"):
                    break
        if s.peek() != "":
            raise s.error("Extra data")


def _scan_items(s: _Scanner) -> Iterator[list[Any]]:
    """The items of the array at `s` (its `[` next), CHUNK at a time."""
    s.pos += 1
    if s.peek() == "]":
        s.pos += 1
        return
    chunk: list[Any] = []
    while True:
        chunk.append(s.value())
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
        if _closed(s, "]"):
            break
    if chunk:
        yield chunk


def _closed(s: _Scanner, close: str) -> bool:
    """After a member or an item: True at `close` (passed), False at a comma (passed), else the error."""
    c = s.peek()
    s.pos += 1
    if c == close:
        return True
    if c != ",":
        s.pos -= 1
        raise s.error("Expecting ',' delimiter")
    return False


def check_big(line: BigLine, limits: Limits | None, *, spool: bool = False) -> BigSession:
    """Check the long line's session as `validate.iter_checked` checks any: BadInput naming the first fault.

    The line is read once (`_scan`): its events, decoded, wait in a private temporary file
    (marshal, mode 0600, in the stdin spools' directory) until the line's end has given
    the session's own fields (lastUpdateTime comes after the events in ADK's order), then
    are checked a chunk at a time. With `spool`, the checked events are kept in stored
    form in such a file for the write pass, which then neither parses nor checks them again.
    """
    directory = spool_dir()
    remove_stale(directory, SPOOL_PREFIX + "*")  # named spools of an older vmem, killed
    seen: set[str] = set()
    big: BigSession | None = None
    out: IO[bytes] | None = None
    try:
        head: dict[str, Any] = {}
        with unnamed_spool(directory, SPOOL_PREFIX) as raw:
            for chunk in _scan(line, head):
                if not chunk:  # a second events array: the first is void
                    raw.seek(0)
                    raw.truncate()
                    continue
                _dump(chunk, raw)
            raw.seek(0)
            if spool:
                out = unnamed_spool(directory, SPOOL_PREFIX)
            for big, events in _chunks(line, limits, seen, head, _raw_chunks(raw)):
                if not events:
                    continue
                stamps = [e.timestamp for e in events]
                low, high = min(stamps), max(stamps)
                big.first = low if not big.count else min(big.first, low)
                big.last = high if not big.count else max(big.last, high)
                big.count += len(events)
                if out is not None:
                    _dump(
                        [
                            (e.id, e.invocation_id, e.author, e.timestamp, e.branch, e.error_code, e.data)
                            for e in events
                        ],
                        out,
                    )
        assert big is not None
        if out is not None:
            out.flush()
            big.spool, out = out, None
        return big
    finally:
        if out is not None:  # a failure part-way: the spool goes (unnamed, it leaves no file in any case)
            out.close()


_FRAME = struct.Struct("<Q")


def _dump(chunk: list[Any], handle: IO[bytes]) -> None:
    """One chunk to a spool: its length, then its marshal bytes."""
    data = marshal.dumps(chunk)
    handle.write(_FRAME.pack(len(data)) + data)


def _raw_chunks(handle: IO[bytes]) -> Iterator[list[Any]]:
    """The chunks `_dump` wrote, in order. A frame is read whole and decoded from bytes:
    `marshal.load` on the file calls its read() for every string (several times slower)."""
    while len(head := handle.read(_FRAME.size)) == _FRAME.size:
        yield marshal.loads(handle.read(_FRAME.unpack(head)[0]))


def event_chunks(big: BigSession) -> Iterator[list[RawEvent]]:
    """The session's events in stored form, a chunk at a time: from its spool (the line checked again without one)."""
    from veadk_mem.sessions.rawsession import RawEvent

    if big.spool is None:
        big.spool = check_big(big.line, None, spool=True).spool
    assert big.spool is not None
    handle = big.spool
    handle.seek(0)
    for chunk in _raw_chunks(handle):
        yield [RawEvent(*fields) for fields in chunk]


def _chunks(
    line: BigLine, limits: Limits | None, seen: set[str], head: dict[str, Any], raw: Iterator[list[Any]]
) -> Iterator[tuple[BigSession, list[RawEvent]]]:
    """The session checked: its events in stored form a chunk at a time, `raw` the decoded chunks."""
    from veadk_mem.sessions.rawsession import RawSession, event_id

    where = line.where
    fields = {k: v for k, v in head.items() if k != "events"}
    if head.get("events", _UNSET) is not _UNSET:  # absent, or not an array: as the whole session is judged
        _, record = check_record(where, {**fields, **({"events": head["events"]} if "events" in head else {})}, limits)
        assert isinstance(record, RawSession)
        big = BigSession(line, head, record.id, record.app_name, record.user_id, record.state, record.last_update_time)
        big.given_create_time = record.create_time
        yield big, record.events
        return
    _, shell = check_record(where, {**fields, "events": []}, limits)
    assert isinstance(shell, RawSession)
    big = BigSession(line, head, shell.id, shell.app_name, shell.user_id, shell.state, shell.last_update_time)
    big.given_create_time = shell.create_time
    app, user, sid = shell.app_name, shell.user_id, shell.id
    offset = 0
    for chunk in raw:
        for i, event in enumerate(chunk):
            if type(event) is dict and event.get("id", "") == "":
                event["id"] = event_id(app, user, sid, offset + i)
        try:
            _, record = check_record(where, {**fields, "events": chunk}, limits)
        except BadInput as exc:
            raise _shifted(exc, offset) from None
        assert isinstance(record, RawSession)
        for i, event in enumerate(record.events):
            if event.id in seen:
                raise BadInput(f"{where}: $.events[{offset + i}].id: duplicate event id {event.id!r}")
            seen.add(event.id)
        yield big, record.events
        offset += len(chunk)
    if offset == 0:
        yield big, []


def _shifted(exc: BadInput, offset: int) -> BadInput:
    """`exc` with each `$.events[i]` counted from the session's first event, not the chunk's."""
    message = _EVENT_PATH.sub(lambda m: f"$.events[{int(m[1]) + offset}]", exc.message)
    return BadInput(message, hint=getattr(exc, "hint", None))
