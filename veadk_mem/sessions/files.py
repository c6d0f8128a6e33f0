"""Files of the session commands: an export's `-o` (written by `veadk_mem.files`, the one
writer), the import's stdin spool and stale spools. Imports nothing of `sessions/`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO

from veadk_mem import files
from veadk_mem.files import create_private as create_private

SPOOL_PREFIX = "vmem-stdin-"
_STALE_AGE = 24 * 3600  # a spool older than this belongs to no running vmem


def check_output(output: Path) -> None:
    """BadInput, before anything is read, for an -o that cannot be written (`veadk_mem.files`)."""
    files.check_target(output, option="-o")


def atomic_output(output: Path) -> AbstractContextManager[IO[str]]:
    """The export's `-o` file, written by the one writer: whole, 0600, never through a link."""
    return files.atomic_output(output, option="-o")


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
