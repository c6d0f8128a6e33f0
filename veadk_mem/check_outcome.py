"""The outcome of one `vmem doctor` check, shared by every module that contributes a check."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Check:
    """The outcome of one check: ok, fail or skip, with a detail that never holds a secret.

    store names what was actually checked (the database as given, the memory store's path or
    endpoint); facts are the structured figures `doctor --json` gives scripts (layout, counts),
    latency_ms how long the check took."""

    name: str
    status: str
    detail: str
    exit_code: int = 1  # what a failed check makes `vmem doctor` exit with (4: an SDK is missing)
    store: str = ""
    latency_ms: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        latency = None if self.latency_ms is None else round(self.latency_ms, 1)
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "store": self.store,
            "latency_ms": latency,
            **self.facts,
        }
