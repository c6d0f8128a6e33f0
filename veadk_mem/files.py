"""Every file vmem writes, written one way: exports, backups, `config init`, completion scripts.

A file is written to `<name>.<random>.part` in its own directory, created exclusively with
mode 0600 (O_EXCL: never through a planted link, never over another's file) and locked while
written; then flushed, fsynced, given its final mode and renamed over the target (or linked,
where an existing file must never be replaced), and the directory fsynced. A reader never
sees half a file; any failure, a full disk included, removes the part and leaves the target as
it was. A symbolic link at the target is refused (exit 2) unless the command's `--force` says
to replace the link itself; its target is never written. Parts a killed vmem left (no live
writer holds their lock) are removed on the next write of the same file.

Also here: private files created empty (a new session database, the replay ledger), whose
sqlite companions (-wal, -shm, -journal) are kept private too.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

from veadk_mem.errors import BadInput, StoreError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

PRIVATE = 0o600
PART = re.compile(r"^(?P<name>.+)\.[A-Za-z0-9_]+\.part$")  # <target name>.<mkstemp's random>.part
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")
_NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def _where(path: Path, option: str) -> str:
    return f"{option} {path}" if option else str(path)


def write_error(exc: OSError, path: Path | str) -> StoreError:
    """The one message for a write that failed at run time: a full disk names the file (exit 1)."""
    if exc.errno == errno.ENOSPC:
        return StoreError(f"no space left on device writing {path}")
    if exc.errno == errno.EDQUOT:
        return StoreError(f"disk quota exceeded writing {path}")
    return StoreError(f"cannot write {path}: {exc.strerror or exc}")


def check_target(path: Path | str, *, option: str = "", replace_link: bool = False) -> None:
    """BadInput, before anything is read, for a target that cannot be written as a file.

    option: the flag that named it (`-o`, `--backup`), put in front of the path in messages.
    replace_link: a symbolic link there may be replaced (the link itself; `--force`).
    """
    target = Path(path)
    where = _where(target, option)
    folder = target.parent
    if not folder.is_dir():
        raise BadInput(f"{where}: no such directory: {folder}")
    if target.is_symlink():
        if not replace_link:
            raise BadInput(
                f"{where}: is a symbolic link; vmem never writes through one (remove it or name another file)"
            )
    elif target.is_dir():
        raise BadInput(f"{where}: is a directory, expected a file name")
    if option and compression(target) == "zstd":  # a named .zst: the package it needs, before any work
        _zstandard(where)


class _PartIO(io.FileIO):
    """The part file's raw layer: remembers the OSError a write raised, so that only errors of
    this file (a full disk) are reported as writing it, not those of the code producing the data."""

    failed: OSError | None = None

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            self.failed = exc
            raise


@contextlib.contextmanager
def atomic_output(
    path: Path | str,
    *,
    option: str = "",
    overwrite: bool = True,
    replace_link: bool = False,
    mode: int = PRIVATE,
    family: re.Pattern[str] | None = None,
    compress: bool | str | None = False,
) -> Iterator[IO[str]]:
    """A UTF-8 text stream that becomes `path` whole when the block ends without error.

    overwrite: False never replaces an existing file, even one that appears while writing.
    mode: the file's mode once in place (the part is 0600 until then).
    family: names of other targets whose stale parts are also this writer's (`remove_stale_parts`).
    compress: "gzip" (or True) makes the file gzip (`gunzip -c` gives the text), complete with its
    trailer before it is put in place; its header holds no name and no time, so one text gives one
    file. "zstd" makes it one zstandard frame (`zstd -dc`), with the `zstandard` package: without
    it, BadInput (exit 2) naming the install line, before any file is made.
    """
    target = Path(path)
    where = _where(target, option)
    method = "gzip" if compress is True else compress if isinstance(compress, str) else None
    zstd = _zstandard(where) if method == "zstd" else None
    check_target(target, option=option, replace_link=replace_link)
    remove_stale_parts(target, family)
    try:
        fd, name = tempfile.mkstemp(prefix=f"{target.name}.", suffix=".part", dir=target.parent)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise write_error(exc, target) from None
        raise BadInput(f"{where}: cannot write: {exc.strerror}") from None
    part = Path(name)
    _lock(fd)
    raw = _PartIO(fd, "w")
    buffered = io.BufferedWriter(raw)
    gz: Any = None  # a GzipFile or a zstandard stream writer over `buffered`
    if method == "gzip":
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=buffered, mtime=0)
    elif zstd is not None:
        gz = zstd.ZstdCompressor().stream_writer(buffered, closefd=False)
    handle = io.TextIOWrapper(gz or buffered, encoding="utf-8")
    published = False
    try:
        try:
            yield handle
        except OSError as exc:
            if exc is raw.failed:
                raise write_error(exc, target) from None
            raise
        try:
            handle.flush()
            if gz is not None:
                gz.close()  # the trailer; the file under it stays open
            buffered.flush()
            os.fsync(fd)
            if hasattr(os, "fchmod"):  # not on Windows before Python 3.13
                os.fchmod(fd, mode)
            # renamed while still open and locked, so no other vmem takes it for a stale part
            published = _publish(part, target, overwrite=overwrite, where=where)
            handle.close()
            buffered.close()
        except OSError as exc:
            raise write_error(exc, target) from None
        _fsync_directory(target.parent)
    finally:
        if not raw.closed:
            raw.close()  # not handle.close(): flushing the rest of a failed write would only fail again
        if not published:
            part.unlink(missing_ok=True)


def compression(path: Path | str) -> str | None:
    """How an `-o` file is to be compressed, by its name as the tools name theirs: "gzip" for
    `backup.jsonl.gz`, "zstd" for `backup.jsonl.zst`, else None."""
    name = Path(path).name.lower()
    return "gzip" if name.endswith(".gz") else "zstd" if name.endswith(".zst") else None


def _zstandard(where: str) -> Any:
    """The `zstandard` module, or BadInput (exit 2) saying how to install it: an optional package."""
    try:
        import zstandard
    except ImportError:
        raise BadInput(
            f"{where}: writing zstandard (.zst) needs the zstandard package",
            hint="pip install zstandard (into vmem's environment), or name the file .gz",
        ) from None
    return zstandard


def write_text(
    path: Path | str, text: str, *, option: str = "", overwrite: bool = True, replace_link: bool = False
) -> None:
    """Write `text` as the whole file `path` (mode 0600), by `atomic_output`."""
    with atomic_output(path, option=option, overwrite=overwrite, replace_link=replace_link) as handle:
        handle.write(text)


def _publish(part: Path, target: Path, *, overwrite: bool, where: str) -> bool:
    """Put the finished part in place; True once the part's name is gone (renamed)."""
    if overwrite:
        os.replace(part, target)  # replaces a link at `target` itself, never what it points to
        return True
    try:
        os.link(part, target)  # never over a file that appeared meanwhile
    except FileExistsError:
        raise BadInput(f"{where}: exists; nothing was written over it") from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        os.replace(part, target)  # a filesystem without hard links
        return True
    part.unlink()
    return True


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every platform opens directories)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --- stale parts ------------------------------------------------------------------------------


def _lock(fd: int) -> bool:
    """Take the exclusive lock a writer holds on its part; False while a live writer holds it.

    Without flock (Windows), a part counts as free once untouched for an hour.
    """
    try:
        import fcntl
    except ImportError:
        return os.fstat(fd).st_mtime < time.time() - 3600
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _own_parts(target: Path, family: re.Pattern[str] | None) -> list[Path]:
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return []
    out = []
    for entry in entries:
        match = PART.match(entry.name)
        if match and (match["name"] == target.name or (family is not None and family.match(match["name"]))):
            out.append(entry)
    return sorted(out)


def remove_stale_parts(target: Path, family: re.Pattern[str] | None = None) -> list[Path]:
    """Remove the parts a killed vmem (kill -9) left of `target` (and of the `family`'s names);
    a live writer's (locked) stay. A link with a part's name is removed, never followed."""
    removed = []
    for part in _own_parts(target, family):
        try:
            if part.is_symlink():
                part.unlink()
                removed.append(part)
                continue
            if not part.is_file():
                continue
            fd = os.open(part, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                if _lock(fd):
                    part.unlink()
                    removed.append(part)
            finally:
                os.close(fd)
        except OSError:
            continue
    return removed


# --- private files made in place (databases) --------------------------------------------------


def create_private(path: Path) -> bool:
    """Create an empty file only its owner can read (a new database), unless one exists; True if made."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), PRIVATE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def private_sqlite(path: Path) -> None:
    """A sqlite file vmem keeps (the replay ledger): created 0600 before sqlite opens it, so the
    -wal and -shm files sqlite makes take that mode; an older, wider one is narrowed."""
    create_private(path)
    for name in (path, *(path.with_name(path.name + s) for s in SQLITE_COMPANIONS)):
        with contextlib.suppress(OSError):
            info = name.lstat()
            if not name.is_symlink() and info.st_mode & 0o077:
                name.chmod(PRIVATE)


def open_private_sqlite(
    path: Path, timeout: float, setup: Callable[[sqlite3.Connection], None], *, pragmas: tuple[str, ...] = ()
) -> sqlite3.Connection:
    """A sqlite file vmem keeps (ledger, history, sync cursor), opened for writing: 0600 with its
    -wal and -shm (`private_sqlite`), WAL, `pragmas`, then `setup` (its schema); closed on failure.

    A symbolic link there is refused (BadInput, exit 2), before and after the open: sqlite follows
    it and would create a missing target with the umask's mode, outside the private file."""
    import sqlite3

    _not_a_link(path)
    private_sqlite(path)
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        _not_a_link(path)  # planted between the check and the open
        for pragma in ("journal_mode=WAL", *pragmas):
            conn.execute(f"PRAGMA {pragma}")
        setup(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _not_a_link(path: Path) -> None:
    """BadInput for a symbolic link where vmem keeps one of its own files."""
    if path.is_symlink():
        raise BadInput(f"{path}: is a symbolic link; vmem never opens its own files through one (remove it)")
