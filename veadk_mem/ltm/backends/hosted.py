"""What the Volcengine backends (viking, tos_context) share: credentials as VeADK reads them.

VeADK reads Volcengine AK/SK from `VOLCENGINE_*` (`BYTEPLUS_*` when `CLOUD_PROVIDER` or
`AGENTKIT_CLOUD_PROVIDER` is `byteplus`), else from the VeFaaS IAM file a cloud function
is given. Retries and failure messages are every backend's: `veadk_mem.failure`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.ltm.base import LongTermMemoryBackend

if TYPE_CHECKING:
    from veadk_mem.config import VmemSettings

VEFAAS_IAM_CREDENTIAL_PATH = "/var/run/secrets/iam/credential"


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


def environ() -> Mapping[str, str]:
    """The process environment (a function so tests and callers can pass their own)."""
    return os.environ


class VolcengineBackend(LongTermMemoryBackend):
    """What a Volcengine backend is built from: the index, the settings, the environment it reads keys from."""

    def __init__(
        self,
        index: str,
        *,
        settings: VmemSettings | None = None,
        env: Mapping[str, str] | None = None,
        **_: Any,
    ) -> None:
        from veadk_mem.config import VmemSettings

        self.index = index
        self.settings = settings or VmemSettings()
        self.env = environ() if env is None else env
        self.configure()

    def configure(self) -> None:
        """Read this backend's own settings (called once `index`, `settings` and `env` are set)."""
