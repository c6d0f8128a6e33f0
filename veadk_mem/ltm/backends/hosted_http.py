"""What the HTTP-based hosted backends (mem0, openviking) share: an httpx transport that retries with backoff.

A hosted service answers 429 when it is rate limiting and 5xx when it is briefly unwell;
both are worth a few retries before reporting. The waits are `RETRY_DELAYS` (or the
service's `Retry-After`, capped), so a run against a dead service gives up in seconds.
"""

from __future__ import annotations

import time

import httpx  # this module loads only with a hosted backend

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_DELAYS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
MAX_RETRY_AFTER = 30.0


def retry_after(headers: httpx.Headers | dict[str, str], default: float) -> float:
    """The wait a 429/503 asks for in `Retry-After` (seconds), else `default`; capped."""
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        wait = float(value) if value is not None else default
    except ValueError:
        wait = default
    return max(0.0, min(wait, MAX_RETRY_AFTER))


def status_reason(status: int) -> str:
    """A short plain-words reason for an HTTP status a service answered."""
    if status in (401, 403):
        return "refused the credentials"
    if status == 429:
        return "is rate limiting"
    if status >= 500:
        return "failed on its side"
    return "rejected the request"


class RetryTransport(httpx.BaseTransport):
    """Sends each request, again after a wait while the answer is 429 or 5xx.

    Counts every HTTP request it sends (`requests`, retries included) so the benchmark
    and the tests can say how many a save took; `last_status` is the status of the last
    answer, which tells a rejected key from a dead server when an SDK only says "error".
    """

    def __init__(self, delays: tuple[float, ...] | None = None) -> None:
        self.inner = httpx.HTTPTransport()
        self.delays = RETRY_DELAYS if delays is None else delays
        self.requests = 0
        self.retries = 0
        self.last_status: int | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()  # a body sent again must be whole
        for delay in (*self.delays, None):
            self.requests += 1
            response = self.inner.handle_request(request)
            self.last_status = response.status_code
            if response.status_code not in RETRY_STATUSES or delay is None:
                return response
            wait = retry_after(response.headers, delay)
            response.close()
            self.retries += 1
            time.sleep(wait)
        raise AssertionError("unreachable")  # the loop always returns

    def close(self) -> None:
        self.inner.close()
