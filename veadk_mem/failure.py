"""One failure path for every long-term-memory store and embedder: classify, retry, report.

A backend (local, redis, opensearch, viking, mem0, openviking, tos_context) or an embedder
only turns what its client raised into a `Failure` (a kind, one line of detail, the HTTP
status and service code). Everything else is decided here, once:

- the retry policy (`RETRY_DELAYS`, through tenacity): a 429, a 5xx and a connection
  refused or lost mid-call (reset, closed, timed out) are retried after 0.5, 1, 2 and 4
  seconds (or the `Retry-After` asked for, up to 30 s); a name that does not resolve, a
  TLS failure, bad credentials and any other 4xx are reported at once;
- the error for what is left (`report`), in one message style, with the class DESIGN.md
  gives it: `StoreUnreachable` (the store went away: bulk commands stop there),
  `StoreAuthError`, `StoreThrottled`, `StoreRejected`, `NotFound` (exit 3), else `StoreError`;
- what a save that fails part way stored (`partial_write`): `PartialWrite(stored=...)`.

Secrets never enter a message: `one_line` masks them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from veadk_mem.errors import (
    NotFound,
    PartialWrite,
    StoreAuthError,
    StoreError,
    StoreRejected,
    StoreThrottled,
    StoreUnreachable,
    VmemError,
)

T = TypeVar("T")

# The waits between attempts: a run against a dead service gives up in seconds.
RETRY_DELAYS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
MAX_RETRY_AFTER = 30.0  # the longest `Retry-After` honoured, in seconds

AUTH, THROTTLED, SERVER, UNREACHABLE = "auth", "throttled", "server", "unreachable"
LOST, MALFORMED, MISSING, REFUSED = "lost", "malformed", "missing", "refused"
RETRYABLE = frozenset({THROTTLED, SERVER, LOST})


def kind_of_status(status: int | None) -> str:
    """The failure kind an HTTP status says: 401/403 auth, 429 throttled, 404 missing, 5xx server."""
    if status in (401, 403):
        return AUTH
    if status == 429:
        return THROTTLED
    if status == 404:
        return MISSING
    if status is not None and status >= 500:
        return SERVER
    return REFUSED


class Failure(Exception):
    """One failed call to a hosted service, classified so the retry and the message agree.

    kind: auth (401/403), throttled (429), server (5xx), unreachable (the name does not
    resolve, TLS fails: no retry helps), lost (the connection was refused or went away
    mid-call: reset, closed, timed out), malformed (a reply that is not the documented
    shape), missing (no such collection, bucket, set or session), refused (any other error
    the service answered with).
    `retry_after` is the wait the service asked for (seconds), when it asked.
    """

    def __init__(
        self,
        kind: str,
        detail: str = "",
        *,
        status: int | None = None,
        code: object = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = one_line(detail)
        self.status = status
        self.code = code
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    def http(self) -> str:
        """`HTTP 429` / `HTTP 401, code 1000001` / `code 1000005`, for messages."""
        parts = []
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        if self.code not in (None, "", 0):
            parts.append(f"code {self.code}")
        return ", ".join(parts)


def one_line(text: object, limit: int = 200, *, secrets: Iterable[str] = ()) -> str:
    """A service's message as one short line, secrets masked (replies can hold HTML pages or stack traces)."""
    flat = str(text)
    for secret in secrets:
        if secret:
            flat = flat.replace(secret, "****")  # before cutting: a cut must never leave part of a key
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def connection_reason(text: str) -> str:
    """`Connection refused` out of a requests/urllib3/httpx error chain, else a short form of it."""
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    for marker in (
        "timed out",
        "Name or service not known",
        "Connection refused",
        "Connection reset",
        "Connection aborted",
        "Remote end closed connection",
    ):
        if marker.lower() in text.lower():
            return marker
    return one_line(text, 120)


_NOT_THERE = (
    "name or service not known",
    "nodename nor servname",
    "getaddrinfo",
    "certificate",
    "[ssl",
    "sslerror",
    "wrong version number",
)


def connection_kind(exc: BaseException | str) -> str:
    """UNREACHABLE when no retry can help (the name does not resolve, TLS fails), else LOST:
    the connection was refused or went away mid-call (reset, closed, timed out), which a
    store restarting or a network blip explains, so it is tried again."""
    text = str(exc).lower()
    return UNREACHABLE if any(marker in text for marker in _NOT_THERE) else LOST


def retry_after(headers: object) -> float | None:
    """The wait a 429/503 asks for in its `Retry-After` header (seconds), None when it asks for none."""
    get = getattr(headers, "get", None)
    value = (get("Retry-After") or get("retry-after")) if get is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Service:
    """How one service's failures are told: where it is, what to check for each kind.

    `auth_hint` may depend on the failure and the call (VikingDB's collection calls always
    use AK/SK; OpenViking's "access denied" means the user id, not the key).
    """

    where: str  # "Mem0 at https://api.mem0.ai"
    credentials: str = "the credentials"  # what a 401/403 refused: "the API key"
    auth_hint: str | Callable[[Failure, str], str] = ""
    url_hint: str = ""  # "check DATABASE_MEM0_BASE_URL"
    throttle_hint: str = "wait and run again: a replay skips what the store already holds"
    missing: Callable[[Failure, str], VmemError] | None = None


def password_service(where: str, variables: str, url_hint: str) -> Service:
    """A server reached with a username and password (redis, opensearch): `variables` is the
    prefix of its settings' environment names (`DATABASE_REDIS`)."""
    return Service(
        where=where,
        credentials="the username or password",
        auth_hint=f"check {variables}_USERNAME / {variables}_PASSWORD",
        url_hint=url_hint,
    )


def report(service: Service, failure: Failure, what: str, retries: int = 0) -> VmemError:
    """The one-line error for a failure left after `retries` retries, while doing `what`."""
    where = service.where
    http = failure.http()
    paren = f" ({http})" if http else ""
    detail = f": {failure.detail}" if failure.detail else ""
    tried = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    url_hint = service.url_hint or None
    if failure.kind == AUTH:
        # The hint goes in the message: a save reports each session's message alone.
        hint = service.auth_hint(failure, what) if callable(service.auth_hint) else service.auth_hint
        check = f"; {hint}" if hint else ""
        return StoreAuthError(f"{where} refused {service.credentials}{paren} while {what}{detail}{check}")
    if failure.kind == THROTTLED:
        return StoreThrottled(f"{where} is still rate limiting{paren}{tried} while {what}", hint=service.throttle_hint)
    if failure.kind in (UNREACHABLE, LOST):
        return StoreUnreachable(f"cannot reach {where} while {what}{tried}{detail}", hint=url_hint)
    if failure.kind == MALFORMED:
        return StoreError(f"{where} sent a malformed reply while {what}{detail}", hint=url_hint)
    if failure.kind == MISSING:
        if service.missing is not None:
            return service.missing(failure, what)
        return NotFound(f"{where}: not found{paren} while {what}{detail}")
    if failure.kind == SERVER:
        return StoreError(f"{where} failed{paren}{tried} while {what}{detail}")
    return StoreRejected(f"{where} rejected the request{paren} while {what}{detail}")


def partial_write(error: VmemError, stored: list[str], total: int) -> VmemError:
    """The error of a save of `total` memories that failed after the store acknowledged `stored`.

    Nothing stored: the error itself. Otherwise a PartialWrite saying how many, `lost` when
    the store went away (a bulk command stops there rather than fail every later batch).
    """
    if isinstance(error, PartialWrite):
        return error
    if not stored:
        return error
    lost = isinstance(error, StoreUnreachable)
    message = (
        f"{error.message}; {len(stored)} of {total} memories were stored, "
        f"{total - len(stored)} were not (re-run to store the rest)"
    )
    return PartialWrite(message, stored=stored, lost=lost, hint=error.hint)


def backoff(delays: tuple[float, ...]) -> Callable[..., float]:
    """A tenacity `wait`: the next of `delays`, or the `Retry-After` the failure carries, capped."""

    def wait(state: object) -> float:
        attempt: int = getattr(state, "attempt_number", 1)
        delay = delays[min(attempt, len(delays)) - 1] if delays else 0.0
        outcome = getattr(state, "outcome", None)
        wanted = getattr(outcome.exception(), "retry_after", None) if outcome is not None and outcome.failed else None
        return delay if wanted is None else max(0.0, min(wanted, MAX_RETRY_AFTER))

    return wait


def retrying(delays: tuple[float, ...] = RETRY_DELAYS, *, blocking: bool = False) -> Any:
    """The one retry policy as a tenacity AsyncRetrying (Retrying when `blocking`): a Failure of
    a RETRYABLE kind is tried again after each of `delays` (or its `Retry-After`); anything
    else is raised at once."""
    from tenacity import AsyncRetrying, Retrying, retry_if_exception, stop_after_attempt

    return (Retrying if blocking else AsyncRetrying)(
        stop=stop_after_attempt(len(delays) + 1),
        wait=backoff(delays),
        retry=retry_if_exception(lambda exc: isinstance(exc, Failure) and exc.retryable),
        reraise=True,
    )


class _Try:
    """One attempt's block: what it raises is classified into a Failure before tenacity sees it."""

    def __init__(self, attempt: Any, classify: Callable[[Exception], Failure | None]) -> None:
        self.attempt = attempt
        self.classify = classify

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> Any:
        if isinstance(exc, Exception) and not isinstance(exc, (Failure, VmemError)):
            failure = self.classify(exc)
            if failure is not None:
                failure.__cause__ = exc
                kind, exc = Failure, failure
        return self.attempt.__exit__(kind, exc, tb)


async def attempts(
    service: Service,
    what: str,
    classify: Callable[[Exception], Failure | None],
    delays: tuple[float, ...] = RETRY_DELAYS,
) -> AsyncIterator[_Try]:
    """The attempts of one call under the retry policy, for a block that cannot be a function:

        async for attempt in fail.attempts(service, "saving", classify):
            with attempt:
                ...

    A failure left after the last retry is raised as `report(service, failure, what, retries)`;
    exceptions `classify` does not know (bugs) and VmemErrors propagate as they are.
    """
    tried = 0
    try:
        async for attempt in retrying(delays):
            tried += 1
            yield _Try(attempt, classify)
    except Failure as failure:
        raise report(service, failure, what, tried - 1) from None


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    *,
    classify: Callable[[Exception], Failure | None],
    report: Callable[[Failure, int], Exception],
    delays: tuple[float, ...] = RETRY_DELAYS,
) -> T:
    """Await `fn` under the retry policy, then raise `report(failure, retries)` for what is left.

    `classify` returns None for exceptions that are not the service's (bugs): they propagate,
    as do VmemErrors the call raised itself.
    """
    tried = 0
    try:
        async for attempt in retrying(delays):
            tried += 1
            with _Try(attempt, classify):
                return await fn()
    except Failure as failure:
        raise report(failure, tried - 1) from None
    raise AssertionError("unreachable: tenacity either returns or raises")


async def call(
    service: Service,
    what: str,
    fn: Callable[[], Awaitable[T]],
    *,
    classify: Callable[[Exception], Failure | None],
    delays: tuple[float, ...] = RETRY_DELAYS,
) -> T:
    """`call_with_retries` whose failure left is `report(service, failure, what, retries)`."""
    return await call_with_retries(
        fn, classify=classify, report=lambda failure, retries: report(service, failure, what, retries), delays=delays
    )


def call_sync(
    fn: Callable[[], T],
    *,
    classify: Callable[[Exception], Failure | None],
    report: Callable[[Failure, int], Exception],
    delays: tuple[float, ...] = RETRY_DELAYS,
) -> T:
    """`call_with_retries` for a blocking call (the HTTP embedders, mem0's client constructor)."""
    tried = 0
    try:
        for attempt in retrying(delays, blocking=True):
            tried += 1
            with _Try(attempt, classify):
                return fn()
    except Failure as failure:
        raise report(failure, tried - 1) from None
    raise AssertionError("unreachable: tenacity either returns or raises")
