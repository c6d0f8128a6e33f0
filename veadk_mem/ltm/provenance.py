"""Where a memory came from: the provenance vmem records when it saves one (issue #42, item 1).

A memory vmem saves from a session carries its source: app, user, session, the event ids
whose content became the memory string, their author, the event time, the policy that kept
it, when vmem saved it, and vmem's version. Each backend keeps these where its layout holds
them without changing what VeADK reads (docs/ltm.md, "Provenance"); a memory an agent saved
itself has none, shown as "source: not recorded".

`fields` is the flat form (str and float values only, as llama-index's flat metadata and a
Redis hash require); `from_fields` reads it back from any of them, tolerating what an older
vmem wrote (only app, session, event and author).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from veadk_mem import __version__

# The flat keys, as stored (also the `source` object's keys in --json, with event_ids a list).
KEYS = (
    "app_name",
    "user_id",
    "session_id",
    "event_ids",
    "author",
    "event_time",
    "policy",
    "saved_at",
    "vmem_version",
)


@dataclass
class Provenance:
    """The source of one memory, as vmem knew it when it saved the memory."""

    app_name: str = ""
    user_id: str = ""
    session_id: str = ""
    event_ids: list[str] = field(default_factory=list)
    author: str = ""
    event_time: float | None = None
    policy: str = ""
    saved_at: float | None = None
    vmem_version: str = __version__

    def to_json(self) -> dict[str, Any]:
        """The `source` object of `ltm list/search --json` and of an export line."""
        return {
            "app_name": self.app_name,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "event_ids": list(self.event_ids),
            "author": self.author,
            "event_time": self.event_time,
            "policy": self.policy,
            "saved_at": self.saved_at,
            "vmem_version": self.vmem_version,
        }

    def fields(self) -> dict[str, str | float]:
        """The flat form a store keeps: strings and numbers, event_ids as a JSON array, empty values left out."""
        flat: dict[str, str | float] = {
            "app_name": self.app_name,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "event_ids": json.dumps(self.event_ids, ensure_ascii=False) if self.event_ids else "",
            "author": self.author,
            "policy": self.policy,
            "vmem_version": self.vmem_version,
        }
        if self.event_time is not None:
            flat["event_time"] = float(self.event_time)
        if self.saved_at is not None:
            flat["saved_at"] = float(self.saved_at)
        return {k: v for k, v in flat.items() if v != ""}

    def label(self) -> str:
        """One short line for a table: `session/event` (and `+N` more events)."""
        event = self.event_ids[0] if self.event_ids else ""
        more = f" +{len(self.event_ids) - 1}" if len(self.event_ids) > 1 else ""
        return f"{self.session_id}/{event}{more}" if event else self.session_id


NOT_RECORDED = "not recorded"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (str, bytes)):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _event_ids(value: Any, fallback: Any) -> list[str]:
    """event_ids as stored (a JSON array text, or a list), else the single event_id of an older vmem."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        if isinstance(parsed, list):
            return [str(v) for v in parsed]
        return [value]
    return [str(fallback)] if fallback not in (None, "") else []


def from_fields(meta: dict[str, Any] | None) -> Provenance | None:
    """The provenance held in a store's flat fields (or a `source` object), or None when none was
    recorded: a memory a VeADK agent saved itself, or one imported without a source."""
    if not meta:
        return None
    session, event = str(meta.get("session_id") or ""), meta.get("event_id")
    events = _event_ids(meta.get("event_ids"), event)
    version = str(meta.get("vmem_version") or "")
    if not (session or events or version):
        return None
    return Provenance(
        app_name=str(meta.get("app_name") or ""),
        user_id=str(meta.get("user_id") or ""),
        session_id=session,
        event_ids=events,
        author=str(meta.get("author") or ""),
        event_time=_number(meta.get("event_time")),
        policy=str(meta.get("policy") or ""),
        saved_at=_number(meta.get("saved_at")),
        vmem_version=version,
    )


def policy_name(policy: Any) -> str:
    """The name a memory records for the policy that kept it: the preset, the [policy.NAME], a
    file path or `inline JSON` (a ResolvedPolicy's origin, shortened)."""
    origin = str(getattr(policy, "origin", "") or "")
    if origin.startswith("preset "):
        return origin.removeprefix("preset ")
    if origin.startswith("config [policy.") and origin.endswith("]"):
        return origin.removeprefix("config [policy.")[:-1]
    if origin:
        return origin
    preset = getattr(getattr(policy, "policy", policy), "preset", "")
    return str(preset or "")
