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

try:
    import fcntl
except ImportError:  # not POSIX: spools are removed by age only
    fcntl = None  # type: ignore[assignment]
from veadk_mem.files import create_private as create_private

SPOOL_PREFIX = "vmem-stdin-"
_STALE_AGE = 24 * 3600  # a spool older than this belongs to no running vmem
_GRACE = 60.0  # seconds a spool no process holds locked is left alone (it may be being made)


def check_output(output: Path) -> None:
    """BadInput, before anything is read, for an -o that cannot be written (`veadk_mem.files`)."""
    files.check_target(output, option="-o")


def atomic_output(output: Path) -> AbstractContextManager[IO[str]]:
    """The export's `-o` file, written by the one writer: whole, 0600, never through a link; gzip
    when its name ends in `.gz`."""
    return files.atomic_output(output, option="-o", compress=files.compression(output))


# --- stdin spool and stale temporary files --------------------------------------------------


def spool_dir() -> Path:
    """Where stdin spools go: a private directory under the user's cache."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vmem"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        base.chmod(0o700)
    return base


def unnamed_spool(directory: Path, prefix: str) -> IO[bytes]:
    """A private temporary file with no name (O_TMPFILE, or unlinked as soon as made): nothing is left
    behind whatever happens to vmem, kill -9 included."""
    return tempfile.TemporaryFile("w+b", prefix=prefix, dir=directory)


def _hold(fd: int) -> None:
    """Lock the spool `fd` for as long as it is open: a later run that can take the lock knows its
    owner is gone (`remove_stale`)."""
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _abandoned(path: Path) -> bool:
    """True when no process holds the spool's lock (`_hold`): whoever made it is gone."""
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_stale(directory: Path, pattern: str, *, max_age: float = _STALE_AGE) -> int:
    """Delete files matching `pattern` in `directory` left by a vmem that was killed (kill -9): those no
    process holds locked (untouched for a minute, so one being made is never taken), and any
    untouched for `max_age` seconds."""
    removed = 0
    now = time.time()
    try:
        candidates = list(directory.glob(pattern))
    except OSError:
        return 0
    for path in candidates:
        try:
            info = path.lstat()
            if not (path.is_symlink() or path.is_file()):
                continue
            if info.st_mtime < now - max_age or (
                info.st_mtime < now - _GRACE and not path.is_symlink() and _abandoned(path)
            ):
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def spooled_stdin() -> Iterator[Path]:
    """Stdin copied as bytes to a file only this user can read, removed afterwards.

    Spools a killed vmem left (no process holds their lock, or older than a day) are removed first. Bytes are copied
    unchanged, so non-UTF-8 input is reported by the reader naming <stdin>, not as a crash.
    """
    directory = spool_dir()
    remove_stale(directory, SPOOL_PREFIX + "*")
    fd, name = tempfile.mkstemp(prefix=SPOOL_PREFIX, suffix=".jsonl", dir=directory)  # mode 0600, O_EXCL
    path = Path(name)
    _hold(fd)  # held until the import ends: a run after a kill -9 finds it unlocked and removes it
    try:
        with os.fdopen(fd, "wb", closefd=False) as handle:
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
        os.close(fd)
