"""What the HTTP-based hosted backends (mem0) share: an httpx transport that retries with backoff.

mem0ai's client raises one generic error for any failed answer, so the retries of 429 and
5xx happen below it, in the transport, with the waits and `Retry-After` rule of
`veadk_mem.ltm.failure` (tenacity), before the SDK sees the answer.
"""

from __future__ import annotations

import httpx  # this module loads only with a hosted backend

from veadk_mem.ltm.failure import RETRY_DELAYS, RETRY_STATUSES, backoff, retry_after


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

    def _send(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        response = self.inner.handle_request(request)
        self.last_status = response.status_code
        return response

    def _before_sleep(self, state: object) -> None:
        outcome = getattr(state, "outcome", None)
        if outcome is not None and not outcome.failed:
            outcome.result().close()
        self.retries += 1

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        from tenacity import Retrying, retry_if_result, stop_after_attempt

        request.read()  # a body sent again must be whole
        retrying = Retrying(
            stop=stop_after_attempt(len(self.delays) + 1),
            wait=backoff(self.delays, asked=lambda response: retry_after(getattr(response, "headers", None))),
            retry=retry_if_result(lambda response: response.status_code in RETRY_STATUSES),
            before_sleep=self._before_sleep,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )
        response: httpx.Response = retrying(self._send, request)
        return response

    def close(self) -> None:
        self.inner.close()
