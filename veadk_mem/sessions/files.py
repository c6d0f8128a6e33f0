"""Files vmem writes for sessions: an export's output, created safely and renamed into place.

The output is written to a temporary file created exclusively (O_EXCL: never through a
planted symlink, never over someone else's file) with mode 0600 in the target's
directory, then renamed over the target, so a reader never sees half a file and a
failure leaves nothing. Temporary files a killed vmem left behind are removed on the
next export to the same file once they are an hour old.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from veadk_mem.errors import BadInput, StoreError
from veadk_mem.sessions.importer import remove_stale

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
