"""The write pass of a large import read in a second process, on the machine's other core.

`session import` reads its file twice: the check pass, then the write pass, which decodes
and walks every record again and builds its rows (`rows.build_columns`). In one process
that work and the writer's own (driver calls, sqlite's inserts) take turns holding the
GIL, and each of the writer's many small waits on the database became a wait for the GIL
too. A child process does the reading instead: it starts while the file is being checked
(its start-up and first batches overlap the check pass), and sends each batch's columns
down a pipe; the writer only converts times, makes tuples and writes.

Used for files of `PROCESS_FROM` bytes and more on a machine with two or more cores; the
child runs `main` here with the parent's interpreter. Frames on
its stdout are an 8-byte length and a pickle: ("batch", Columns fields), ("big", offset)
for a line the writer streams itself (`bigline`), ("end",) or ("error", message). The
pickles are the child's own output, read only by its parent.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from veadk_mem.errors import BadInput, StoreError, VmemError
from veadk_mem.sessions.bigline import BigLine
from veadk_mem.sessions.safepickle import loads_plain
from veadk_mem.sessions.validate import iter_checked

PROCESS_FROM = 16 * 1024 * 1024  # below this the check pass is shorter than the child's start-up
READER_TIMEOUT = 300.0  # seconds the writer waits for the child's next bytes ($VMEM_READER_TIMEOUT)
_FRAME = struct.Struct("<Q")
_CHILD = "import sys; sys.path.append(sys.argv[1]); from veadk_mem.sessions.import_child import main; main()"


def worthwhile(source: str | Path) -> bool:
    """True when reading `source` in a child process should pay off: a large JSONL file, a spare core,
    and `[tuning] fast_paths` on.

    A JSON list (or one object) is decoded whole: a child would hold a second copy of it.
    """
    from veadk_mem.config import tuning  # the parent's settings; the child never loads them

    if not tuning().fast_paths:
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        if cores < 2 or os.path.getsize(source) < PROCESS_FROM:
            return False
        with open(source, "rb") as handle:
            first_line = handle.readline(1 << 20)
            while first_line and not first_line.strip():
                first_line = handle.readline(1 << 20)
    except OSError:
        return False
    if not first_line.lstrip().startswith(b"{"):
        return False
    # a first line past 1 MiB is a JSONL line (a long session, read as `bigline` reads it);
    # a shorter one is a whole object, not the start of one written over many lines
    return not first_line.endswith(b"\n") or first_line.rstrip().endswith(b"}")


class ReaderProcess:
    """A child reading an import file into batches of columns; `batches()` yields them in order."""

    def __init__(
        self,
        source: str | Path,
        name: str | None,
        *,
        batch_rows: int = 20_000,
        batch_seconds: float = 0.5,
        first_rows: int = 1000,
        big_bytes: int | None = None,
        style: str = "v1",
    ) -> None:
        """Start the child; batches are cut as the thread path cuts them (rows, or seconds of reading)."""
        # -P: the working directory never shadows a module; the package's own root is searched
        # last, so a source checkout imports as it does here and an installed one is unaffected
        package_root = str(Path(__file__).resolve().parents[2])
        self._proc = subprocess.Popen(
            [sys.executable, "-P", "-c", _CHILD, package_root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,  # raw reads: nothing buffered where the bounded wait (select) cannot see it
        )
        self._timeout = _timeout()
        assert self._proc.stdin is not None
        job = {
            "source": str(source),
            "name": name,
            "batch_rows": batch_rows,
            "batch_seconds": batch_seconds,
            "first_rows": first_rows,
            "big_bytes": big_bytes,
            "style": style,  # rows.TEXTS: the JSON text of the target's rows
        }
        self._proc.stdin.write(pickle.dumps(job))
        self._proc.stdin.close()
        self._ended = False

    def batches(self) -> Iterator[Any]:
        """Each batch's `rows.Columns` in file order, or where a long line starts (an int).

        Raises when the child fails.
        """
        from veadk_mem.sessions.rows import Columns

        stdout = self._proc.stdout
        assert stdout is not None
        while True:
            frame = _read_frame(stdout, self._timeout)
            if frame is None:
                code = self._proc.wait()
                raise StoreError(f"the import's reader process ended unexpectedly (exit code {code})")
            kind = frame[0]
            if kind == "end":
                self._ended = True
                return
            if kind == "error":
                raise BadInput(frame[1])
            if kind == "big":  # a long line, streamed by the writer itself: where it starts
                yield int(frame[1])
                continue
            yield Columns.from_frame(frame[1])

    def close(self) -> None:
        """Reap the child: let it exit once it has sent everything, else stop it at once."""
        if self._ended:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _timeout() -> float:
    """Seconds to wait for the child's next bytes: [tuning] reader_timeout ($VMEM_READER_TIMEOUT)."""
    from veadk_mem.config import tuning  # here: the reader process itself never loads the settings

    return tuning().reader_timeout


def _read_exact(stream: IO[bytes], size: int, timeout: float) -> bytes:
    """`size` bytes from the child's pipe (fewer at its end), waiting at most `timeout` s for each read.

    A child that sends nothing for that long (stopped with SIGSTOP, swapped out, hung) is an
    error, not a wait for ever: the write pass stops with what it has committed.
    """
    import select

    try:
        fd = stream.fileno()
    except (OSError, io.UnsupportedOperation):  # not a pipe (a test's BytesIO): nothing to wait for
        return stream.read(size)
    parts: list[bytes] = []
    left = size
    while left:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise StoreError(
                f"the import's reader process sent nothing for {timeout:g} s (stopped or hung); import stopped"
            )
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _read_frame(stream: IO[bytes], timeout: float = READER_TIMEOUT) -> Any:
    head = _read_exact(stream, _FRAME.size, timeout)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    body = _read_exact(stream, size, timeout)
    if len(body) < size:
        return None
    try:
        return loads_plain(body, "the import's reader")  # frames hold only containers, strings and numbers
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise StoreError(f"the import's reader process sent an unreadable batch ({exc})") from None


def _child() -> int:
    """The child: read the job from stdin, send batches to stdout until the file ends."""
    import gc
    import signal

    # Ctrl-C reaches the whole process group: the parent stops the import, says what it
    # committed, and kills this child; the child dying first would only blur that message
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from veadk_mem.sessions.rows import build_columns

    gc.disable()  # as the parent's import: nothing here makes reference cycles
    job = loads_plain(sys.stdin.buffer.read(), "the import's writer")
    # the frames get stdout's pipe to themselves: anything else writing to fd 1 goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    frames: queue.Queue[bytes | None] = queue.Queue(maxsize=2)  # batches built ahead of the writer, bounded

    def send() -> None:
        while (frame := frames.get()) is not None:
            try:
                out.write(_FRAME.pack(len(frame)) + frame)
                out.flush()
            except (BrokenPipeError, OSError):  # the parent stopped reading: it has its error already
                os._exit(1)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    def put(message: tuple[Any, ...]) -> None:
        frames.put(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def flush(batch: list[Any]) -> None:
        columns = build_columns(batch, job["style"])
        put(("batch", columns.to_frame()))

    try:
        batch: list[Any] = []
        rows, limit, started = 0, job["first_rows"], time.monotonic()
        for _, record in iter_checked(job["source"], job["name"], big="skip", big_bytes=job["big_bytes"]):
            if isinstance(record, BigLine):  # the writer streams it: cut the batch, say where it is
                if batch:
                    flush(batch)
                    batch, rows, limit, started = [], 0, job["batch_rows"], time.monotonic()
                put(("big", record.start))
                continue
            batch.append(record)
            rows += 1 + (0 if isinstance(record, dict) else len(record.events))
            # as `batches._take_batch`: rows, sessions, or seconds of reading (large events)
            if rows >= limit or len(batch) >= 5000 or time.monotonic() - started >= job["batch_seconds"]:
                flush(batch)
                batch, rows, limit, started = [], 0, job["batch_rows"], time.monotonic()
        if batch:
            flush(batch)
        put(("end",))
    except VmemError as exc:
        put(("error", exc.message))
    except RecursionError:
        put(("error", f"{job['name'] or job['source']}: JSON nested too deeply"))
    frames.put(None)
    sender.join()
    return 0


def main() -> None:
    """The child's entry point (`_CHILD`)."""
    try:
        sys.exit(_child())
    except (BrokenPipeError, KeyboardInterrupt):  # the parent stopped reading: it has its error already
        sys.exit(1)
