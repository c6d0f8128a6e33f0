"""What the HTTP-based hosted backends (mem0) share: an httpx transport that counts what it sends.

mem0ai's client raises one generic error for any failed answer, so the transport keeps the
status of the last answer, which tells a rejected key from a dead server when the SDK only
says "error". Retries are not made here: every backend retries in one place, the policy of
`veadk_mem.failure` (tenacity), around the SDK call.
"""

from __future__ import annotations

import httpx  # this module loads only with a hosted backend


class CountingTransport(httpx.BaseTransport):
    """Sends each request once, counting them (`requests`, for the benchmark and the tests)
    and keeping the status of the last answer (`last_status`)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.requests = 0
        self.last_status: int | None = None
        self.last_headers: httpx.Headers | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.last_status, self.last_headers = None, None
        response = self.inner.handle_request(request)
        self.last_status, self.last_headers = response.status_code, response.headers
        return response

    def close(self) -> None:
        self.inner.close()
