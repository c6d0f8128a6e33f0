"""Files vmem writes for sessions: an export's output, created safely and renamed into place;
the import's stdin spool; stale temporary files. Imports nothing of `sessions/`.

The output is written to a temporary file created exclusively (O_EXCL: never through a
planted symlink, never over someone else's file) with mode 0600 in the target's
directory, then renamed over the target, so a reader never sees half a file and a
failure leaves nothing. Temporary files a killed vmem left behind are removed on the
next export to the same file once they are an hour old.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from veadk_mem.errors import BadInput, StoreError

SPOOL_PREFIX = "vmem-stdin-"
_STALE_AGE = 24 * 3600  # a spool or .part file older than this belongs to no running vmem
STALE_PART_AGE = 3600.0


def check_output(output: Path) -> None:
    """BadInput, before anything is read, for an -o whose directory is missing or that is a directory."""
    if not output.parent.is_dir():
        raise BadInput(f"-o {output}: no such directory: {output.parent}")
    if output.is_dir():
        raise BadInput(f"-o {output}: is a directory, expected a file name")


@contextlib.contextmanager
def atomic_output(output: Path) -> Iterator[IO[str]]:
    """A text stream that becomes `output` (mode 0600) when the block ends without error."""
    check_output(output)
    remove_stale(output.parent, f"{output.name}.*.part", max_age=STALE_PART_AGE)
    try:
        fd, name = tempfile.mkstemp(prefix=f"{output.name}.", suffix=".part", dir=output.parent)
    except OSError as exc:
        raise BadInput(f"-o {output}: cannot write: {exc.strerror}") from None
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, output)  # replaces a symlink at `output` itself, never its target
    except OSError as exc:  # a full disk, say: nothing half-written is left
        raise StoreError(f"-o {output}: write failed: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)


def create_private(path: Path) -> None:
    """Create an empty file only its owner can read (a new session database), unless it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return
    os.close(fd)


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
