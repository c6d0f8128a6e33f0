"""Driver and connection failures as one-line, secret-free VmemErrors; which ones a retry fixes."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from veadk_mem.config import mask_url, redact
from veadk_mem.errors import StoreError, VmemError

T = TypeVar("T")
RETRY_ATTEMPTS = 5  # tries in all; 50 ms x the attempt's number between them


UNCHANGED = "; nothing was changed"  # ends the message of a failure that changed nothing


def partial(message: str) -> str:
    """`message` without its closing claim that nothing was changed: for a caller that has
    committed part of its work, and says what instead."""
    return message.removesuffix(UNCHANGED)


_AUTH_HINTS = ("password authentication failed", "access denied", "invalidpassword", "authentication failed")


def _refused_login(orig: BaseException, low: str) -> bool:
    """The server refused the login: a wrong password, or (SQLSTATE class 28) a user it does not
    know or may not let in from here."""
    if any(h in low for h in _AUTH_HINTS) or type(orig).__name__ == "InvalidPasswordError":
        return True
    return str(getattr(orig, "sqlstate", "") or getattr(orig, "pgcode", "") or "").startswith("28")


def describe_db_error(
    exc: BaseException, url: str, password: str = "", busy_timeout: float = 0, *, unchanged: bool = True
) -> VmemError:
    """A one-line, secret-free VmemError for a driver or connection failure.

    `unchanged`: a lock that was never taken says nothing was changed; a caller that has
    committed part of its work (an import) says what instead.
    """
    if isinstance(exc, VmemError):
        return exc
    orig = getattr(exc, "orig", None) or exc
    text = " ".join(str(orig).split()) or type(orig).__name__
    if password:
        text = text.replace(password, "****")
    text = redact(text)[:300]
    where = mask_url(url)
    low = text.lower()
    if "database is locked" in low or "database table is locked" in low:
        return StoreError(
            f"{where}: database is locked by another writer (waited {busy_timeout:g} s)"
            + (UNCHANGED if unchanged else ""),
            hint="an agent is writing to it: retry, or raise the wait with VMEM_SQLITE_BUSY_TIMEOUT (seconds)",
        )
    if "max_allowed_packet" in low or "packet bigger" in low or "packet too large" in low:
        return StoreError(
            f"{where}: the server refused a statement larger than its max_allowed_packet: {text}",
            hint="raise max_allowed_packet on the MariaDB/MySQL server",
        )
    if "during query" in low or "server has gone away" in low:  # connected, then dropped mid-statement
        return StoreError(
            f"{where}: the server closed the connection during a statement: {text}",
            hint="MariaDB/MySQL does this for a statement larger than its max_allowed_packet; "
            "else check the server's log",
        )
    if _refused_login(orig, low):
        return StoreError(f"{where}: authentication failed: {text}", hint="check the user and password")
    if isinstance(orig, OSError) or "connect" in low or "refused" in low or "name or service" in low:
        return StoreError(f"{where}: cannot connect: {text}", hint="is the database server running and reachable?")
    return StoreError(f"{where}: {type(orig).__name__}: {text}")


async def retry_db(fn: Callable[[], Awaitable[T]], when: Callable[[BaseException], bool]) -> T:
    """Await `fn`, again while it fails with an error `when` says a second try fixes (a deadlock,
    a table another creator just made): five tries at most, 50, 100, 150 and 200 ms apart.
    The last error, or one a retry cannot fix, is raised as it came."""
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_incrementing

    retrying = AsyncRetrying(
        stop=stop_after_attempt(RETRY_ATTEMPTS),
        wait=wait_incrementing(start=0.05, increment=0.05),
        retry=retry_if_exception(lambda exc: isinstance(exc, Exception) and when(exc)),
        reraise=True,
    )
    return await retrying(fn)


def retryable(exc: BaseException) -> bool:
    """True for a deadlock or serialization failure: the transaction was rolled back whole."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).lower()
    code = str(getattr(orig, "sqlstate", "") or getattr(orig, "pgcode", "") or "")
    return "deadlock" in text or "1213" in text or "could not serialize" in text or code in ("40001", "40P01")


_INSERT_INTO = re.compile(r"\s*insert\s+into\s+(?:[\w\"`]+\.)?[\"`]?(\w+)", re.IGNORECASE)


def duplicate_in(exc: BaseException) -> str | None:
    """The table whose INSERT failed on a duplicate key (MariaDB 1062, PostgreSQL 23505), else None."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    if "duplicate entry" not in text and "duplicate key value" not in text:
        return None
    found = _INSERT_INTO.match(getattr(exc, "statement", None) or "")
    return found.group(1).lower() if found else None


def concurrent_ddl(exc: BaseException) -> bool:
    """True for the errors of a table, index or metadata row another creator just made."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return any(
        hint in text
        for hint in ("already exists", "duplicate key", "duplicate entry", "unique constraint", "1050", "1061")
    )
