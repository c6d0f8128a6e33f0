"""A dry run of a policy over sessions, for `vmem policy test` and `vmem ltm save --dry-run`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from veadk_mem.events import Session
from veadk_mem.policy.decision import Decision, evaluate
from veadk_mem.policy.model import ResolvedPolicy, Warn


@dataclass
class DryRun:
    """Every decision of a policy over one or more sessions, in event order."""

    policy: ResolvedPolicy
    decisions: list[Decision] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)

    @property
    def saved(self) -> list[str]:
        """The memory strings VeADK would save, session after session."""
        return [d.memory for d in self.decisions if d.memory is not None]

    def summary(self) -> str:
        """`n saved / m events, b bytes` for people."""
        size = sum(len(s.encode("utf-8")) for s in self.saved)
        sessions = f" in {len(self.session_ids)} sessions" if len(self.session_ids) > 1 else ""
        return f"{len(self.saved)} saved / {len(self.decisions)} events{sessions}, {size} bytes"

    def to_dict(self) -> dict[str, Any]:
        """The `vmem policy test --json` object of DESIGN.md."""
        return {
            "policy": self.policy.to_dict(),
            "saved": self.saved,
            "events": [d.to_dict() for d in self.decisions],
        }


def dry_run(sessions: Iterable[Session], policy: ResolvedPolicy, *, warn: Warn | None = None) -> DryRun:
    """Apply a policy to every event of every session, as VeADK's add_session_to_memory would."""
    result = DryRun(policy)
    for session in sessions:
        result.session_ids.append(session.id)
        for decision in evaluate(session.events, policy, warn=warn):
            decision.session_id = session.id
            result.decisions.append(decision)
    return result
