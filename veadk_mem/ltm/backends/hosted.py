"""What the hosted backends (viking, tos_context) share: credentials as VeADK reads them, retries.

VeADK reads Volcengine AK/SK from `VOLCENGINE_*` (`BYTEPLUS_*` when `CLOUD_PROVIDER` or
`AGENTKIT_CLOUD_PROVIDER` is `byteplus`), else from the VeFaaS IAM file a cloud function
is given. Every SDK call runs in a worker thread (the SDKs are synchronous) through
`call_with_retries`, which retries throttling (429), server errors (5xx) and unreachable
endpoints with backoff and turns what is left into one `VmemError` line; secrets never
enter a message.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings

T = TypeVar("T")

VEFAAS_IAM_CREDENTIAL_PATH = "/var/run/secrets/iam/credential"
RETRY_DELAYS = (0.5, 1.0, 2.0)


def cloud_provider(environ: Mapping[str, str]) -> str:
    """`volcengine` or `byteplus`, as VeADK picks it (AGENTKIT_CLOUD_PROVIDER, then CLOUD_PROVIDER)."""
    return (environ.get("AGENTKIT_CLOUD_PROVIDER") or environ.get("CLOUD_PROVIDER") or "volcengine").strip().lower()


def key_names(provider: str) -> tuple[str, str, str]:
    """The AK, SK and STS token variables VeADK reads for this cloud provider."""
    prefix = "BYTEPLUS" if provider == "byteplus" else "VOLCENGINE"
    return f"{prefix}_ACCESS_KEY", f"{prefix}_SECRET_KEY", f"{prefix}_SESSION_TOKEN"


@dataclass(frozen=True)
class Credentials:
    """An AK/SK pair (and STS token) plus where it came from; repr never shows the values."""

    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    session_token: str = field(default="", repr=False)
    source: str = ""


def volcengine_credentials(
    settings: VmemSettings,
    environ: Mapping[str, str],
    *,
    provider: str | None = None,
    iam_path: str = VEFAAS_IAM_CREDENTIAL_PATH,
) -> Credentials | None:
    """AK/SK as VeADK finds them: the environment (or [volcengine] in the config), else the VeFaaS IAM file."""
    provider = provider or cloud_provider(environ)
    ak_name, sk_name, token_name = key_names(provider)
    if provider == "byteplus":
        ak, sk, token = environ.get(ak_name, ""), environ.get(sk_name, ""), environ.get(token_name, "")
    else:
        volc = settings.volcengine
        ak, sk = volc.access_key.get_secret_value(), volc.secret_key.get_secret_value()
        token = volc.session_token.get_secret_value()
    if ak and sk:
        return Credentials(ak, sk, token, f"{ak_name}/{sk_name}")
    path = Path(iam_path)
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return Credentials(
                str(data["access_key_id"]),
                str(data["secret_access_key"]),
                str(data.get("session_token") or ""),
                f"VeFaaS IAM file {iam_path}",
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return None


def region_fallback(configured: str, environ: Mapping[str, str]) -> str:
    """The configured region, else $REGION, else cn-beijing (VeADK's order)."""
    return configured or environ.get("REGION", "").strip() or "cn-beijing"


class Failure(Exception):
    """One failed call to a hosted service, classified so the retry loop and the message agree.

    kind: auth (401/403), throttled (429), server (5xx), unreachable (no connection),
    malformed (a reply that is not the documented shape), missing (no such collection,
    bucket or set), refused (any other error the service answered with).
    """

    RETRYABLE = frozenset({"throttled", "server", "unreachable"})

    def __init__(self, kind: str, detail: str = "", *, status: int | None = None, code: object = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = one_line(detail)
        self.status = status
        self.code = code

    @property
    def retryable(self) -> bool:
        return self.kind in self.RETRYABLE

    def http(self) -> str:
        """`HTTP 429` / `HTTP 401, code 1000001` / `code 1000005`, for messages."""
        parts = []
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        if self.code not in (None, "", 0):
            parts.append(f"code {self.code}")
        return ", ".join(parts)


def one_line(text: str, limit: int = 200) -> str:
    """A service's message as one short line (replies can hold HTML pages or stack traces)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def connection_reason(text: str) -> str:
    """`Connection refused` out of a requests/urllib3 error chain, else a short form of it."""
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


async def call_with_retries(
    fn: Callable[[], T],
    *,
    classify: Callable[[Exception], Failure | None],
    report: Callable[[Failure, int], Exception],
    delays: tuple[float, ...] = RETRY_DELAYS,
) -> T:
    """Run a blocking SDK call in a thread; retry what `classify` calls retryable, then `report` it.

    `classify` returns None for exceptions that are not the service's (bugs): they propagate.
    `report(failure, attempts)` builds the VmemError raised once retries are used up.
    """
    attempt = 0
    while True:
        try:
            return await asyncio.to_thread(fn)
        except Exception as exc:
            failure = exc if isinstance(exc, Failure) else classify(exc)
            if failure is None:
                raise
            if failure.retryable and attempt < len(delays):
                await asyncio.sleep(delays[attempt])
                attempt += 1
                continue
            raise report(failure, attempt + 1) from None


def environ() -> Mapping[str, str]:
    """The process environment (a function so tests and callers can pass their own)."""
    return os.environ
