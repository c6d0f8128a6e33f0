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
        """`n saved / m events, b bytes` for people (a lone surrogate counted as its 3 bytes)."""
        size = sum(len(s.encode("utf-8", "surrogatepass")) for s in self.saved)
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
    """Apply a policy to every event of every session, as VeADK's add_session_to_memory would.

    A kept memory with no UTF-8 encoding (a lone surrogate) stays saved, as VeADK keeps it,
    and is warned of: no store can hold it, so `ltm save` reports and skips that session.
    """
    result = DryRun(policy)
    for session in sessions:
        result.session_ids.append(session.id)
        for decision in evaluate(session.events, policy, warn=warn):
            decision.session_id = session.id
            result.decisions.append(decision)
            if warn is not None and decision.memory is not None and not decision.memory.isascii():
                _warn_unencodable(session.id, decision, warn)
    return result


def _warn_unencodable(session_id: str, decision: Decision, warn: Warn) -> None:
    """One warning when a memory string holds a lone surrogate (no UTF-8 encoding)."""
    assert decision.memory is not None
    try:
        decision.memory.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = f"\\u{ord(decision.memory[exc.start]):04x}"
        warn(
            f"session {session_id}: event {decision.event.id}: the memory holds a lone surrogate ({char}):"
            " VeADK keeps it, but no store can hold it, so `ltm save` skips this session"
        )
