"""The outcome of one `vmem doctor` check, shared by every module that contributes a check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Check:
    """The outcome of one check: ok, fail or skip, with a detail that never holds a secret."""

    name: str
    status: str
    detail: str
    exit_code: int = 1  # what a failed check makes `vmem doctor` exit with (4: an SDK is missing)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}
