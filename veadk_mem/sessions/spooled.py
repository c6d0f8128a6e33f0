"""A session's events kept on disk, read back one at a time: what `ltm save --from-store` and
`policy test --from-store` take of a session too long to hold in memory."""

from __future__ import annotations

import os
import pickle
import struct
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from veadk_mem.sessions.safepickle import loads_plain

if TYPE_CHECKING:
    from veadk_mem.events import Event

_HEAD = struct.Struct("<Q")


class SpooledEvents(Sequence["Event"]):
    """Events in stored form in an unnamed private temporary file (nothing is left if vmem dies, and
    the file goes with the object), each validated as ADK's `Event` when it is read.

    Iterating reads the file from the start, a record at a time, at its own offset (`os.pread`), so
    two passes (embedding ahead, then the save) may run one inside the other. Indexing reads up
    to the event asked for: meant for passes, not random access."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115  (closed with the object)
        self._count = 0

    def reset(self) -> None:
        """Forget every event written (the session is read again)."""
        self._file.seek(0)
        self._file.truncate()
        self._count = 0

    def add(self, data: Sequence[dict[str, Any]]) -> None:
        """Append events as stored data (`codec.event_from_row`)."""
        for item in data:
            body = pickle.dumps(item, pickle.HIGHEST_PROTOCOL)
            self._file.write(_HEAD.pack(len(body)) + body)
        self._count += len(data)

    def done(self) -> None:
        self._file.flush()

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Event]:
        from veadk_mem.events import Event

        fd, offset = self._file.fileno(), 0
        validate = Event.model_validate
        for _ in range(self._count):
            (size,) = _HEAD.unpack(os.pread(fd, _HEAD.size, offset))
            data = loads_plain(os.pread(fd, size, offset + _HEAD.size), "the session spool")
            offset += _HEAD.size + size
            yield validate(data)

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        for n, event in enumerate(self):
            if n == index:
                return event
        raise IndexError(index)
